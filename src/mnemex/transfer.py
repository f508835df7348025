"""JSONL import and export. One memory per line; export and import round-trip.

A line is a JSON object with at least ``content``; the other keys are those
of :meth:`mnemex.store.Store.add` (``id``, ``kind``, ``tags``, ``source``,
``confidence``, ``pinned``, ``created_at``, ``metadata``) plus ``updated_at``
and, with ``keep_namespaces``, ``namespace``. Export writes every field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from mnemex.errors import InvalidInput, MnemexError
from mnemex.models import ImportReport, LineError
from mnemex.store import Conflict, NamespaceArg, Store
from mnemex.text import utcnow

Progress = Callable[[int], None]  # called with the number of lines handled since the last call
IMPORT_BATCH = 2_000
_MAX_SHOWN_ERRORS = 20


def import_jsonl(
    store: Store,
    lines: Iterable[bytes | str],
    *,
    namespace: str | None = None,
    keep_namespaces: bool = False,
    strict: bool = False,
    skip_existing: bool = True,
    embed: bool = True,
    progress: Progress | None = None,
) -> ImportReport:
    """Import memories from JSONL lines.

    Bad lines (invalid UTF-8 or JSON, invalid fields) are reported with their
    line numbers and skipped; the good ones are imported in batches of
    ``IMPORT_BATCH`` lines, each batch in its own transaction (and then
    embedded, unless ``embed`` is false). With
    ``strict``, any bad line imports nothing at all. Lines whose ``id``
    already exists are skipped (counted in ``skipped``) unless
    ``skip_existing`` is false, which makes them errors.
    """
    ns = store._ns(namespace)
    assert ns is not None
    now = utcnow()
    rows: list[tuple[Any, ...]] = []
    errors: list[LineError] = []
    imported = skipped = 0
    ids: list[str] = []
    on_conflict: Conflict = "skip" if skip_existing else "error"

    def flush() -> None:
        nonlocal imported, skipped
        if not rows:
            return
        with store._lock, store._errors():
            done, seqs = store._insert(rows, on_conflict)
        store._wrote()
        if embed:
            store._embed_new(seqs)
        imported += done
        skipped += len(rows) - done
        ids.extend(r[0] for r in rows)
        if progress:
            progress(len(rows))
        rows.clear()

    for number, line in enumerate(lines, start=1):
        try:
            item = _parse_line(line)
            if item is None:
                continue
            rows.append(store._row(item, ns, now, keep_namespaces))
        except (InvalidInput, ValueError) as exc:
            errors.append(LineError(number, str(exc)))
            continue
        if not strict and len(rows) >= IMPORT_BATCH:
            flush()
    if strict and errors:
        shown = "; ".join(f"line {e.line}: {e.message}" for e in errors[:3])
        raise InvalidInput(
            f"{len(errors)} bad line(s), nothing imported (strict): {shown}"
            + (" ..." if len(errors) > 3 else "")
        )
    if strict:
        # One transaction for everything: all or nothing.
        with store._lock, store._errors():
            done, seqs = store._insert(rows, on_conflict)
        store._wrote()
        if embed:
            store._embed_new(seqs)
        imported, skipped = done, len(rows) - done
        ids.extend(r[0] for r in rows)
        if progress:
            progress(len(rows))
        rows.clear()
    else:
        flush()
    return ImportReport(imported=imported, skipped=skipped, errors=tuple(errors), ids=tuple(ids))


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
    if not isinstance(item, dict):
        raise InvalidInput(f"expected a JSON object, got {type(item).__name__}")
    return item


def export_lines(store: Store, *, namespace: NamespaceArg = None) -> Iterator[str]:
    """JSONL lines (without newline) of every memory, oldest first."""
    for memory in store.iter_memories(namespace=namespace):
        yield json.dumps(memory.to_dict(), ensure_ascii=False)


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
