"""The injection log: each prompt the hooks answered, the block they injected into it or
why they injected nothing, and the scores that decided it.

The prompt hook writes an entry per prompt (:meth:`mnemex.Store.log_injection`; read
back as :class:`~mnemex.results.Injection`) when the ``injection_log`` setting is on (the
default); every write deletes entries older than ``injection_log_days`` and all but the
newest ``injection_log_entries``, so the log stays small. ``mnemex ui`` reads it.
The statements are each engine's (``session.injections``:
:mod:`mnemex.engine.sqlite.injections`, :mod:`mnemex.engine.postgres.injections`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from mnemex.config import MAX_SEARCH_LIMIT, check_count
from mnemex.errors import InvalidInput
from mnemex.text import clean_namespace, parse_stored_time, parse_time, utcnow

if TYPE_CHECKING:
    from mnemex.engine.protocol import Session
    from mnemex.results import Injection, InjectionSession

OUTCOMES: Final = ("injected", "nothing")
MAX_PROMPT_CHARS: Final = 8_000  # of a prompt as logged (the hook asks recall about 4,000)
MAX_BLOCK_CHARS: Final = 65_536
MAX_LABEL_CHARS: Final = 200  # agent, session id, event


def row_of(namespace: str, fields: Mapping[str, Any]) -> tuple[Any, ...]:
    """The columns after ``seq`` of an entry (the keyword arguments of
    :meth:`mnemex.Store.log_injection`), checked: a namespace, a known outcome, texts
    within their bounds (longer ones are cut), each memory weighed with its id, kind,
    score and whether it was injected."""
    outcome = fields["outcome"]
    if outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    labels = [
        _text(fields.get(name, ""), name, MAX_LABEL_CHARS)
        for name in ("agent", "session_id", "event")
    ]
    detail = {
        "tokens": check_count("tokens", fields.get("tokens", 0), 0, 2**31),
        "budget_tokens": check_count("budget_tokens", fields.get("budget_tokens", 0), 0, 2**31),
        "mode_used": str(fields.get("mode_used", "")),
        "notes": [str(n) for n in fields.get("notes", ())],
        "memories": [_weighed(m) for m in fields.get("memories", ())],
        "floor": None if fields.get("floor") is None else dict(fields["floor"]),
    }
    given = fields.get("created_at")
    created = utcnow() if given is None else parse_time(given, what="created_at")
    return (
        created,
        clean_namespace(namespace),
        *labels,
        _text(fields["prompt"], "prompt", MAX_PROMPT_CHARS),
        outcome,
        _text(fields.get("block", ""), "block", MAX_BLOCK_CHARS),
        json.dumps(detail, ensure_ascii=False, sort_keys=True),
    )


def _weighed(memory: Mapping[str, Any]) -> dict[str, Any]:
    """A memory recall weighed for the prompt: id, kind, score, injected, line, reason."""
    try:
        return {
            "id": _text(memory["id"], "a memory's id", MAX_LABEL_CHARS),
            "kind": _text(memory["kind"], "a memory's kind", MAX_LABEL_CHARS),
            "score": round(float(memory["score"]), 6),
            "injected": bool(memory["injected"]),
            "line": str(memory.get("line", "")),
            "reason": str(memory.get("reason", "")),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(
            f"each memory weighed needs id, kind, score and injected ({exc!r})"
        ) from None


def _text(value: object, name: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, got {type(value).__name__}")
    return value[:limit]


def log(session: Session, namespace: str, fields: Mapping[str, Any]) -> int | None:
    """Store an entry and prune the log; its id, or ``None`` when the log is off."""
    settings = session.settings
    if not settings.injection_log:
        return None
    row = row_of(namespace, fields)
    oldest = utcnow() - timedelta(days=settings.injection_log_days)
    keep = settings.injection_log_entries
    return int(session.injections.log(session, row, oldest, keep))


def read(
    session: Session,
    namespace: str | None,
    session_id: str | None,
    before: int | None,
    limit: int,
) -> list[Injection]:
    """Entries newest first: of the namespace (``None``: all), of one agent session, with
    ids below ``before``; at most ``limit``."""
    limit = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    if before is not None:
        before = check_count("before", before, 1, 2**62)
    ops = session.injections
    parts, params = _where(namespace, session_id, before, ops.MARK)
    return [entry(r) for r in ops.read(session, parts, params, limit)]


def one(session: Session, ident: int) -> Injection | None:
    """The entry with this id, or ``None``."""
    if isinstance(ident, bool) or not isinstance(ident, int):
        raise InvalidInput(f"an injection id is a whole number, got {ident!r}")
    found = session.injections.one(session, ident)
    return None if found is None else entry(found)


def sessions(session: Session, namespace: str | None, limit: int) -> list[InjectionSession]:
    """The agent sessions in the log, the latest first."""
    from mnemex.results import InjectionSession

    limit = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    ops = session.injections
    rows = ops.sessions(session, *_where(namespace, None, None, ops.MARK), limit)
    return [
        InjectionSession(
            str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), _time(r[5]), _time(r[6])
        )
        for r in rows
    ]


def _where(
    namespace: str | None, session_id: str | None, before: int | None, mark: str
) -> tuple[str, list[object]]:
    """``AND ...`` conditions on the log and their parameters, with the engine's ``mark``."""
    parts, params = "", list[object]()
    for column, value in (("namespace", namespace), ("session_id", session_id)):
        if value is not None:
            parts += f" AND {column} = {mark}"
            params.append(value)
    if before is not None:
        parts += f" AND seq < {mark}"
        params.append(before)
    return parts, params


def _time(value: str | datetime) -> datetime:
    """A time as stored: SQLite's text, PostgreSQL's timestamptz (in UTC)."""
    return parse_stored_time(value) if isinstance(value, str) else value.astimezone(UTC)


def entry(row: Sequence[Any]) -> Injection:
    """The entry of a row of the engine's ``COLUMNS`` (``detail`` as JSON text or as a
    mapping)."""
    from mnemex.results import Injected, Injection

    seq, created, namespace, agent, session_id, event, prompt, outcome, block, detail = row
    data = json.loads(detail) if isinstance(detail, str) else dict(detail)
    memories = tuple(
        Injected(
            str(m["id"]),
            str(m["kind"]),
            float(m["score"]),
            bool(m["injected"]),
            str(m.get("line", "")),
            str(m.get("reason", "")),
        )
        for m in data.get("memories", ())
    )
    return Injection(
        id=int(seq),
        created_at=_time(created),
        namespace=namespace,
        agent=agent,
        session_id=session_id,
        event=event,
        prompt=prompt,
        outcome=outcome,
        block=block,
        tokens=int(data.get("tokens", 0)),
        budget_tokens=int(data.get("budget_tokens", 0)),
        mode_used=str(data.get("mode_used", "")),
        notes=tuple(str(n) for n in data.get("notes", ())),
        memories=memories,
        floor=data.get("floor"),
    )
