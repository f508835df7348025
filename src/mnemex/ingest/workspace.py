"""Markdown workspaces in the store: register, sync, status, write-through.

A workspace is a folder (its ``MEMORY.md`` and ``memory/**/*.md`` by
default) indexed into one namespace. The files are the truth; a sync makes
the index say what they say:

1. **Scan** the folder for files the globs match (sizes and mtimes only).
2. **Compare** with the ``files`` table: a file whose size and mtime are
   unchanged is skipped unread (unless it was modified so shortly before it
   was last read that a change could hide in the same mtime tick); others
   are read and hashed (SHA-256), and only a new hash is chunked.
3. **Write**, a batch of whole files per transaction (a file is never half
   written; one file that cannot be stored does not stop the others):
   a chunk whose text is unchanged keeps its memory, id and vector, even
   when it moved within its file; new chunks are inserted; chunks gone from
   their file are deleted, after any new chunk with the same text has been
   given their vector (so moved text is never embedded again). A file that
   disappeared while another with the same hash appeared was renamed: its
   rows move to the new path, nothing is re-embedded. Deleted files go last,
   in the final batch, with their chunks (triggers: no ghost rows).
4. **Embed** the workspace's chunks that lack a vector, after the commits.

Every chunk is a memory of kind ``chunk`` (or, for an entry that
:func:`append` wrote, the kind and tags in its heading) whose ``source`` is its file's
path, so every search mode, filter, decay stage and recall works on it. Its
time is the date in its file name (``memory/2025-11-27.md``) or else the
file's mtime; ``MEMORY.md`` and undated files under ``memory/`` are
evergreen, exempt from decay (:func:`mnemex.search.rank.evergreen_source`).
A chunk's id is derived from the workspace, its path, its text and which
occurrence of that text in the file it is: the same text at the same place
keeps its id across syncs.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import field, replace
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

from mnemex.config import CHUNK_KIND, check_patterns
from mnemex.errors import InvalidInput, MnemexError, StoreLocked
from mnemex.ingest import files
from mnemex.ingest.chunk import CHUNKER_VERSION, ENTRY_TITLE, chunk_markdown
from mnemex.models import Location
from mnemex.records import dataclass
from mnemex.results import Appended, FileProblem, SyncReport, WorkspaceStatus
from mnemex.rows import prepare
from mnemex.text import (
    clean_content,
    clean_label,
    clean_tags,
    content_hash,
    format_time,
    parse_stored_time,
    parse_time,
    utcnow,
)

if TYPE_CHECKING:
    from mnemex.engine.sqlite.session import SqliteSession
    from mnemex.engine.workspaces import Conn, WorkspaceTables

Progress = Callable[[str, int, int], None]  # (phase, done, total)

BATCH_FILES = 500  # files per write transaction
BATCH_CHUNKS = 5_000  # chunks per write transaction (a transaction may exceed it by one file)
# What a sync counts, per file and per chunk (fields of _Tally and of SyncReport).
COUNTS = ("added", "changed", "renamed", "deleted", "unchanged", "chunks_added", "chunks_removed")
_DATED = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")


@dataclass(frozen=True, slots=True)
class Workspace:
    """A registered workspace: its folder, namespace, patterns and how its files are cut."""

    id: int
    root: str
    namespace: str
    globs: tuple[str, ...]
    ignore: tuple[str, ...]
    chunking: str
    synced_at: str | None = None
    last_sync: dict[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return Path(self.root)

    @property
    def chunk_sizes(self) -> tuple[int, int]:
        """(tokens, overlap) this workspace's files are cut with."""
        sizes = self.chunking.rsplit(" ", 1)[-1].split("/")
        return int(sizes[0]), int(sizes[1])


def chunking_key(tokens: int, overlap: int) -> str:
    return f"{CHUNKER_VERSION} {tokens}/{overlap}"


def resolve_root(directory: str | os.PathLike[str], *, must_exist: bool = True) -> str:
    """The workspace folder as an absolute path with symbolic links resolved."""
    path = Path(directory).expanduser()
    if not must_exist:
        return str(path.resolve())
    try:
        resolved = path.resolve(strict=True)
    except OSError:
        raise InvalidInput(f"workspace folder {str(path)!r} does not exist") from None
    if not resolved.is_dir():
        raise InvalidInput(f"workspace {str(path)!r} is not a folder")
    return str(resolved)


def chunk_id(namespace: str, root: str, path: str, digest: str, occurrence: int) -> str:
    """A chunk's stable id: 16 base32 characters of a hash of where it is and what it says."""
    key = "\0".join((namespace, root, path, digest, str(occurrence))).encode("utf-8")
    return base64.b32encode(hashlib.sha256(key).digest()[:10]).decode("ascii").lower()


def file_time(path: str, mtime_ns: int) -> datetime:
    """A chunk's time: the date its file is named after (``2025-11-27.md``), else its mtime."""
    match = _DATED.match(PurePosixPath(path).name)
    if match:
        with contextlib.suppress(ValueError):
            day = date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
    return datetime.fromtimestamp(mtime_ns / 1e9, UTC)


# -- the workspaces table (its statements: the session's ``workspaces``) ----------------


def _workspace(row: Sequence[Any]) -> Workspace:
    """The workspace of a row of ``WORKSPACE_COLUMNS`` (the order of :class:`Workspace`'s
    fields)."""
    ident, root, namespace, globs, ignore, chunking, synced_at, last_sync = row
    patterns = tuple(json.loads(globs)), tuple(json.loads(ignore))
    return Workspace(ident, root, namespace, *patterns, chunking, synced_at, json.loads(last_sync))


def _tables(session: SqliteSession) -> WorkspaceTables:
    return session.workspaces


def find(session: SqliteSession, conn: Conn, root: str, namespace: str) -> Workspace | None:
    row = _tables(session).find(conn, root, namespace)
    return _workspace(row) if row else None


def listed(session: SqliteSession, conn: Conn, namespace: str | None) -> list[Workspace]:
    """The workspaces of a namespace (all when ``None``)."""
    return [_workspace(r) for r in _tables(session).listed(conn, namespace)]


def register(
    session: SqliteSession,
    conn: Conn,
    root: str,
    namespace: str,
    patterns: tuple[Sequence[str], Sequence[str]],
    chunking: str,
) -> Workspace:
    """Create the workspace or update its patterns (globs, ignore) and chunking (in a
    write transaction)."""
    globs, ignore = (json.dumps(list(p)) for p in patterns)
    _tables(session).register(
        conn, root, namespace, (globs, ignore), chunking, format_time(utcnow())
    )
    found = find(session, conn, root, namespace)
    assert found is not None
    return found


def sync_folder(
    session: SqliteSession,
    directory: str | os.PathLike[str],
    namespace: str,
    globs: Iterable[str] | str | None,
    ignore: Iterable[str] | str | None,
    *,
    embed: bool = True,
    progress: Progress | None = None,
) -> SyncReport:
    """Register ``directory`` as a workspace of ``namespace`` (patterns ``None``: those it
    has, or the settings' for a new one), then :func:`sync` it."""
    root = resolve_root(directory)
    globs = None if globs is None else _patterns(globs, "globs")
    ignore = None if ignore is None else _patterns(ignore, "ignore", empty=True)
    settings = session.settings
    chunking = chunking_key(settings.chunk_tokens, settings.chunk_overlap)
    with session.transaction() as conn:
        old = find(session, conn, root, namespace)
        ws = register(
            session,
            conn,
            root,
            namespace,
            (
                globs if globs is not None else old.globs if old else settings.workspace_globs,
                ignore if ignore is not None else old.ignore if old else settings.workspace_ignore,
            ),
            old.chunking if old else chunking,  # a new chunking once every file has it
        )
    with session.errors():
        return sync(
            session,
            replace(ws, chunking=chunking),
            embed=embed,
            progress=progress,
            rechunk=ws.chunking != chunking,
        )


def _patterns(values: Iterable[str] | str, what: str, *, empty: bool = False) -> tuple[str, ...]:
    items = [values] if isinstance(values, str) else list(values)
    try:
        patterns = check_patterns(items, what)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if not patterns and not empty:
        raise InvalidInput(f"{what} needs at least one pattern, such as memory/**/*.md")
    return patterns


def remove(session: SqliteSession, directory: str | os.PathLike[str], namespace: str) -> int:
    """Delete a workspace, its files and their chunks (never the files); how many chunks."""
    root = resolve_root(directory, must_exist=False)
    tables = _tables(session)
    with session.transaction() as conn:
        ws = find(session, conn, root, namespace)
        if ws is None:
            raise InvalidInput(f"{root} is not a workspace of namespace {namespace!r}")
        tables.lock(conn, ws.id)
        chunks = tables.chunk_count(conn, ws.id)
        tables.delete(conn, ws.id)
    session.after_write()
    return chunks


# -- comparing the disk with the index --------------------------------------------------


class _Known(NamedTuple):
    """A file's row in ``files``, with how many chunk rows it really has."""

    id: int
    size: int
    mtime_ns: int
    read_ns: int
    sha256: str | None
    chunks: int
    error: str | None
    actual: int


def _known(
    session: SqliteSession, conn: Conn, workspace_id: int, *, count: bool
) -> dict[str, _Known]:
    """The files rows of a workspace by path; with ``count``, their real chunk counts
    (a chunk forgotten through the API makes its file be read again), else the recorded."""
    rows = _tables(session).files(conn, workspace_id, count=count)
    return {r[0]: _Known(*r[1:]) for r in rows}


def _cached(
    session: SqliteSession, conn: Conn, ws: Workspace
) -> tuple[dict[str, _Known], dict[str, files.Stat] | None]:
    """The files rows as last read, unless the store changed since (the tables' ``version``
    for other connections, the store's write count for this one); and, when no file needs
    a second look (racily clean), the sizes and mtimes a scan finds when nothing changed."""
    version = (_tables(session).version(conn, ws.id), session.generation)
    cached = session.files_cache.get(ws.id)
    if cached is not None and cached[0] == version:
        return cached[1], cached[2]
    known = _known(session, conn, ws.id, count=False)
    racy = any(k.error is None and files.racy(k.mtime_ns, k.read_ns) for k in known.values())
    settled = None if racy else {path: files.Stat(k.size, k.mtime_ns) for path, k in known.items()}
    session.files_cache[ws.id] = (version, known, settled)
    return known, settled


def _needs_read(known: _Known | None, stat: files.Stat, retry: bool) -> bool:
    """Whether a file must be read: new, changed size or mtime, racily clean, chunks
    missing from the index, or (with ``retry``) a file that could not be indexed."""
    if known is None:
        return True
    if known.error is not None:
        return retry or (known.size, known.mtime_ns) != (stat.size, stat.mtime_ns)
    return (
        (known.size, known.mtime_ns) != (stat.size, stat.mtime_ns)
        or files.racy(known.mtime_ns, known.read_ns)
        or known.chunks != known.actual
    )


@dataclass
class _Plan:
    found: files.Scan
    known: dict[str, _Known]
    to_read: list[str]
    gone: list[str]


def _plan(
    session: SqliteSession,
    ws: Workspace,
    *,
    retry: bool,
    only: Sequence[str] | None = None,
    rechunk: bool = False,
    count: bool = True,
    found: files.Scan | None = None,
) -> _Plan:
    """Scan the folder (or only these paths) and decide which files to read and drop."""
    folder = ws.folder
    if found is not None:
        pass
    elif only is None:
        found = files.scan(folder, ws.globs, ws.ignore)
    else:
        if not folder.is_dir():
            raise FileNotFoundError(2, "no such folder", ws.root)
        found = files.Scan()
        for path in only:
            files.stat_into(found, folder, path, ws.globs, ws.ignore)
    tables = _tables(session)
    with session.connection() as conn:
        if count and tables.recorded_chunks(conn, ws.id) != tables.chunk_count(conn, ws.id):
            known = _known(session, conn, ws.id, count=True)  # find the files that lost chunks
        else:
            known = _cached(session, conn, ws)[0]
    to_read = sorted(
        p for p, stat in found.files.items() if rechunk or _needs_read(known.get(p), stat, retry)
    )
    scope: Iterable[str] = known if only is None else [p for p in only if p in known]
    gone = sorted(p for p in scope if p not in found.files and not found.hides(p))
    return _Plan(found, known, to_read, gone)


# -- reading and cutting files ----------------------------------------------------------


@dataclass
class _Prepared:
    """A file read from disk, with its chunks as rows ready to insert (if it changed)."""

    text: files.FileText
    stat: files.Stat
    chunks: list[_ChunkRow] | None = None  # None: the same hash as indexed, or an error
    error: str | None = None

    @property
    def size(self) -> int:
        return self.text.size if self.text.sha256 else self.stat.size

    @property
    def mtime_ns(self) -> int:
        return self.text.mtime_ns if self.text.sha256 else self.stat.mtime_ns


@dataclass(frozen=True, slots=True)
class _ChunkRow:
    content: str
    digest: str
    occurrence: int
    position: int
    heading: str  # JSON
    start_line: int
    end_line: int
    kind: str = CHUNK_KIND
    tags: tuple[str, ...] = ()


def _prepare(
    folder: Path,
    path: str,
    stat: files.Stat,
    known: _Known | None,
    sizes: tuple[int, int],
    max_bytes: int,
    rechunk: bool,
) -> _Prepared:
    """Read a file and, unless it hashes as indexed (with all its chunks), cut it."""
    text = files.read(folder, path)
    prepared = _Prepared(text, stat, error=text.error)
    intact = (
        known is not None
        and known.error is None
        and known.chunks == known.actual
        and known.sha256 == text.sha256
    )
    if text.text is not None and (rechunk or not intact):
        _cut(prepared, sizes, max_bytes)
    return prepared


def _cut(prepared: _Prepared, sizes: tuple[int, int], max_bytes: int) -> None:
    """Give a read file its chunk rows (or the error that keeps it out)."""
    assert prepared.text.text is not None
    path = prepared.text.path
    rows: list[_ChunkRow] = []
    seen: dict[str, int] = {}
    try:
        for piece in chunk_markdown(prepared.text.text, *sizes):
            if not piece.text.strip():
                continue
            content = clean_content(piece.text, max_bytes, what=f"{path}:{piece.start_line}")
            digest = content_hash(content)
            occurrence = seen.get(digest, 0)
            seen[digest] = occurrence + 1
            heading = json.dumps(list(piece.heading), ensure_ascii=False)
            place = (len(rows), heading, piece.start_line, piece.end_line)
            rows.append(_ChunkRow(content, digest, occurrence, *place, *entry_labels(piece.entry)))
    except InvalidInput as exc:
        prepared.error = str(exc)
        return
    prepared.chunks = rows


def _batches(prepared: list[_Prepared]) -> Iterator[list[_Prepared]]:
    batch: list[_Prepared] = []
    size = 0
    for item in prepared:
        if batch and (len(batch) >= BATCH_FILES or size >= BATCH_CHUNKS):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item.chunks or ())
    if batch:
        yield batch


# -- writing ----------------------------------------------------------------------------


@dataclass
class _Tally:
    added: int = 0
    changed: int = 0
    renamed: int = 0
    deleted: int = 0
    unchanged: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    reused: int = 0
    failed: list[FileProblem] = field(default_factory=list)


class _Writer:
    """Applies prepared files to the index inside one write transaction."""

    def __init__(self, session: SqliteSession, ws: Workspace, tally: _Tally, conn: Conn) -> None:
        self.session = session
        self.tables = _tables(session)
        self.conn = conn
        self.ws = ws
        self.tally = tally
        self.now = format_time(utcnow())
        self.new_rows: list[tuple[Any, ...]] = []  # inserted together, in finish()
        self.new_places: list[tuple[Any, ...]] = []  # (file_id, position, heading, start, end)
        self.new_ids: set[str] = set()
        self.doomed: list[int] = []
        self.tables.lock(conn, ws.id)

    def file(self, item: _Prepared, renamed_from: int | None) -> None:
        tables, conn, path, text, tally = (
            self.tables,
            self.conn,
            item.text.path,
            item.text,
            self.tally,
        )
        row = tables.file(conn, self.ws.id, path)
        if text.gone:
            if row is not None:
                self._drop_file(row[0])
            return
        if not text.readable:  # keep what was indexed; try again at the next sync
            file_id = self._new_file(item) if row is None else row[0]
            tables.set_error(conn, file_id, item.error, self.now)
            return
        moved = False
        if row is None and renamed_from is not None:
            row = tables.rename(conn, self.ws.id, renamed_from, path)
            moved = row is not None
        if row is None:
            file_id, same = self._new_file(item), False
            tally.added += 1
        else:
            file_id = row[0]
            same = row[1] == text.sha256 and row[2] == item.error
            if moved:
                tally.renamed += 1
            elif same:
                tally.unchanged += 1
            else:
                tally.changed += 1
        if item.chunks is None and item.error is None and (row is None or row[1] != text.sha256):
            # another process synced this file in between: cut it after all
            _cut(item, self.ws.chunk_sizes, self.session.settings.max_content_bytes)
        if item.error is not None:
            self.doomed.extend(tables.chunk_seqs(conn, file_id))
            count = 0
        elif item.chunks is None:  # same text as indexed: keep the chunks, relabel them
            count = self._relabel(file_id, path, item.mtime_ns)
        else:
            before = (tally.chunks_added, tally.chunks_removed)
            count = self._reconcile(file_id, path, item)
            if same and not moved and before != (tally.chunks_added, tally.chunks_removed):
                tally.unchanged -= 1  # same text, but its chunks were re-cut or repaired
                tally.changed += 1
        state = (item.size, item.mtime_ns, text.read_ns, text.sha256, count, item.error, self.now)
        tables.update_file(conn, file_id, state)

    def _new_file(self, item: _Prepared) -> int:
        text = item.text
        state = (item.size, item.mtime_ns, text.read_ns, text.sha256, item.error, self.now)
        return self.tables.new_file(self.conn, self.ws.id, text.path, state)

    def _existing(self, file_id: int) -> list[tuple[Any, ...]]:
        """(seq, id, content_hash, source, created_at, position, heading, start, end)."""
        return self.tables.chunks(self.conn, file_id)

    def _relabel(self, file_id: int, path: str, mtime_ns: int) -> int:
        """Give a file's chunks the ids, source and time its (new) path and mtime call for."""
        existing = self._existing(file_id)
        seen: dict[str, int] = {}
        created = format_time(file_time(path, mtime_ns))
        for old in existing:
            occurrence = seen.get(old[2], 0)
            seen[old[2]] = occurrence + 1
            self._label(old, path, occurrence, created)
        return len(existing)

    def _label(self, old: Sequence[Any], path: str, occurrence: int, created: str) -> None:
        """Give a chunk (a row of :meth:`_existing`) the id, source and time of its place."""
        seq, ident, digest, source, created_at = old[:5]
        wanted = chunk_id(self.ws.namespace, self.ws.root, path, digest, occurrence)
        if wanted != ident and (wanted in self.new_ids or self.tables.taken(self.conn, [wanted])):
            wanted = ident  # taken (by a row about to move or go): keep the old id
        if (wanted, path, created) != (ident, source, created_at):
            self.tables.relabel(self.conn, seq, (wanted, path, created, self.now))

    def _reconcile(self, file_id: int, path: str, item: _Prepared) -> int:
        """Make a file's chunk rows those of its new text; returns how many it has."""
        assert item.chunks is not None
        existing: dict[tuple[str, int], tuple[Any, ...]] = {}
        seen: dict[str, int] = {}
        for row in self._existing(file_id):
            occurrence = seen.get(row[2], 0)
            seen[row[2]] = occurrence + 1
            existing[(row[2], occurrence)] = row
        created = format_time(file_time(path, item.mtime_ns))
        fresh: list[_ChunkRow] = []
        for chunk in item.chunks:
            old = existing.pop((chunk.digest, chunk.occurrence), None)
            if old is None:
                fresh.append(chunk)
                continue
            self._label(old, path, chunk.occurrence, created)
            place = (chunk.position, chunk.heading, chunk.start_line, chunk.end_line)
            if place != tuple(old[5:]):
                self.tables.place(self.conn, old[0], place)
        self.doomed.extend(row[0] for row in existing.values())
        self.tally.chunks_removed += len(existing)
        if fresh:
            self._insert(file_id, path, fresh, created)
        return len(item.chunks)

    def _insert(self, file_id: int, path: str, fresh: list[_ChunkRow], created: str) -> None:
        """Prepare a file's new chunks (inserted with every other file's in :meth:`finish`:
        one statement, not one a file)."""
        session, ws = self.session, self.ws
        ids = [chunk_id(ws.namespace, ws.root, path, c.digest, c.occurrence) for c in fresh]
        taken = self.tables.taken(self.conn, ids) | self.new_ids
        now = utcnow()
        for ident, c in zip(ids, fresh, strict=True):
            row = prepare(
                {
                    "id": None if ident in taken else ident,  # taken: by a row about to move
                    "content": c.content,
                    "kind": c.kind,
                    "tags": c.tags,
                    "source": path,
                    "created_at": created,
                    "updated_at": self.now,
                },
                ws.namespace,
                now,
                False,
                session.settings.max_content_bytes,
                self.now,
            )
            self.new_rows.append(row)
            self.new_ids.add(row[0])
            self.new_places.append((file_id, c.position, c.heading, c.start_line, c.end_line))
        self.tally.chunks_added += len(fresh)

    def _drop_file(self, file_id: int) -> None:
        self.tally.chunks_removed += len(self.tables.chunk_seqs(self.conn, file_id))
        self.tables.delete_file(self.conn, file_id)
        self.tally.deleted += 1

    def gone(self, known: _Known) -> None:
        """A file deleted from disk (its row may already be gone: another process)."""
        if self.tables.has_file(self.conn, known.id):
            self._drop_file(known.id)

    def finish(self) -> None:
        """Insert the new chunks, give them the vectors of identical text, then delete the
        chunks that went."""
        seqs = self.tables.insert(self.session, self.conn, self.new_rows, self.new_places)
        self.tally.reused += self.tables.copy_vectors(self.conn, seqs)
        self.tables.delete_memories(self.conn, self.doomed)


# -- sync -------------------------------------------------------------------------------


def sync(
    session: SqliteSession,
    ws: Workspace,
    *,
    deadline: float | None = None,
    embed: bool = True,
    progress: Progress | None = None,
    retry: bool = True,
    record: bool = True,
    only: Sequence[str] | None = None,
    rechunk: bool = False,
    plan: _Plan | None = None,
) -> SyncReport:
    """Bring the index of ``ws`` up to date with its folder; see the module docstring.

    ``deadline`` (a ``time.monotonic()`` value) stops reading files and
    embedding chunks when passed: the report says ``complete=False``.
    ``retry`` reads again files that could not be indexed before; ``record``
    writes the report to the workspace row even when nothing changed; ``only``
    limits the sync to these paths; ``rechunk`` re-cuts every file with the
    sizes ``ws.chunking`` names, recorded as the workspace's once all are.
    Raises ``FileNotFoundError`` when the folder is gone.
    """
    started = time.perf_counter()
    if plan is None:
        plan = _plan(session, ws, retry=retry, only=only, rechunk=rechunk)
    tally = _Tally(unchanged=len(plan.found.files) - len(plan.to_read))
    sizes = ws.chunk_sizes
    max_bytes = session.settings.max_content_bytes
    prepared: list[_Prepared] = []
    remaining = 0
    if progress is not None and plan.to_read:
        progress("reading", 0, len(plan.to_read))
    for done, path in enumerate(plan.to_read):
        if deadline is not None and time.monotonic() > deadline:
            remaining = len(plan.to_read) - done
            break
        prepared.append(
            _prepare(
                ws.folder, path, plan.found.files[path], plan.known.get(path), sizes, max_bytes,
                rechunk,
            )
        )  # fmt: skip
        if progress is not None:
            progress("reading", done + 1, len(plan.to_read))
    renames = _renames(plan, prepared)
    prepared.sort(key=lambda p: p.text.path not in renames)  # moves first: they free ids
    batches = list(_batches(prepared)) or [[]]
    gone = [(path, plan.known[path]) for path in plan.gone]
    for number, batch in enumerate(batches):
        _write_batch(session, ws, batch, renames, gone if number == len(batches) - 1 else [], tally)
    embedding = None
    if embed and session.embedder is not None:
        embedding = _embed(session, ws, deadline, progress)
    report = _report(session, ws, plan, tally, started, embedding, remaining)
    if record or report.touched or tally.failed:
        done = report.complete and not tally.failed  # every file is cut as ws.chunking says
        with session.transaction() as conn:
            summary = json.dumps(report.to_dict())
            _tables(session).record_sync(
                conn, ws.id, format_time(utcnow()), summary, done, ws.chunking
            )
    return report


def _renames(plan: _Plan, prepared: list[_Prepared]) -> dict[str, int]:
    """New paths whose text is that of a deleted file (new path -> the old file's row id);
    the matched paths leave ``plan.gone``."""
    by_hash: dict[str, list[str]] = {}
    for path in plan.gone:
        known = plan.known[path]
        if known.sha256 and known.error is None:
            by_hash.setdefault(known.sha256, []).append(path)
    renames: dict[str, int] = {}
    for item in prepared:
        text = item.text
        olds = by_hash.get(text.sha256 or "")
        if olds and text.path not in plan.known and item.error is None:
            old = olds.pop(0)
            renames[text.path] = plan.known[old].id
            plan.gone.remove(old)
    return renames


def _write_batch(
    session: SqliteSession,
    ws: Workspace,
    batch: list[_Prepared],
    renames: dict[str, int],
    gone: list[tuple[str, _Known]],
    tally: _Tally,
) -> None:
    """One transaction: these files, then (in the last batch) the deleted ones."""
    if not batch and not gone:
        return
    failures: tuple[type[Exception], ...] = (*_tables(session).errors, MnemexError)
    try:
        with session.transaction() as conn:
            writer = _Writer(session, ws, _Tally(), conn)
            for item in batch:
                writer.file(item, renames.get(item.text.path))
            writer.finish()
            for _, known in gone:
                writer.gone(known)
    except StoreLocked:
        raise
    except failures as exc:
        if len(batch) > 1:  # find the file that fails; store the others
            for item in batch:
                _write_batch(session, ws, [item], renames, [], tally)
            _write_batch(session, ws, [], renames, gone, tally)
        else:
            paths = [item.text.path for item in batch] or [path for path, _ in gone]
            tally.failed.append(FileProblem(paths[0], f"could not be stored: {exc}"))
        return
    finally:
        session.after_write()
    for name in (*COUNTS, "reused"):
        setattr(tally, name, getattr(tally, name) + getattr(writer.tally, name))


def _embed(
    session: SqliteSession, ws: Workspace, deadline: float | None, progress: Progress | None
) -> Any:
    """Embed the workspace's chunks that have no vector for the configured model."""
    embedder = session.embedder
    assert embedder is not None
    with session.connection() as conn:
        seqs = _tables(session).pending(conn, ws.id, embedder.model_id)
    if not seqs:
        return None
    advance = None
    if progress is not None:
        progress("embedding", 0, len(seqs))
        done = [0]

        def advance(count: int) -> None:
            done[0] += count
            progress("embedding", done[0], len(seqs))

    return session.embedding.embed_new(seqs, deadline=deadline, progress=advance)


def _indexed(
    session: SqliteSession, ws: Workspace
) -> tuple[tuple[int, int], list[FileProblem], int | None]:
    """Files recorded (indexed or not) and chunk rows, counted from the tables; the files
    that could not be indexed; chunks without a vector (``None``: no embedder)."""
    tables, embedder = _tables(session), session.embedder
    with session.connection() as conn:
        counts = tables.file_count(conn, ws.id), tables.chunk_count(conn, ws.id)
        problems = [FileProblem(path, error) for path, error in tables.problems(conn, ws.id)]
        pending = None
        if embedder is not None:
            pending = len(tables.pending(conn, ws.id, embedder.model_id))
    return counts, problems, pending


def _report(
    session: SqliteSession,
    ws: Workspace,
    plan: _Plan,
    tally: _Tally,
    started: float,
    embedding: Any,
    remaining: int,
) -> SyncReport:
    counts, problems, pending = _indexed(session, ws)
    problems += [FileProblem(path, message) for path, message in plan.found.errors]
    problems += tally.failed
    return SyncReport(
        workspace=ws.root,
        namespace=ws.namespace,
        files=counts[0],
        chunks=counts[1],
        **{name: getattr(tally, name) for name in COUNTS},
        embedded=embedding.embedded if embedding is not None else 0,
        reused=tally.reused + (embedding.reused if embedding is not None else 0),
        pending_vectors=pending or 0,
        problems=tuple(problems),
        complete=remaining == 0,
        remaining=remaining,
        took_ms=(time.perf_counter() - started) * 1000,
        embedding_error=session.embedding.last_error if embedding is not None else None,
    )


def refresh(session: SqliteSession, ws: Workspace, deadline: float, allowed: bool) -> str | None:
    """Before a search: sync ``ws`` if files changed since the last sync, by ``deadline``.

    Costs a scan (sizes and mtimes) and a cheap query when nothing changed.
    Returns ``None`` when the index matches the folder, else a note saying why
    the results may be stale and what to run.
    """
    try:
        found = files.scan(ws.folder, ws.globs, ws.ignore)
    except FileNotFoundError:
        return f"the workspace folder {ws.root} is missing: its chunks may be stale"
    with session.connection() as conn:
        settled = _cached(session, conn, ws)[1]
    if settled is not None and not found.unlisted and found.files == settled:
        return None  # the common case: one comparison of two dicts
    plan = _plan(session, ws, retry=False, count=False, found=found)
    if not plan.to_read and not plan.gone:
        return None
    pending = len(plan.to_read) + len(plan.gone)
    if not allowed:
        return (
            f"{pending} file(s) of the workspace {ws.root} changed since the last sync: "
            f"run `mnemex sync {ws.root}`"
        )
    report = sync(session, ws, deadline=deadline, retry=False, record=False, plan=plan)
    if not report.complete:
        return (
            f"the workspace {ws.root} changed and {report.remaining} file(s) could not be synced "
            f"within sync_timeout ({session.settings.sync_timeout:g} s): run `mnemex sync {ws.root}`"
        )
    return None


def freshen(session: SqliteSession, namespace: str | None) -> tuple[list[str], bool]:
    """Before a search: :func:`refresh` each workspace of the namespace (or all) within
    ``sync_timeout``. Returns notes and whether the results may be stale."""
    with session.connection() as conn:
        found = listed(session, conn, namespace)
    deadline = time.monotonic() + session.settings.sync_timeout
    notes: list[str] = []
    for ws in found:
        try:
            note = refresh(session, ws, deadline, session.settings.sync_on_search)
        except (MnemexError, OSError) as exc:
            note = f"the workspace {ws.root} could not be synced ({exc}): results may be stale"
        if note:
            notes.append(note)
    return notes, bool(notes)


# -- status -----------------------------------------------------------------------------


def statuses(
    session: SqliteSession, namespace: str | None, directory: str | os.PathLike[str] | None
) -> tuple[WorkspaceStatus, ...]:
    """The :func:`status` of each workspace of the namespace (all when ``None``), or of
    the one at ``directory``."""
    with session.connection() as conn:
        found = listed(session, conn, namespace)
    if directory is not None:
        root = resolve_root(directory, must_exist=False)
        found = [ws for ws in found if ws.root == root]
        if not found:
            raise InvalidInput(
                f"{root} is not a workspace of namespace {namespace or '*'!r}: "
                f"run `mnemex sync {directory}` first"
            )
    return tuple(status(session, ws) for ws in found)


def status(session: SqliteSession, ws: Workspace) -> WorkspaceStatus:
    """What the index holds for ``ws`` and how many files differ on disk now."""
    embedder = session.embedder
    (files_count, chunks), problems, pending = _indexed(session, ws)
    exists = ws.folder.is_dir()
    changed: int | None = None
    if exists:
        try:
            changed = changes(session, ws)
        except OSError:
            changed = None
    return WorkspaceStatus(
        workspace=ws.root,
        namespace=ws.namespace,
        globs=ws.globs,
        ignore=ws.ignore,
        exists=exists,
        files=files_count,
        chunks=chunks,
        problems=tuple(problems),
        pending_vectors=pending,
        embedder=embedder.model_id if embedder is not None else None,
        synced_at=parse_stored_time(ws.synced_at) if ws.synced_at else None,
        changed=changed,
        last_sync=ws.last_sync,
    )


def changes(session: SqliteSession, ws: Workspace) -> int:
    """How many files were added, edited or deleted since the last sync (reads only the
    files whose size and mtime cannot settle it)."""
    plan = _plan(session, ws, retry=False)
    count = len(plan.gone)
    for path in plan.to_read:
        known = plan.known.get(path)
        stat = plan.found.files[path]
        if (
            known is None
            or (known.size, known.mtime_ns) != (stat.size, stat.mtime_ns)
            or known.chunks != known.actual
            or files.read(ws.folder, path).sha256 != known.sha256
        ):
            count += 1
    return count


# -- write-through ----------------------------------------------------------------------

ENTRY_SEPARATOR = " · "


def entry_labels(title: str) -> tuple[str, tuple[str, ...]]:
    """The kind and tags an entry's heading (``HH:MM · kind · #tag #other``) gives its
    chunks; ``chunk`` and none for any other heading, or labels that are not valid."""
    match = ENTRY_TITLE.match(title)
    if not match or not match.group(2):
        return CHUNK_KIND, ()
    kind = CHUNK_KIND
    tags: tuple[str, ...] = ()
    for part in match.group(2).split(ENTRY_SEPARATOR):
        words = part.split()
        try:
            if words and all(w.startswith("#") and len(w) > 1 for w in words):
                tags = clean_tags([w[1:] for w in words])
            elif part.strip():
                kind = clean_label(part, "kind", 40)
        except InvalidInput:
            continue
    return kind, tags


def write_through(
    session: SqliteSession,
    directory: str | os.PathLike[str],
    namespace: str,
    content: str,
    *,
    kind: str | None,
    tags: Iterable[str] | None,
    created_at: datetime | str | None,
) -> Appended:
    """:func:`append` to the workspace at ``directory``, synced first when it is new."""
    root = resolve_root(directory)
    label = None if kind is None else clean_label(kind, "kind", 40)
    when = utcnow() if created_at is None else parse_time(created_at, what="created_at")
    try:
        when.astimezone()  # the daily file is named by the local date
    except OverflowError:
        raise InvalidInput(
            f"created_at {created_at!r} has no local date: times must fall in the years "
            "1 to 9999 in local time too"
        ) from None
    labels = clean_tags(tags)
    with session.connection() as conn:
        ws = find(session, conn, root, namespace)
    if ws is None:
        sync_folder(session, root, namespace, None, None)
        with session.connection() as conn:
            ws = find(session, conn, root, namespace)
        assert ws is not None
    with session.errors():
        return append(session, ws, content, kind=label, tags=labels, when=when)


def append(
    session: SqliteSession,
    ws: Workspace,
    content: str,
    *,
    kind: str | None,
    tags: Sequence[str],
    when: datetime,
) -> Appended:
    """Append a memory to the workspace's daily file ``memory/YYYY-MM-DD.md`` and index it.

    The entry is a ``## HH:MM`` heading (with the kind and ``#tags`` when given)
    followed by the text; the day and time are ``when`` in local time. A new
    daily file starts with a ``# YYYY-MM-DD`` title.
    """
    local = when.astimezone()
    relative = f"memory/{local.date().isoformat()}.md"
    if not files.matches(relative, ws.globs) or files.ignored(relative, ws.ignore):
        raise InvalidInput(
            f"{relative} is not part of the workspace {ws.root} (its globs are "
            f"{', '.join(ws.globs)}): add memory/**/*.md to them"
        )
    text = clean_content(content, session.settings.max_content_bytes)
    labels = [kind or "", " ".join("#" + "-".join(tag.split()) for tag in tags)]
    title = ENTRY_SEPARATOR.join([local.strftime("%H:%M"), *filter(None, labels)])
    entry = f"## {title}\n\n{text}\n"
    path = ws.folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as handle, _locked(handle):
        handle.seek(0)
        existing = handle.read()
        if not existing.strip():
            prefix = f"# {local.date().isoformat()}\n\n"
        elif existing.endswith(b"\n\n"):
            prefix = ""
        else:
            prefix = "\n" if existing.endswith(b"\n") else "\n\n"
        handle.write((prefix + entry).encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    start = existing.count(b"\n") + prefix.count("\n") + 1
    end = start + entry.count("\n") - 1
    report = sync(session, ws, only=[relative], retry=True, record=False)
    with session.connection() as conn:
        ids = _tables(session).ids_at(conn, ws.id, relative, (start, end))
    heading = (local.date().isoformat(), title)
    return Appended(Location(ws.root, relative, start, end, heading), ids, report)


@contextlib.contextmanager
def _locked(handle: Any) -> Iterator[None]:
    """An exclusive lock on an open file where the platform has ``flock``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
