"""Check a built wheel and sdist (scripts/check_dist.sh): ``check_wheel.py WHEEL TREE_WHEEL SDIST``.

The wheel must hold every file git tracks under ``src/mnemex`` (the code, ``py.typed``, the
tokenizer and its licence note, the sample memories, any data file) and nothing else but its
metadata, with the ``mnemex`` command as its entry point; the wheel built from the sdist must
equal the one built from the tree, file for file; the sdist must hold what the tests read.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What the sdist must carry besides src/: enough to run the tests and build the docs.
SDIST_NEEDS = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "Makefile",
    "mkdocs.yml",
    "docs/index.md",
    "scripts/docs_reference.py",
    "tests/conftest.py",
    "tests/reference/minilm-vectors.npy",
    "tests/reference/minilm-texts.json",
)


def contents(wheel: Path) -> dict[str, str]:
    """Each file of a wheel (its RECORD aside, which names the others' hashes) by its hash."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: hashlib.sha256(archive.read(name)).hexdigest()
            for name in archive.namelist()
            if not name.endswith(".dist-info/RECORD")
        }


def tracked() -> set[str]:
    """The files git tracks under src/mnemex, as the wheel names them."""
    listed = subprocess.run(
        ["git", "ls-files", "src/mnemex"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {name.removeprefix("src/") for name in listed}


def problems(wheel: Path, tree_wheel: Path, sdist: Path) -> list[str]:
    found = contents(wheel)
    package = {name for name in found if not name.split("/", 1)[0].endswith(".dist-info")}
    out = [f"missing from the wheel: {name}" for name in sorted(tracked() - package)]
    out += [f"in the wheel but not tracked: {name}" for name in sorted(package - tracked())]
    with zipfile.ZipFile(wheel) as archive:
        entry = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        if "mnemex = mnemex.entry:main" not in archive.read(entry).decode():
            out.append(f"{entry} does not name the mnemex command")
    other = contents(tree_wheel)
    out += [
        f"the wheel from the sdist and the one from the tree differ at {name}"
        for name in sorted(set(found) | set(other))
        if found.get(name) != other.get(name)
    ]
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    out += [f"missing from the sdist: {name}" for name in SDIST_NEEDS if name not in names]
    return out


def main() -> None:
    wheel, tree_wheel, sdist = (Path(arg) for arg in sys.argv[1:4])
    found = problems(wheel, tree_wheel, sdist)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        sys.exit(1)
    print(f"{wheel.name}: {len(contents(wheel))} files, the same from the sdist; sdist complete")


if __name__ == "__main__":
    main()
