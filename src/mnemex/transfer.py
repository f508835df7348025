"""JSONL import and export. One memory or relation per line; export and import round-trip.

A memory line is a JSON object with at least ``content``; the other keys are
those of :meth:`mnemex.store.Store.add` (``id``, ``kind``, ``tags``,
``source``, ``confidence``, ``pinned``, ``created_at``, ``metadata``) plus
``updated_at`` and, with ``keep_namespaces``, ``namespace``. A relation line
has ``"type": "relation"``, ``subject``, ``predicate`` and ``object``, and
optionally ``id``, ``confidence``, ``source_memory``, ``created_at``,
``updated_at`` and ``namespace``. Export writes every field, memories first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from mnemex import relations as relations_db
from mnemex.config import DEFAULT_CONFIDENCE
from mnemex.engine import NamespaceArg
from mnemex.engine.sqlite.session import Conflict
from mnemex.errors import InvalidInput, MnemexError
from mnemex.results import ImportReport, LineError
from mnemex.rows import prepare
from mnemex.store import Store
from mnemex.text import ALL_NAMESPACES_LABEL, clean_namespace, parse_time, utcnow

Progress = Callable[[int], None]  # called with the number of lines handled since the last call
IMPORT_BATCH = 2_000
_MAX_SHOWN_ERRORS = 20
NEW_IDS_HINT = "import with --new-ids to give the file's memories new ids"
_RELATION_KEYS = frozenset(
    "type id namespace subject predicate object confidence source_memory created_at "
    "updated_at".split()
)


def import_jsonl(
    store: Store,
    lines: Iterable[bytes | str],
    *,
    namespace: str | None = None,
    keep_namespaces: bool = False,
    strict: bool = False,
    skip_existing: bool = True,
    new_ids: bool = False,
    embed: bool = True,
    progress: Progress | None = None,
) -> ImportReport:
    """Import memories from JSONL lines.

    Bad lines (invalid UTF-8 or JSON, JSON nested too deeply, invalid or out-of-range
    fields) are reported with their line numbers and skipped; the good ones are imported
    in batches of ``IMPORT_BATCH`` lines, each batch in its own transaction (and then
    embedded, unless ``embed`` is false). With ``strict``, any bad line imports nothing
    at all. Lines whose ``id`` already exists are skipped (counted in ``skipped``, and by
    namespace in ``skipped_in`` when the id is another namespace's memory) unless
    ``skip_existing`` is false, which makes them errors.

    Ids are the store's, not a namespace's: a memory has one id in the whole store. With
    ``new_ids`` every memory and relation gets a new id (a relation whose
    ``source_memory`` is a memory of the file follows it to its new id), so that a file
    exported from one namespace imports into another of the same store.
    """
    ns = store.resolve_namespace(namespace)
    assert ns is not None
    now, max_bytes = utcnow(), store.settings.max_content_bytes
    rows: list[tuple[Any, ...]] = []
    errors: list[LineError] = []
    imported = 0
    ids: list[str] = []
    places: list[tuple[str, str]] = []  # (id, namespace) of each memory line
    relation_rows: list[tuple[int, tuple[Any, ...]]] = []  # (line number, row)
    on_conflict: Conflict = "skip" if skip_existing else "error"
    renamed: dict[str, str] = {}  # with new_ids: a memory's id in the file -> its new id

    def flush() -> None:
        nonlocal imported
        imported += _store_batch(store, rows, on_conflict, embed, progress)
        ids.extend(r[0] for r in rows)
        places.extend((r[0], r[1]) for r in rows)
        rows.clear()

    for number, line in enumerate(lines, start=1):
        try:
            item = _parse_line(line)  # None: a blank line
            if item is not None:
                kind, row, old = _line_row(item, ns, now, keep_namespaces, max_bytes, new_ids)
                if kind == "relation":
                    relation_rows.append((number, row))
                else:
                    rows.append(row)
                    renamed.update({old: row[0]} if old else {})
        except _BAD_LINE as exc:
            errors.append(LineError(number, _line_message(exc)))
            item = None
        if progress and item is None:
            progress(1)  # a good line moves the progress when it is stored
        if not strict and len(rows) >= IMPORT_BATCH:
            flush()
    if renamed:  # a relation follows its source memory of the file to its new id
        relation_rows = [(n, _with_source(row, renamed.get(row[8]))) for n, row in relation_rows]
    known = _new_here(store, rows)
    relation_rows = _with_sources(store, relation_rows, known, errors)
    errors.sort(key=lambda e: e.line)
    if strict and errors:
        _refuse(errors)
    flush()  # with strict, everything in one transaction: all or nothing
    related = 0
    if relation_rows:
        related = len(relations_db.store_rows(store.session, [row for _, row in relation_rows]))
        if progress:
            progress(len(relation_rows))
    skipped = len(ids) - imported + len(relation_rows) - related  # ids already taken
    elsewhere = _skipped_in(store, places) if len(ids) > imported else {}
    return ImportReport(imported, skipped, tuple(errors), tuple(ids), related, elsewhere)


def _line_row(
    item: dict[str, Any],
    ns: str,
    now: Any,
    keep_namespaces: bool,
    max_bytes: int,
    new_ids: bool,
) -> tuple[str, tuple[Any, ...], str | None]:
    """A line's object as ``("memory" | "relation", its row, the id it had in the file)``;
    the id is given only when ``new_ids`` gave the memory a new one."""
    kind = item.pop("type", "memory")
    old = item.pop("id", None) if new_ids else None
    given = item.get("namespace")
    if keep_namespaces and isinstance(given, str) and given.strip() == ALL_NAMESPACES_LABEL:
        # A store written before '*' was reserved exports lines in it.
        raise InvalidInput(
            f"namespace {ALL_NAMESPACES_LABEL!r} is reserved (it names every namespace) and "
            "cannot be kept: import the file without --keep-namespaces (keep_namespaces="
            "False) to put these lines in the namespace you import into (-n NAME)"
        )
    if kind == "relation":
        return kind, _relation_row(item, ns, keep_namespaces), None
    if kind == "memory":
        row = prepare(item, ns, now, keep_namespaces, max_bytes)
        return kind, row, old if isinstance(old, str) else None
    raise InvalidInput(f"type must be memory or relation, got {kind!r}")


def _refuse(errors: list[LineError]) -> None:
    """A strict import with bad lines: nothing is imported."""
    shown = "; ".join(f"line {e.line}: {e.message}" for e in errors[:3])
    raise InvalidInput(
        f"{len(errors)} bad line(s), nothing imported (strict): {shown}"
        + (" ..." if len(errors) > 3 else "")
    )


def _store_batch(
    store: Store,
    rows: list[tuple[Any, ...]],
    on_conflict: Conflict,
    embed: bool,
    progress: Progress | None,
) -> int:
    """Insert (and embed) prepared rows; how many were new. Progress moves as the
    memories are embedded, then by the rest (skipped, or stored without a vector)."""
    if not rows:
        return 0
    with store.session.connection():
        done, seqs = store.session.insert_prepared(rows, on_conflict)
    store.session.after_write()
    moved = 0

    def step(n: int) -> None:
        nonlocal moved
        moved += n
        if progress:
            progress(n)

    if embed:
        store.session.embedding.embed_new(seqs, progress=step)
    if progress:
        progress(max(0, len(rows) - moved))
    return done


# What validating one line's values can raise: the line is reported and skipped.
# (Writing happens later, per batch, and is not covered.)
_BAD_LINE = (InvalidInput, ValueError, TypeError, OverflowError, RecursionError)


def _line_message(exc: BaseException) -> str:
    if isinstance(exc, InvalidInput):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "nested too deeply to read; flatten the line"
    return f"not a valid memory ({type(exc).__name__}: {exc})"


def _relation_row(item: dict[str, Any], ns: str, keep_namespaces: bool) -> tuple[Any, ...]:
    unknown = set(item) - _RELATION_KEYS
    if unknown:
        raise InvalidInput(
            f"unknown relation field(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(sorted(_RELATION_KEYS))}"
        )
    for key in ("subject", "predicate", "object"):
        if key not in item:
            raise InvalidInput(f"a relation needs a {key!r} field")
    namespace = ns
    if keep_namespaces and item.get("namespace") is not None:
        namespace = clean_namespace(item["namespace"])
    created, updated = item.get("created_at"), item.get("updated_at")
    return relations_db.relation_row(
        namespace,
        item["subject"],
        item["predicate"],
        item["object"],
        DEFAULT_CONFIDENCE if item.get("confidence") is None else item["confidence"],
        item.get("source_memory"),
        None if updated is None else parse_time(updated, what="updated_at"),
        relation_id=item.get("id"),
        created_at=None if created is None else parse_time(created, what="created_at"),
    )


def _with_source(row: tuple[Any, ...], source: str | None) -> tuple[Any, ...]:
    return row if source is None else (*row[:8], source, *row[9:])


def _new_here(store: Store, rows: list[tuple[Any, ...]]) -> set[tuple[str, str]]:
    """(namespace, id) of the rows about to be stored: those whose id no memory holds yet,
    or holds in the row's own namespace (ids are the store's, so a row whose id is
    another namespace's memory is skipped)."""
    if not rows:
        return set()
    held = store.namespaces_of([row[0] for row in rows])
    return {(row[1], row[0]) for row in rows if held.get(row[0], row[1]) == row[1]}


def _skipped_in(store: Store, places: list[tuple[str, str]]) -> dict[str, int]:
    """Of these (id, namespace) lines, how many were skipped because their id is a memory
    of another namespace, by that namespace."""
    out: dict[str, int] = {}
    for start in range(0, len(places), IMPORT_BATCH):
        chunk = places[start : start + IMPORT_BATCH]
        held = store.namespaces_of([ident for ident, _ in chunk])
        for ident, ns in chunk:
            other = held.get(ident, ns)
            if other != ns:
                out[other] = out.get(other, 0) + 1
    return dict(sorted(out.items()))


def _with_sources(
    store: Store,
    relation_rows: list[tuple[int, tuple[Any, ...]]],
    imported: set[tuple[str, str]],
    errors: list[LineError],
) -> list[tuple[int, tuple[Any, ...]]]:
    """The relation rows whose source memory is in this import or the store; the rest are errors."""
    good = []
    for number, row in relation_rows:
        namespace, source = row[1], row[8]
        if (
            source is not None
            and (namespace, source) not in imported
            and not store.get(source, namespace=namespace).memories
        ):
            held = store.namespaces_of(source).get(source)
            where = f"neither in the file nor in namespace {namespace!r}"
            if held is not None:
                where = f"a memory of namespace {held!r}, not {namespace!r}: {NEW_IDS_HINT}"
            errors.append(LineError(number, f"source_memory {source!r} is {where}"))
            continue
        good.append((number, row))
    return good


def _parse_line(line: bytes | str) -> dict[str, Any] | None:
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"not valid UTF-8 at byte {exc.start}") from None
    text = line.strip()
    if not text:
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise InvalidInput("JSON nested too deeply to read; flatten the line") from None
    except ValueError:  # an integer with more digits than Python reads
        raise InvalidInput("not valid JSON (a number too long to read)") from None
    if not isinstance(item, dict):
        raise InvalidInput(f"expected a JSON object, got {type(item).__name__}")
    return item


def export_lines(store: Store, *, namespace: NamespaceArg = None) -> Iterator[str]:
    """JSONL lines (without newline): every memory, then every relation, oldest first."""
    for memory in store.iter_memories(namespace=namespace):
        yield json.dumps(memory.to_dict(), ensure_ascii=False)
    for relation in store.iter_relations(namespace=namespace):
        yield json.dumps({"type": "relation", **relation.to_dict()}, ensure_ascii=False)


def export_jsonl(store: Store, out: IO[str], *, namespace: NamespaceArg = None) -> int:
    count = 0
    for line in export_lines(store, namespace=namespace):
        out.write(line + "\n")
        count += 1
    return count


def describe_errors(errors: Iterable[LineError], limit: int = _MAX_SHOWN_ERRORS) -> list[str]:
    errors = list(errors)
    lines = [f"line {e.line}: {e.message}" for e in errors[:limit]]
    if len(errors) > limit:
        lines.append(f"... and {len(errors) - limit} more")
    return lines


__all__ = ["MnemexError", "describe_errors", "export_jsonl", "export_lines", "import_jsonl"]
