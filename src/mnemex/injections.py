"""The injection log: each prompt the hooks answered, the block they injected into it or
why they injected nothing, and the scores that decided it.

The prompt hook writes an :class:`~mnemex.results.Injection` per prompt
(:meth:`mnemex.Store.log_injection`) when the ``injection_log`` setting is on (the
default); every write deletes entries older than ``injection_log_days`` and all but the
newest ``injection_log_entries``, so the log stays small. ``mnemex ui`` reads it. The
SQL here is SQLite's; :mod:`mnemex.engine.postgres.injections` is PostgreSQL's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from mnemex.config import MAX_SEARCH_LIMIT, check_count
from mnemex.engine import engine_of
from mnemex.errors import InvalidInput
from mnemex.text import clean_namespace, format_time, json_fields, parse_stored_time, utcnow

if TYPE_CHECKING:
    from mnemex.engine.sqlite import SqliteSession

OUTCOMES: Final = ("injected", "nothing")
MAX_PROMPT_CHARS: Final = 8_000  # of a prompt as logged (the hook asks recall about 4,000)
MAX_BLOCK_CHARS: Final = 65_536
MAX_LABEL_CHARS: Final = 200  # agent, session id, event
COLUMNS: Final = (
    "seq, created_at, namespace, agent, session_id, event, prompt, outcome, block, detail"
)
"""What an entry is read from, in :func:`entry`'s order."""


@dataclass(frozen=True, slots=True)
class Injected:
    """A memory the prompt hook weighed for a prompt: its score, and whether it went into
    the block (``reason`` says why not: ``own session``, ``did not fit``)."""

    id: str
    kind: str
    score: float
    injected: bool
    line: str = ""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "id kind score injected line reason", score=round(self.score, 6))


@dataclass(frozen=True, slots=True)
class Injection:
    """One prompt the hooks answered: the block injected into it (``outcome``
    ``injected``), or why nothing was (``nothing``), and the scores that decided it.

    ``id`` is 0 until the entry is stored (:meth:`mnemex.Store.log_injection`);
    ``floor`` is the relevance floor's decision (:attr:`mnemex.models.SearchResult.floor`).
    """

    id: int
    created_at: datetime
    namespace: str
    agent: str
    session_id: str
    event: str
    prompt: str
    outcome: str
    block: str = ""
    tokens: int = 0
    budget_tokens: int = 0
    mode_used: str = ""
    notes: tuple[str, ...] = ()
    memories: tuple[Injected, ...] = ()
    floor: dict[str, Any] | None = None

    @property
    def injected(self) -> tuple[Injected, ...]:
        """The memories that went into the block, in its order."""
        return tuple(m for m in self.memories if m.injected)

    def to_dict(self) -> dict[str, Any]:
        return json_fields(
            self,
            "id created_at namespace agent session_id event prompt outcome block tokens "
            "budget_tokens mode_used notes memories floor",
        )


@dataclass(frozen=True, slots=True)
class InjectionSession:
    """An agent session in the injection log: its prompts, and how many got a block."""

    session_id: str
    agent: str
    namespace: str
    prompts: int
    injected: int
    first_at: datetime
    last_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "session_id agent namespace prompts injected first_at last_at")


def _postgres(session: SqliteSession) -> Any:
    if engine_of(session) == "SQLite":
        return None
    from mnemex.engine.postgres import injections as pg_injections

    return pg_injections


def row_of(entry: Injection) -> tuple[Any, ...]:
    """The columns after ``seq`` of an entry, checked: a namespace, a known outcome, texts
    within their bounds (longer ones are cut)."""
    if entry.outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}, got {entry.outcome!r}")
    labels = [_label(value, name) for name, value in _labels(entry)]
    detail = {
        "tokens": int(entry.tokens),
        "budget_tokens": int(entry.budget_tokens),
        "mode_used": str(entry.mode_used),
        "notes": [str(n) for n in entry.notes],
        "memories": [m.to_dict() for m in entry.memories],
        "floor": entry.floor,
    }
    return (
        entry.created_at,
        clean_namespace(entry.namespace),
        *labels,
        str(entry.prompt)[:MAX_PROMPT_CHARS],
        entry.outcome,
        str(entry.block)[:MAX_BLOCK_CHARS],
        json.dumps(detail, ensure_ascii=False, sort_keys=True),
    )


def _labels(entry: Injection) -> list[tuple[str, object]]:
    return [("agent", entry.agent), ("session_id", entry.session_id), ("event", entry.event)]


def _label(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, got {type(value).__name__}")
    return value[:MAX_LABEL_CHARS]


def log(session: SqliteSession, entry: Injection) -> int | None:
    """Store ``entry`` and prune the log; its id, or ``None`` when the log is off."""
    settings = session.settings
    if not settings.injection_log:
        return None
    row = row_of(entry)
    oldest = utcnow() - timedelta(days=settings.injection_log_days)
    keep = settings.injection_log_entries
    pg = _postgres(session)
    if pg is not None:
        return int(pg.log(session, row, oldest, keep))
    stored = (format_time(row[0]), *row[1:])
    with session.transaction() as conn:
        seq = conn.execute(
            f"INSERT INTO injections ({COLUMNS.split(', ', 1)[1]}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            stored,
        ).lastrowid
        assert seq is not None
        conn.execute("DELETE FROM injections WHERE created_at < ?", (format_time(oldest),))
        conn.execute("DELETE FROM injections WHERE seq <= ?", (seq - keep,))
    return int(seq)


def read(
    session: SqliteSession,
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
    pg = _postgres(session)
    if pg is not None:
        parts, params = _where(namespace, session_id, before, "%s")
        return [entry(r) for r in pg.read(session, parts, params, limit)]
    parts, params = _where(namespace, session_id, before)
    with session.connection() as conn:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM injections WHERE 1{parts} ORDER BY seq DESC LIMIT ?",
            [*params, limit],
        ).fetchall()
    return [entry(r) for r in rows]


def one(session: SqliteSession, ident: int) -> Injection | None:
    """The entry with this id, or ``None``."""
    if isinstance(ident, bool) or not isinstance(ident, int):
        raise InvalidInput(f"an injection id is a whole number, got {ident!r}")
    pg = _postgres(session)
    if pg is not None:
        found = pg.one(session, ident)
    else:
        with session.connection() as conn:
            found = conn.execute(
                f"SELECT {COLUMNS} FROM injections WHERE seq = ?", (ident,)
            ).fetchone()
    return None if found is None else entry(found)


def sessions(session: SqliteSession, namespace: str | None, limit: int) -> list[InjectionSession]:
    """The agent sessions in the log, the latest first."""
    limit = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    pg = _postgres(session)
    if pg is not None:
        rows = pg.sessions(session, *_where(namespace, None, None, "%s"), limit)
    else:
        parts, params = _where(namespace, None, None)
        with session.connection() as conn:
            rows = conn.execute(
                "SELECT session_id, agent, namespace, count(*), "
                "sum(outcome = 'injected'), min(created_at), max(created_at) "
                f"FROM injections WHERE 1{parts} GROUP BY session_id, agent, namespace "
                "ORDER BY max(seq) DESC LIMIT ?",
                [*params, limit],
            ).fetchall()
    return [
        InjectionSession(
            str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), _time(r[5]), _time(r[6])
        )
        for r in rows
    ]


def _where(
    namespace: str | None, session_id: str | None, before: int | None, mark: str = "?"
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
    """The entry of a row of :data:`COLUMNS` (``detail`` as JSON text or as a mapping)."""
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
