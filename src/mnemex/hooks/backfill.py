"""Backfill: the sessions an agent already wrote to disk, captured as the hooks would have.

``mnemex import claude-code [DIR]`` reads ``~/.claude/projects/**/*.jsonl``
(subagent transcripts excepted: they are side chains), ``mnemex import codex
[DIR]`` reads ``~/.codex/sessions/**/*.jsonl``. Each session goes to the
namespace of the project it ran in (the git root of its ``cwd``). Memory ids
are those a hook gives the same turn, so a second import, or an import of
sessions the hooks captured, stores nothing new. A line that is not JSON is
counted and skipped; a file that cannot be read is counted and skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.hooks import transcript
from mnemex.hooks.capture import memories, project_namespace
from mnemex.hooks.transcript import CLAUDE_CODE, CODEX
from mnemex.records import dataclass

if TYPE_CHECKING:
    from mnemex.store import Store


@dataclass
class BackfillReport:
    files: int = 0
    sessions: int = 0  # files with at least one turn
    turns: int = 0
    stored: int = 0  # memories new to the store
    bad_lines: int = 0
    bad_files: list[str] = field(default_factory=list)
    namespaces: dict[str, int] = field(default_factory=dict)  # new memories per namespace

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "sessions": self.sessions,
            "turns": self.turns,
            "stored": self.stored,
            "bad_lines": self.bad_lines,
            "bad_files": self.bad_files,
            "namespaces": self.namespaces,
        }


def default_folder(agent: str) -> Path:
    if agent == CLAUDE_CODE:
        return Path.home() / ".claude" / "projects"
    if agent == CODEX:
        return Path.home() / ".codex" / "sessions"
    from mnemex.errors import InvalidInput

    raise InvalidInput(f"unknown agent {agent!r}; use claude-code or codex")


def transcripts(agent: str, folder: Path) -> list[Path]:
    """The session transcripts under ``folder``, oldest first."""
    found = [
        p
        for p in folder.rglob("*.jsonl")
        if p.is_file() and not (agent == CLAUDE_CODE and p.name.startswith("agent-"))
    ]
    return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)))


def backfill(
    store: Store,
    agent: str,
    folder: str | Path | None = None,
    *,
    namespace: str | None = None,
    progress: Callable[[int], None] | None = None,
    files: list[Path] | None = None,
) -> BackfillReport:
    """Capture every session transcript under ``folder`` (each into its project's namespace,
    or all into ``namespace`` when given)."""
    from mnemex.errors import MnemexError

    root = Path(folder).expanduser() if folder is not None else default_folder(agent)
    if not root.is_dir():
        from mnemex.errors import InvalidInput

        raise InvalidInput(f"{root} is not a folder of {agent} sessions; name the folder to read")
    report = BackfillReport()
    for path in files if files is not None else transcripts(agent, root):
        report.files += 1
        try:
            read = transcript.read(path, agent, final=True)
            report.bad_lines += read.bad_lines
            if read.turns:
                session = read.session_id or path.stem
                ns = namespace or project_namespace(read.cwd or str(root))
                items = memories(read.turns, agent, session, str(path))
                before = store.count(namespace=ns)
                store.add_many(items, namespace=ns, on_conflict="skip")
                new = store.count(namespace=ns) - before
                report.sessions += 1
                report.turns += len(read.turns)
                report.stored += new
                if new:
                    report.namespaces[ns] = report.namespaces.get(ns, 0) + new
        except (OSError, UnicodeDecodeError, MnemexError) as exc:
            report.bad_files.append(f"{path}: {exc}")
        if progress is not None:
            progress(1)
    return report
