"""The README and every page of docs/ run as written: every shell and Python block of a
page, in order, in a new home.

Each ```sh / ```bash block runs under ``bash -euo pipefail`` and each ```python
block under this Python, as real subprocesses sharing one temporary ``HOME``
(a page's own) and one working folder that holds the bundled sample memories (as
the CLI tour asks the reader to have), beside a git repository
``~/code/ledgerly`` (the reader's project, where hooks are installed). A block is
skipped only when the line just above its fence is
``<!-- readme-test: skip: REASON -->``: servers that run until stopped, installs,
and commands that need data or tools this machine does not have.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import PYTHON, python_env

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
SAMPLE = ROOT / "src" / "mnemex" / "data" / "sample_memories.jsonl"
SHELLS = {"sh", "bash", "shell"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
SKIP = re.compile(r"skip:\s*(\S.*)")
BLOCK_SECONDS = 300


@dataclass(frozen=True)
class Block:
    page: str  # the file, relative to the repository
    lang: str
    code: str
    line: int  # of the opening fence, 1-based
    skip: str | None  # the reason given by the marker above it

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang})"


def page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block, with the skip reason of the marker on the line above its fence."""
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        above = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARK.fullmatch(above.strip())
        reason = None
        if marker:
            skip = SKIP.fullmatch(marker.group(1))
            assert skip, f"{page}:{line - 1}: a marker must read `readme-test: skip: REASON`"
            reason = skip.group(1)
        found.append(Block(page, match.group(1).lower(), match.group(2), line, reason))
    return found


def runnable(path: Path) -> list[Block]:
    blocks = readme_blocks(path.read_text(encoding="utf-8"), page_name(path))
    return [b for b in blocks if b.lang in SHELLS | {"python"} and b.skip is None]


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_markers_name_a_reason_and_sit_on_a_block(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    blocks = readme_blocks(text, page_name(path))
    marked = [b for b in blocks if b.skip is not None]
    assert len(marked) == len(MARK.findall(text)), "a readme-test marker is not above a fence"
    assert all(b.lang in SHELLS | {"python"} for b in marked), marked
    for block in marked:
        assert len(block.skip or "") >= 10, f"{block}: say why it is skipped"


def test_the_tours_run() -> None:
    """Each way in shows something that runs: the README's tours, and each guide's."""
    blocks = runnable(README)
    assert len(blocks) >= 4 and any(b.lang == "python" for b in blocks)
    pages = {page_name(path) for path in PAGES if runnable(path)}
    guides = {"cli", "python", "mcp", "hooks", "workspaces", "postgres"}
    assert {f"docs/guides/{name}.md" for name in guides} <= pages, pages


def test_links_and_images_work_off_the_repository() -> None:
    """On a package index a relative link or image points nowhere."""
    text = README.read_text(encoding="utf-8")
    prose = FENCE.sub("", text)
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)", prose) + re.findall(
        r"<img[^>]+src=\"([^\"]+)\"", prose
    )
    relative = [t for t in targets if not t.startswith(("https://", "http://", "#"))]
    assert not relative, relative


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in PAGES if runnable(p)], ids=page_name)
def test_every_example_runs(path: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    work = home / "work"
    project = home / "code" / "ledgerly"  # the reader's project, where hooks are installed
    for folder in (work, project):
        folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    shutil.copy(SAMPLE, work / SAMPLE.name)
    env = {
        key: value
        for key, value in python_env().items()
        if not key.startswith(("MNEMEX_", "XDG_", "OPENAI_"))
    }
    bin_dir = str(Path(PYTHON).parent)
    env.update(
        HOME=str(home),
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),
        NO_COLOR="1",
        COLUMNS="100",
    )
    ran = []
    for block in runnable(path):
        command = (
            ["bash", "-euo", "pipefail", "-c", block.code]
            if block.lang in SHELLS
            else [PYTHON, "-c", block.code]
        )
        done = subprocess.run(
            command,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_SECONDS,
            check=False,
        )
        assert done.returncode == 0, (
            f"{block} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
            f"\n--- stderr\n{done.stderr[-3000:]}"
        )
        assert "Traceback" not in done.stderr, f"{block}\n{done.stderr[-3000:]}"
        ran.append(block)
    assert ran
