"""Capture: a session's new turns as memories, in the project's namespace.

Each turn gives up to three memories, tagged with the agent, the session and
the turn: the user's prompt (kind ``prompt``), the assistant's final answer
(``answer``) and one line of the files edited and commands run
(``actions``). Their ids derive from the agent and the turn's anchor (the
prompt line's uuid, or the transcript file and byte offset), so capturing the
same turn twice, from a hook or a backfill, stores it once. Where the last
capture of a session stopped is kept in the store's ``meta`` table, so each
capture reads only the lines appended since. Every text is redacted
(:mod:`mnemex.hooks.redact`) before it is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.hooks import ACTIONS, ANSWER, KINDS, PROMPT, transcript
from mnemex.hooks.project import project_namespace
from mnemex.hooks.redact import redact
from mnemex.records import dataclass
from mnemex.text import hash_function

__all__ = ["KINDS", "CaptureReport", "capture", "memories", "memory_id", "project_namespace"]

if TYPE_CHECKING:
    from mnemex.store import Store

_SUFFIX = {PROMPT: "p", ANSWER: "a", ACTIONS: "x"}
MAX_MEMORY_CHARS = 12_000  # a longer answer is cut (4 bytes a character at most: within 64 KB)
# An answer is stored after its question ("Q: ...\nA: ..."), at most this much of it: a
# later prompt on the same topic shares words with the question, which the answer alone
# often lacks, and so passes the relevance floor.
QUESTION_CHARS = 300
STATE_PREFIX = "hooks:"  # meta key: hooks:<agent>:<session id>


@dataclass(frozen=True, slots=True)
class CaptureReport:
    """What a capture read from a transcript and stored."""

    turns: int  # complete turns read
    stored: int  # memories new to the store
    bad_lines: int
    skipped_lines: int


def memory_id(agent: str, anchor: str, kind: str) -> str:
    digest = hash_function("sha1")(f"{agent}\0{anchor}".encode()).hexdigest()[:20]
    return f"{agent}-{digest}-{_SUFFIX[kind]}"


def memories(
    turns: list[transcript.Turn], agent: str, session_id: str, transcript_path: str
) -> list[dict[str, Any]]:
    """The memories of these turns, redacted, ready for :meth:`Store.add_many`."""
    from mnemex.errors import InvalidInput
    from mnemex.text import parse_time, summarize

    out: list[dict[str, Any]] = []
    session_tag = f"session:{session_id}"[:64]
    for turn in turns:
        created: str | None = turn.timestamp
        if created is not None:
            try:
                parse_time(created, what="timestamp")
            except InvalidInput:
                created = None
        answer = turn.answer
        if answer.strip() and turn.prompt.strip():
            answer = f"Q: {summarize(turn.prompt, QUESTION_CHARS)}\nA: {answer}"
        for kind, text in ((PROMPT, turn.prompt), (ANSWER, answer), (ACTIONS, turn.actions)):
            content = redact(text).strip()
            if not content:
                continue
            if len(content) > MAX_MEMORY_CHARS:
                content = content[: MAX_MEMORY_CHARS - 1] + "…"
            out.append(
                {
                    "id": memory_id(agent, turn.anchor, kind),
                    "kind": kind,
                    "content": content,
                    "tags": [agent, session_tag, f"turn:{turn.number}"],
                    "source": f"{agent}:{session_id}",
                    "created_at": created,
                    "metadata": {
                        "agent": agent,
                        "session": session_id,
                        "turn": turn.number,
                        "transcript": transcript_path,
                    },
                }
            )
    return out


def capture(
    store: Store,
    agent: str,
    session_id: str,
    transcript_path: str | os.PathLike[str],
    *,
    final: bool = False,
    namespace: str | None = None,
    embed: bool = False,
) -> CaptureReport:
    """Store the turns of the session added since its last capture (and, with ``embed``,
    embed them before returning)."""
    path = str(Path(transcript_path).expanduser())
    state = _state(store, agent, session_id)
    start, number = 0, 1
    if state.get("path") == path and 0 < int(state.get("offset", 0)) <= os.path.getsize(path):
        start, number = int(state["offset"]), int(state.get("next_turn", 1))
    read = transcript.read(path, agent, start=start, first_number=number, final=final)
    stored = 0
    items = memories(read.turns, agent, session_id, path)
    if items:
        before = store.count(namespace=namespace)
        store.add_many(items, namespace=namespace, on_conflict="skip", embed=embed)
        stored = store.count(namespace=namespace) - before
    if read.next_offset != start or not state:
        _save_state(
            store,
            agent,
            session_id,
            {"path": path, "offset": read.next_offset, "next_turn": read.next_number},
        )
    return CaptureReport(len(read.turns), stored, read.bad_lines, read.skipped_lines)


def _key(agent: str, session_id: str) -> str:
    return f"{STATE_PREFIX}{agent}:{session_id}"


def _state(store: Store, agent: str, session_id: str) -> dict[str, Any]:
    text = store.state(_key(agent, session_id))
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _save_state(store: Store, agent: str, session_id: str, value: dict[str, Any]) -> None:
    store.set_state(_key(agent, session_id), json.dumps(value, sort_keys=True))
