"""Moving a store between engines: ``mnemex migrate --from A --to B``, and the check that
two stores hold the same memories.

:func:`migrate` copies every memory of every namespace (each field, ids kept),
its vectors as stored (model, window and dimension: the target embeds
nothing), the relations, and the markdown workspaces with their files rows
and the place of each chunk (a later ``sync`` on the target finds nothing
changed). It reads the source a batch at a time, in the order it was written,
and writes each batch in one transaction of the target through the engine's
own write path (the lexical index and its statistics kept by the engine's
triggers). The target must be empty, unless ``resume`` (it holds part of an
interrupted migrate from this source, recorded in its meta table) or
``into_nonempty``: then ids already present are skipped when identical and
reported as conflicts when not. It ends with :func:`compare`.

:func:`compare` streams both stores in id order and reports the counts per
namespace, a digest of every record on each side and each difference: a
memory (fields, place in a workspace file, vectors) or relation missing,
added or different, a workspace or file row, the recorded embedder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import field
from pathlib import Path
from typing import Any, Final

from mnemex.config import is_url, load_settings
from mnemex.engine import holds_store, place_name
from mnemex.engine.copy import MemoryRecord, RelationRecord
from mnemex.errors import IndexMismatch, InvalidInput, StoreError
from mnemex.records import dataclass
from mnemex.relations import relation_row
from mnemex.rows import prepare
from mnemex.store import Store
from mnemex.text import parse_stored_time, utcnow

Place = str | os.PathLike[str]
Progress = Callable[[str, int, int], None]  # (phase, done, total)
BATCH: Final = 1_000  # memories (or relations) read and written per transaction
MAX_SHOWN: Final = 50  # differences and conflicts listed in a report
MARKER: Final = "migrating_from"  # meta key of a target while a migrate fills it
_NO_LIMIT: Final = 2**62  # the source accepted its texts: no size limit is applied again


@dataclass(frozen=True, slots=True)
class Difference:
    what: str  # memory, relation, workspace, file, embedder
    key: str  # an id, a path, ...
    problem: str  # "missing from the target", "only in the target", "differs: content, tags"

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class Comparison:
    """What :func:`compare` found."""

    source: str
    target: str
    vectors: bool  # vectors were compared
    namespaces: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # source, target
    missing: int = 0  # in the source, not in the target
    extra: int = 0  # in the target only
    different: int = 0
    differences: list[Difference] = field(default_factory=list)  # the first MAX_SHOWN

    @property
    def identical(self) -> bool:
        return not (self.missing or self.extra or self.different)

    @property
    def covered(self) -> bool:
        """Every record of the source is in the target as it is (the target may hold more)."""
        return not (self.missing or self.different)

    def note(self, what: str, key: str, problem: str) -> None:
        if problem.startswith("missing"):
            self.missing += 1
        elif problem.startswith("only"):
            self.extra += 1
        else:
            self.different += 1
        if len(self.differences) < MAX_SHOWN:
            self.differences.append(Difference(what, key, problem))

    def to_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "source": self.source,
            "target": self.target,
            "vectors": self.vectors,
            "namespaces": self.namespaces,
            "digests": self.digests,
            "missing": self.missing,
            "extra": self.extra,
            "different": self.different,
            "differences": [d.to_dict() for d in self.differences],
        }


@dataclass(slots=True)
class MigrateReport:
    """What :func:`migrate` did, and the comparison it ended with."""

    source: str
    target: str
    memories: int = 0  # copied
    vectors: int = 0  # window rows copied
    relations: int = 0
    workspaces: int = 0
    files: int = 0
    skipped: int = 0  # already in the target, identical
    conflicts: list[Difference] = field(default_factory=list)  # the first MAX_SHOWN
    conflict_count: int = 0
    seconds: float = 0.0
    check: Comparison | None = None
    into_nonempty: bool = False

    @property
    def ok(self) -> bool:
        """No conflict, and the check (if run) found the source's records in the target."""
        if self.conflict_count:
            return False
        if self.check is None:
            return True
        return self.check.covered if self.into_nonempty else self.check.identical

    def conflict(self, what: str, key: str, problem: str) -> None:
        self.conflict_count += 1
        if len(self.conflicts) < MAX_SHOWN:
            self.conflicts.append(Difference(what, key, problem))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "source": self.source,
            "target": self.target,
            "memories": self.memories,
            "vectors": self.vectors,
            "relations": self.relations,
            "workspaces": self.workspaces,
            "files": self.files,
            "skipped": self.skipped,
            "conflict_count": self.conflict_count,
            "conflicts": [c.to_dict() for c in self.conflicts],
            "seconds": round(self.seconds, 3),
            "check": None if self.check is None else self.check.to_dict(),
        }


# -- opening the two stores -------------------------------------------------------------


def store_place(value: Place) -> str:
    """A ``--from``/``--to`` value as a store's place: a ``postgresql://`` URL, or a file
    path (written plain or as ``sqlite:PATH``)."""
    text = os.fspath(value)
    if not text.strip():
        raise InvalidInput("a store is named by a file path, sqlite:PATH or a postgresql:// URL")
    if text.startswith("sqlite:"):
        text = text.removeprefix("sqlite:")
        text = "/" + text.lstrip("/") if text.startswith("///") else text.removeprefix("//")
    if "://" in text and not is_url(text):
        raise InvalidInput(
            f"unknown kind of store {text.split('://')[0]!r}: name a SQLite file "
            "(PATH or sqlite:PATH) or a PostgreSQL database (postgresql://...)"
        )
    return text


def open_source(place: Place) -> Store:
    """The store to read from, which must exist and hold a mnemex store (never created)."""
    text = store_place(place)
    if is_url(text):
        if not holds_store(settings := load_settings(text)):
            raise StoreError(f"no mnemex store in the database at {place_name(settings)}")
    else:
        path = Path(text).expanduser()
        if not path.is_file():
            raise StoreError(f"no store at {path}: check the path given with --from")
        if not holds_store(load_settings(text)):
            raise StoreError(f"{path} is not a mnemex store (no mnemex schema in it)")
    return Store(load_settings(text), embedder=None)


def open_target(place: Place) -> Store:
    """The store to write to, created when it does not exist."""
    text = store_place(place)
    if not is_url(text):
        path = Path(text).expanduser()
        if path.is_dir():
            raise StoreError(f"{path} is a folder: name the store file to write")
        if not path.parent.is_dir():
            raise StoreError(f"no folder {path.parent} for the target store: create it first")
    return Store(load_settings(text), embedder=None)


def identity(store: Store) -> str:
    """What names a store wherever the command runs: its absolute path, or its URL
    (without the password)."""
    if store.settings.db_url is not None:
        return str(store.path)
    return str(Path(store.path).resolve())


# -- migrate ----------------------------------------------------------------------------------


def migrate(
    source: Place,
    target: Place,
    *,
    vectors: bool = True,
    resume: bool = False,
    into_nonempty: bool = False,
    check: bool = True,
    progress: Progress | None = None,
) -> MigrateReport:
    """Copy the store at ``source`` into ``target`` (a file path, ``sqlite:PATH`` or a
    ``postgresql://`` URL) and compare the two; see the module docstring.

    ``vectors=False`` copies no vectors (embed them on the target later with
    ``mnemex embed``); a target set up for another model or dimension than the
    source's vectors is refused (:class:`~mnemex.errors.IndexMismatch`) unless
    it is given. ``progress(phase, done, total)`` follows the copy and the check.
    """
    began = time.perf_counter()
    with open_source(source) as src, open_target(target) as dst:
        if identity(src) == identity(dst):
            raise InvalidInput("the source and the target are the same store")
        report = MigrateReport(str(src.path), str(dst.path), into_nonempty=into_nonempty)
        _Copy(src, dst, report, vectors, progress).run(resume=resume, into_nonempty=into_nonempty)
        if check:
            report.check = _compare(src, dst, vectors, progress)
    report.seconds = time.perf_counter() - began
    return report


class _Copy:
    """One migrate: the two stores, their records, the report."""

    def __init__(
        self,
        src: Store,
        dst: Store,
        report: MigrateReport,
        vectors: bool,
        progress: Progress | None,
    ) -> None:
        self.src, self.dst, self.report = src, dst, report
        self.vectors = vectors
        self.progress = progress
        self.reads, self.writes = src.session.copying, dst.session.copying
        self.now = utcnow()
        self.done = 0
        self.total = 0

    def run(self, *, resume: bool, into_nonempty: bool) -> None:
        with self.src.session.read() as conn:
            counts = self.reads.counts(conn)
            embedder = self.reads.meta(conn, "embedder")
            models = self.reads.vector_models(conn) if self.vectors else {}
        self.total = sum(c.get("memories", 0) + c.get("relations", 0) for c in counts.values())
        self._check_vectors(models, embedder)
        self._admit(resume, into_nonempty)
        self._workspaces()
        self._memories()
        self._relations()
        with self.dst.session.transaction() as conn:
            if self.vectors and embedder is not None and self.writes.meta(conn, "embedder") is None:
                self.writes.set_meta(conn, "embedder", embedder)
            self.writes.set_meta(conn, MARKER, None)
        with self.dst.session.connection() as conn:
            self.writes.finish(conn)
        self.dst.session.after_write()

    def _admit(self, resume: bool, into_nonempty: bool) -> None:
        """Refuse a target that holds anything, unless told; mark it as being filled."""
        with self.dst.session.transaction() as conn:
            marker = self.writes.meta(conn, MARKER)
            source = identity(self.src)
            if self.writes.holds_anything(conn) and not into_nonempty:
                where = self.report.target
                if not resume:
                    raise StoreError(
                        f"the target store {where} is not empty: --resume continues an "
                        "interrupted migrate into it, --into-nonempty adds to what it holds"
                    )
                if marker != source:
                    raise StoreError(
                        f"the target store {where} does not hold an interrupted migrate from "
                        f"{self.report.source}: use --into-nonempty to add to what it holds"
                    )
            if marker is None:
                self.writes.set_meta(conn, MARKER, source)

    def _check_vectors(self, models: dict[str, int], embedder: str | None) -> None:
        """Refuse vectors the target cannot hold as they are."""
        import json

        with self.dst.session.connection() as conn:
            held = self.writes.vector_models(conn)
            recorded = self.writes.meta(conn, "embedder")
        hint = "; migrate with --no-vectors and run `mnemex embed` on the target afterwards"
        for model, dim in sorted(models.items()):
            if held.get(model, dim) != dim:
                raise IndexMismatch(
                    f"the target holds {held[model]}-dimensional vectors of {model}, the "
                    f"source {dim}-dimensional ones{hint}"
                )
            limit = self.writes.max_dim
            if limit is not None and dim > limit:
                raise IndexMismatch(
                    f"{model} has {dim} dimensions; {self.writes.engine} indexes at most {limit}{hint}"
                )
        if models and embedder is not None and recorded is not None:
            ours, theirs = json.loads(embedder), json.loads(recorded)
            if ours.get("model_id") != theirs.get("model_id"):
                raise IndexMismatch(
                    f"the target is set up for {theirs.get('model_id')} "
                    f"({theirs.get('dim')} dimensions), the source's vectors are of "
                    f"{ours.get('model_id')} ({ours.get('dim')}){hint}"
                )

    def _advance(self, count: int) -> None:
        self.done += count
        if self.progress is not None:
            self.progress("copying", self.done, self.total)

    def _workspaces(self) -> None:
        with self.src.session.read() as conn:
            workspaces, files = self.reads.workspaces(conn), self.reads.files(conn)
        with self.dst.session.transaction() as conn:
            self.writes.write_workspaces(conn, workspaces, files)
        self.report.workspaces, self.report.files = len(workspaces), len(files)

    def _memories(self) -> None:
        last = 0
        while True:
            with self.src.session.read() as conn:
                page = self.reads.memory_page(conn, last, BATCH)
                if self.vectors:
                    batch = self.reads.with_vectors(conn, page)
                else:
                    batch = [m for _, m in page]
            if not page:
                return
            last = page[-1][0]
            self._write_memories(batch)
            self._advance(len(batch))

    def _write_memories(self, batch: list[MemoryRecord]) -> None:
        session = self.dst.session
        with session.transaction() as conn:
            fresh = self._fresh(conn, batch)
            rows = [prepare(m.item(), m.namespace, self.now, True, _NO_LIMIT) for m in fresh]
            dropped = self.writes.write_memories(session, conn, rows, fresh)
        session.after_write()
        for ident, holder in dropped.items():
            self.report.conflict(
                "memory",
                ident,
                f"not copied: memory {holder} of its namespace holds the same text "
                "(PostgreSQL keeps one memory per text in a namespace)",
            )
        copied = [m for m in fresh if m.id not in dropped]
        self.report.memories += len(copied)
        self.report.vectors += sum(len(m.vectors) for m in copied)

    def _fresh(self, conn: Any, batch: list[MemoryRecord]) -> list[MemoryRecord]:
        """The records of ``batch`` the target lacks; those it holds are skipped, or
        reported when the target's differs."""
        present = self.writes.present(conn, "memories", [m.id for m in batch])
        if not present:
            return batch
        held = self.writes.memories_with_ids(conn, sorted(present))
        for m in batch:
            if m.id not in present:
                continue
            theirs = held[m.id] if self.vectors else dataclasses.replace(held[m.id], vectors=())
            if theirs == m:
                self.report.skipped += 1
            else:
                self.report.conflict("memory", m.id, f"the target's differs: {_fields(m, theirs)}")
        return [m for m in batch if m.id not in present]

    def _relations(self) -> None:
        last = 0
        while True:
            with self.src.session.read() as conn:
                page = self.reads.relation_page(conn, last, BATCH)
            if not page:
                return
            last = page[-1][0]
            self._write_relations([r for _, r in page])
            self._advance(len(page))

    def _write_relations(self, batch: list[RelationRecord]) -> None:
        with self.dst.session.transaction() as conn:
            present = self.writes.present(conn, "relations", [r.id for r in batch])
            fresh = [r for r in batch if r.id not in present]
            rows = [_relation_row(r) for r in fresh]
            refused = self.writes.write_relations(conn, rows)
        for r in batch:
            if r.id in present:
                self.report.skipped += 1  # compared by the check
            elif r.id in refused:
                self.report.conflict(
                    "relation", r.id, "not copied: another relation of its namespace holds "
                    f"{r.subject} -[{r.predicate}]-> {r.object}",
                )  # fmt: skip
        self.report.relations += len(fresh) - len(refused)


def _relation_row(r: RelationRecord) -> tuple[Any, ...]:
    return relation_row(
        r.namespace,
        r.subject,
        r.predicate,
        r.object,
        r.confidence,
        r.source_memory,
        parse_stored_time(r.updated_at),
        relation_id=r.id,
        created_at=parse_stored_time(r.created_at),
    )


def _fields(ours: Any, theirs: Any) -> str:
    """The names of the fields two records differ in."""
    names = [
        f.name for f in dataclasses.fields(ours) if getattr(ours, f.name) != getattr(theirs, f.name)
    ]
    return ", ".join(names) or "nothing"


# -- compare ----------------------------------------------------------------------------------


def compare(
    source: Place, target: Place, *, vectors: bool = True, progress: Progress | None = None
) -> Comparison:
    """Compare the stores at ``source`` and ``target`` (both must exist): counts per
    namespace, a digest of every record on each side, and each difference."""
    with open_source(source) as src, open_source(target) as dst:
        return _compare(src, dst, vectors, progress)


def _compare(src: Store, dst: Store, vectors: bool, progress: Progress | None) -> Comparison:
    out = Comparison(str(src.path), str(dst.path), vectors)
    a, b = src.session.copying, dst.session.copying
    with src.session.read() as sconn, dst.session.read() as tconn:
        ours, theirs = a.counts(sconn), b.counts(tconn)
        total = sum(c.get("memories", 0) + c.get("relations", 0) for c in ours.values())
        for ns in sorted(set(ours) | set(theirs)):
            kinds = ("memories", "vectors", "relations", "workspaces", "files")
            out.namespaces[ns] = {
                k: [ours.get(ns, {}).get(k, 0), theirs.get(ns, {}).get(k, 0)]
                for k in kinds
                if vectors or k != "vectors"
            }
        digests = (hashlib.sha256(), hashlib.sha256())
        seen = [0]

        def step() -> None:
            seen[0] += 1
            if progress is not None and seen[0] % BATCH == 0:
                progress("checking", seen[0], total)

        pairs = (
            ("memory", a.memories_by_id(sconn, vectors), b.memories_by_id(tconn, vectors)),
            ("relation", a.relations_by_id(sconn), b.relations_by_id(tconn)),
            ("workspace", iter(a.workspaces(sconn)), iter(b.workspaces(tconn))),
            ("file", iter(a.files(sconn)), iter(b.files(tconn))),
        )
        for what, left, right in pairs:
            _merge(out, what, left, right, digests, step)
        if vectors and a.meta(sconn, "embedder") != b.meta(tconn, "embedder"):
            out.note("embedder", "meta", "differs: the recorded embedder")
    out.digests = {"source": digests[0].hexdigest(), "target": digests[1].hexdigest()}
    if progress is not None:
        progress("checking", total, total)
    return out


def _key(record: Any) -> tuple[str, ...]:
    """What a record is known by: its id, or a workspace's (namespace, root), a file's path."""
    if isinstance(record, MemoryRecord | RelationRecord):
        return (record.id,)
    return (record.namespace, record.root, getattr(record, "path", ""))


def _shown(key: tuple[str, ...] | None) -> str:
    return "/".join(k for k in key or () if k)


def _merge(
    out: Comparison,
    what: str,
    left: Iterator[Any],
    right: Iterator[Any],
    digests: tuple[Any, Any],
    step: Callable[[], None],
) -> None:
    """Walk two streams of records in key order side by side, noting each difference."""
    a, b = next(left, None), next(right, None)
    while a is not None or b is not None:
        ka = None if a is None else _key(a)
        kb = None if b is None else _key(b)
        if kb is None or (ka is not None and ka < kb):
            out.note(what, _shown(ka), "missing from the target")
        elif ka is None or kb < ka:
            out.note(what, _shown(kb), "only in the target")
        elif a != b:
            out.note(what, _shown(ka), f"differs: {_fields(a, b)}")
        if a is not None and (kb is None or (ka is not None and ka <= kb)):
            digests[0].update(repr(a).encode())
            a = next(left, None)
            step()
        if b is not None and (ka is None or kb <= ka):  # type: ignore[operator]
            digests[1].update(repr(b).encode())
            b = next(right, None)
