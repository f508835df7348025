"""Fail when a function in src/ is longer than 80 lines, from its ``def`` to its last line.

    python scripts/check_function_length.py [--max N] [PATH ...]

Lists every such function as ``path:line name (N lines)``, longest first, and
exits 1; exits 0 when there is none. Decorators do not count; nested functions
count in their own right and inside the function that holds them.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_LINES = 80
ROOT = Path(__file__).resolve().parent.parent


def long_functions(path: Path, limit: int) -> Iterator[tuple[int, str, int]]:
    """(line of the def, qualified name, lines) of each function in ``path`` over ``limit``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[int, str, int]]:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}."
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > limit:
                    yield child.lineno, name[:-1], lines
            yield from walk(child, name)

    yield from walk(tree, "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "src"])
    parser.add_argument("--max", type=int, default=MAX_LINES, help="most lines a function may have")
    args = parser.parse_args(argv)
    files = sorted(f for p in args.paths for f in ([p] if p.is_file() else p.rglob("*.py")))
    found = [
        (lines, f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}", name)
        for path in files
        for line, name, lines in long_functions(path, args.max)
    ]
    for lines, where, name in sorted(found, key=lambda f: (-f[0], f[1])):
        print(f"{where} {name} ({lines} lines)")
    if found:
        print(f"{len(found)} function(s) longer than {args.max} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
