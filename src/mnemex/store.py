"""The store: one SQLite file or PostgreSQL database, scoped reads and writes, the public
API of mnemex."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemex.results import (
        Added,
        Appended,
        DedupReport,
        EmbedReport,
        ForgetResult,
        GetResult,
        Injection,
        InjectionSession,
        Stats,
        SyncReport,
        TimelineEntry,
        WorkspaceStatus,
    )

from mnemex.config import (
    DEFAULT_CONFIDENCE,
    DEFAULT_KIND,
    RecallOptions,
    SearchOptions,
    Settings,
    load_settings,
)
from mnemex.embed import Embedder
from mnemex.engine import ALL as ALL
from mnemex.engine import NamespaceArg, open_session
from mnemex.engine.embedding import FROM_SETTINGS
from mnemex.engine.sqlite.session import Conflict
from mnemex.errors import InvalidInput
from mnemex.index.retrieval import Filters
from mnemex.models import Memory, RecallResult, Relation, SearchResult
from mnemex.request import Request
from mnemex.rows import UNSET, prepare
from mnemex.text import echo, parse_time, utcnow

STATE_PREFIX = "hooks"  # of the meta keys tools keep state under (Store.set_state)


def open_store(
    db: str | os.PathLike[str] | None = None,
    *,
    namespace: str | None = None,
    embedder: Embedder | object | None = FROM_SETTINGS,
    **settings: Any,
) -> Store:
    """Open (creating if needed) a store. ``db`` defaults to the data folder's ``memories.db``.

    Keyword arguments override :class:`~mnemex.config.Settings` fields; ``embedder`` is the
    ``embedder`` setting's name (``local``, ``none``, ...) or an instance (or ``None`` for lexical
    only).
    """
    if isinstance(embedder, str):
        settings["embedder"], embedder = embedder, FROM_SETTINGS
    return Store(load_settings(db, namespace=namespace, **settings), embedder=embedder)


class Store:
    """A memory store in one SQLite file, or in a PostgreSQL database (``db`` a
    ``postgresql://`` URL; both engines offer every feature).

    Every read and write is scoped to one namespace: the store's own
    (``settings.namespace``) unless a call names another. Safe to share
    between threads; several processes may use the same store at once.
    """

    def __init__(
        self, settings: Settings, *, embedder: Embedder | object | None = FROM_SETTINGS
    ) -> None:
        self.session = open_session(settings, embedder)
        self.settings = settings
        self.namespace = self.session.namespace
        self.path = self.session.path

    # -- lifecycle (the session: mnemex.engine.sqlite.session) ------------------------

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, namespace={self.namespace!r})"

    def resolve_namespace(self, namespace: NamespaceArg, *, allow_all: bool = False) -> str | None:
        """The namespace a call names (``None``: the store's own; ``ALL``: ``None``, if allowed)."""
        return self.session.resolve_namespace(namespace, allow_all=allow_all)

    def _own(self, namespace: str | None) -> str:
        """The one namespace a write names (``None``: the store's own)."""
        ns = self.session.resolve_namespace(namespace)
        assert ns is not None
        return ns

    # -- embeddings (see mnemex.engine.embedding) ------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder in use, or ``None``: lexical only. The store's recorded one, unless
        another is configured (then an :class:`~mnemex.embed.Unavailable` until
        :meth:`reindex` or :meth:`embed` switches the store; :func:`mnemex.embed.settle`)."""
        return self.session.embedding.embedder

    @property
    def last_embedding_error(self) -> str | None:
        """Why the last write stored memories without vectors (``None``: it did not)."""
        return self.session.embedding.last_error

    def embed(
        self, *, progress: Callable[[int], None] | None = None, force: bool = False
    ) -> EmbedReport:
        """Give every memory (all namespaces) a vector for the configured model.

        Only memories without one are embedded unless ``force``, which first drops the model's
        vectors (after a model file changed under the same id). Raises
        :class:`~mnemex.errors.EmbeddingError` when embedding fails; what was stored before the
        failure stays. A configured embedder other than the store's becomes the store's once all is
        embedded; a provider skipped after a recent failure is tried again at once.
        """
        return self.session.embedding.embed(progress=progress, force=force)

    def reindex(
        self,
        *,
        progress: Callable[[str, int, int], None] | None = None,
        force: bool = False,
        prune: bool = False,
    ) -> EmbedReport | None:
        """Rebuild the full-text index and embed what lacks a vector for the configured model.

        ``force`` re-embeds everything; ``prune`` deletes vectors of other models. The embedder
        configured becomes the store's once its vectors are stored (none configured: the store's
        own). Returns the report (``None``: no embedder). The index is rebuilt, and the
        per-namespace ranking statistics counted anew, under the write lock, only when they
        differ from a rebuild. ``progress(phase, done, total)`` follows
        ``embedding`` (the memories without a vector; every memory with ``force``) and then, with windows, ``re-windowing``
        (every memory with vectors, looked at; those stored with other windows than their
        text's now are embedded anew).
        """
        return self.session.embedding.reindex(progress=progress, force=force, prune=prune)

    # -- writes ----------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        kind: str = DEFAULT_KIND,
        tags: Iterable[str] | None = None,
        source: str | None = None,
        confidence: float = DEFAULT_CONFIDENCE,
        pinned: bool = False,
        created_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        namespace: str | None = None,
        embed: bool = True,
        dedup: bool | None = None,
    ) -> str:
        """Store one memory and return its id: see :meth:`remember`, which says more."""
        return self.remember(
            content,
            kind=kind,
            tags=tags,
            source=source,
            confidence=confidence,
            pinned=pinned,
            created_at=created_at,
            metadata=metadata,
            id=id,
            namespace=namespace,
            embed=embed,
            dedup=dedup,
        ).id

    def remember(
        self,
        content: str,
        *,
        kind: str = DEFAULT_KIND,
        tags: Iterable[str] | None = None,
        source: str | None = None,
        confidence: float = DEFAULT_CONFIDENCE,
        pinned: bool = False,
        created_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        namespace: str | None = None,
        embed: bool = True,
        dedup: bool | None = None,
    ) -> Added:
        """Store one memory unless it repeats one already in the namespace.

        With ``dedup`` (default: the ``dedup`` setting, on) a memory that repeats an existing one
        (same text, normalized BM25 above ``dedup_text``, or cosine above ``dedup_cosine`` with
        embeddings; see :mod:`mnemex.dedup`) is merged into it instead of inserted: the result has
        the existing id and ``deduplicated=True``. A memory given its own ``id`` is always inserted.
        Bulk writes (:meth:`add_many`, imports) never deduplicate; run :meth:`dedup` after them. On
        PostgreSQL an exact repeat (same text) is merged even then: the schema keeps one
        memory per text and namespace, which two writers racing cannot break.
        """
        item: dict[str, Any] = {
            "content": content,
            "kind": kind,
            "tags": tags,
            "source": source,
            "confidence": confidence,
            "pinned": pinned,
            "created_at": created_at,
            "metadata": metadata,
            "id": id,
        }
        check = self.settings.dedup if dedup is None else bool(dedup)
        if not check or id is not None:
            from mnemex.results import Added

            return Added(self.add_many([item], namespace=namespace, embed=embed)[0])
        row = prepare(item, self._own(namespace), utcnow(), False, self.settings.max_content_bytes)
        from mnemex import memories

        return memories.remember(self.session, row, embed)

    def add_many(
        self,
        items: Iterable[Mapping[str, Any] | str],
        *,
        namespace: str | None = None,
        keep_namespaces: bool = False,
        on_conflict: Conflict = "error",
        embed: bool = True,
    ) -> list[str]:
        """Store many memories in one transaction: all of them, or none on any error.

        Each item is the text of a memory or a mapping with the keyword arguments of :meth:`add`.
        Ids given by the caller must be new unless ``on_conflict="skip"``, which leaves existing ids
        untouched and returns them as they are. With ``keep_namespaces`` an item's own ``namespace``
        key is honoured. On PostgreSQL a text already stored in its namespace is not stored again:
        its item's id is the stored memory's.

        Once stored, new memories are embedded (when an embedder is configured and ``embed`` is
        true), outside the write transaction. If embedding fails the memories stay stored without
        vectors, the error is in :attr:`last_embedding_error`, and the next writes catch up (each at
        most ``CATCH_UP_MEMORIES``, 500, or as many as it wrote, with a warning saying how many are
        left), :meth:`embed` all at once. An interrupted write's memories are caught up alike.
        """
        ns = self._own(namespace)
        from mnemex import memories

        return memories.add_many(self.session, items, ns, keep_namespaces, on_conflict, embed)

    def update(
        self,
        id: str,
        *,
        content: Any = UNSET,
        kind: Any = UNSET,
        tags: Any = UNSET,
        source: Any = UNSET,
        confidence: Any = UNSET,
        pinned: Any = UNSET,
        metadata: Any = UNSET,
        created_at: Any = UNSET,
        namespace: str | None = None,
        embed: bool = True,
    ) -> Memory:
        """Change fields of one memory; returns it as stored. Unknown ids raise.

        New content drops the memory's vectors and embeds it again (when an embedder is configured
        and ``embed`` is true). The content of a chunk of a workspace file cannot be changed here:
        its file is the truth.
        """
        given = {
            "content": content,
            "kind": kind,
            "tags": tags,
            "source": source,
            "confidence": confidence,
            "pinned": pinned,
            "metadata": metadata,
            "created_at": created_at,
        }
        session, max_bytes = self.session, self.settings.max_content_bytes
        from mnemex import memories

        memory, seq = memories.update(session, self._own(namespace), id, given, max_bytes)
        session.after_write()
        if seq is not None and embed:
            session.embedding.embed_new([seq])
        return memory

    def dedup(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> DedupReport:
        """Find memories that repeat an older one in the namespace and merge them.

        Each duplicate is folded into the older memory as a write-time duplicate would be (see
        :mod:`mnemex.dedup`), then moved, unchanged, to the namespace ``<namespace>/duplicates``
        with ``duplicate_of`` in its metadata: it leaves searches but nothing is deleted. With
        ``dry_run`` only the pairs are reported. ``progress`` is called with the number of memories
        checked since the last call.
        """
        from mnemex import dedup as dups

        return dups.dedup(self.session, self._own(namespace), dry_run=dry_run, progress=progress)

    def forget(self, ids: Iterable[str] | str, *, namespace: str | None = None) -> ForgetResult:
        """Delete memories by id. Ids not in the namespace are reported in ``missing``."""
        from mnemex import memories

        return memories.forget(self.session, self._own(namespace), ids)

    # -- relations -------------------------------------------------------------

    def relate(
        self,
        subject: str,
        predicate: str,
        object: str,
        *,
        confidence: float = DEFAULT_CONFIDENCE,
        source_memory: str | None = None,
        namespace: str | None = None,
    ) -> Relation:
        """Store ``subject -[predicate]-> object`` in the namespace, or strengthen it.

        Entity names are compared ignoring case and predicates spelled in snake_case (``worksOn``,
        ``works on`` and ``works-on`` are one), so relating a known triple again keeps one relation
        whose confidence is the higher of the two. ``source_memory`` names the memory the relation
        was read from; it must be in the namespace.
        """
        from mnemex import relations as relations_db

        ns = self._own(namespace)
        return relations_db.relate_in(
            self.session, ns, subject, predicate, object, confidence, source_memory
        )

    def neighbors(
        self, entity: str, *, limit: int = 50, namespace: NamespaceArg = None
    ) -> list[Relation]:
        """Relations with ``entity`` (a whole name, any case) as subject or object,
        most confident first."""
        from mnemex import relations as relations_db

        ns = self.resolve_namespace(namespace, allow_all=True)
        return relations_db.neighbors_in(self.session, entity, ns, limit)

    def forget_relations(
        self, ids: Iterable[str] | str, *, namespace: str | None = None
    ) -> ForgetResult:
        """Delete relations by id; ids not in the namespace are reported in ``missing``."""
        from mnemex import relations as relations_db

        return relations_db.forget_in(self.session, ids, self._own(namespace))

    def iter_relations(self, *, namespace: NamespaceArg = None) -> Iterator[Relation]:
        """Every relation of the namespace (or all), oldest first."""
        from mnemex import relations as relations_db

        ns = self.resolve_namespace(namespace, allow_all=True)
        yield from relations_db.iterate_in(self.session, ns)

    # -- reads -----------------------------------------------------------------

    def get(self, ids: Iterable[str] | str, *, namespace: str | None = None) -> GetResult:
        """Full memories for ``ids`` (one ``IN`` query per 500 ids), in the order asked."""
        from mnemex import memories

        return memories.get(self.session, self.resolve_namespace(namespace), ids)

    def namespaces_of(self, ids: Iterable[str] | str) -> dict[str, str]:
        """The namespace holding each of ``ids`` that is a memory, in any namespace (an id
        is unique in the whole store); ids of no memory are left out."""
        from mnemex import memories

        return memories.holders(self.session, ids)

    def timeline(
        self,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        *,
        kinds: Iterable[str] | str | None = None,
        tags: Iterable[str] | str | None = None,
        limit: int = 20,
        oldest_first: bool = False,
        around: str | None = None,
        before: int = 5,
        after: int = 5,
        namespace: NamespaceArg = None,
    ) -> list[TimelineEntry]:
        """Memories created in ``[start, end)``, newest first: id, time, kind, tags, summary.

        With ``around`` (a memory id) the result is that memory with up to ``before`` memories
        created just before it and ``after`` just after it (those within the filters), in place of
        the ``limit`` newest. An ``around`` id not in the namespace raises
        :class:`~mnemex.errors.UnknownMemory`.
        """
        start = None if start is None else parse_time(start, what="start")
        end = None if end is None else parse_time(end, what="end")
        filters = Filters.of(
            self.resolve_namespace(namespace, allow_all=True), kinds, tags, start, end
        )
        from mnemex import memories

        return memories.timeline(
            self.session,
            filters,
            limit=limit,
            oldest_first=oldest_first,
            around=around,
            before=before,
            after=after,
        )

    def search(
        self, query: str, options: SearchOptions | int | None = None, **given: Any
    ) -> SearchResult:
        """The memories that best match ``query``, best first.

        ``query`` is any natural-language text. ``options`` is a
        :class:`~mnemex.config.SearchOptions` (``SearchOptions.of(store.settings, ...)``),
        or its fields are given here as keyword arguments (an ``int`` in its place is the
        ``limit``). A field left ``None`` takes its setting: ``mode`` (``auto``: hybrid with
        an embedder, else lexical), ``fusion`` (``rrf``, ``weighted``, ``adaptive``) with
        ``weights`` = (vector, text), the ranking stages' options
        (:data:`mnemex.search.stages.STAGES`: ``decay`` by age from ``now``, ``confidence``,
        ``mmr``, ...), each arm's minimum score ``threshold``, ``expand`` (query expansion)
        and ``relations``: the most relations, ranked by BM25 · confidence, returned apart
        in ``SearchResult.relations`` (the memory filters ``kinds``, ``tags``, ``since``,
        ``until`` do not apply to them). ``explain`` attaches each hit's rank and score in
        each arm; with ``raw`` the query is an FTS5 expression (syntax errors raise
        :class:`~mnemex.errors.InvalidQuery`), which the lexical arm answers alone in every
        mode: the expression decides what matches, BM25 ranks it; ``snippets=False`` is
        faster.
        """
        if isinstance(options, SearchOptions):
            if given:
                raise TypeError("search takes SearchOptions or keyword arguments, not both")
        else:
            if options is not None:
                if isinstance(options, bool) or not isinstance(options, int):
                    raise InvalidInput(
                        f"options must be SearchOptions or a limit (int), not {type(options).__name__}"
                    )
                if "limit" in given:
                    raise TypeError("search got the limit twice")
                given["limit"] = options
            options = SearchOptions.of(self.settings, **given)
        return self._search(query, options)

    def _search(self, query: str, options: SearchOptions) -> SearchResult:
        from mnemex.search import stages as ranking
        from mnemex.search.pipeline import retriever, run_search

        ns = self.resolve_namespace(options.namespace, allow_all=True)
        filters = Filters.of(ns, options.kinds, options.tags, options.since, options.until)
        notes = list(options.notes)
        embedder = self.embedder if options.wants_vectors else None
        switches = ranking.switches(self.settings, options.stages)
        request = Request.of(query, filters, options, self.settings, embedder is not None, switches)
        started = time.perf_counter()
        fresh, stale = self._freshen(filters.namespace)
        notes.extend(fresh)
        took = (time.perf_counter() - started) * 1000
        session, wanted = self.session, options.relations
        with session.connection() as conn:
            result = run_search(retriever(session, conn, embedder), request)
            started, found = time.perf_counter(), []
            if wanted:  # a recall asks for none: its process need not import relations
                from mnemex import relations as relations_db

                found = relations_db.search_in(session, conn, result.query, ns, wanted)
            took += (time.perf_counter() - started) * 1000
        return dataclasses.replace(
            result,
            query=echo(result.query),
            notes=(*notes, *result.notes),
            stale=stale,
            relations=tuple(found),
            took_ms=result.took_ms + took,
        )

    def recall(
        self,
        task: str,
        budget_tokens: int | None = None,
        max_memories: int | None = None,
        *,
        token_counter: str | Callable[[str], int] | None = None,
        now: datetime | str | None = None,
        **search: Any,
    ) -> RecallResult:
        """The best memories for ``task`` as a ``## Relevant Memories`` block for a prompt.

        At most ``max_memories`` memories, best first, in at most ``budget_tokens`` tokens counted
        by ``token_counter``: ``chars`` (``len / 4``, one a CJK character), ``wordpiece`` (the local
        model's tokenizer) or any callable from text to a count; left ``None``, each is its setting
        (``recall_max``, ``recall_budget``, ``token_counter``: 5, 500, chars;
        :class:`~mnemex.config.RecallOptions`). A memory that does not fit the room left is
        replaced by its excerpt, the lines around the part that matches ``task`` best (``cut`` is
        then true), or skipped when less than ``MIN_EXCERPT_TOKENS`` are left (see
        :mod:`mnemex.search.recall`). ``search``: the fields of the search behind it
        (:meth:`search`: ``kinds``, ``tags``, ``since``, ``until``, ``mode``, ``namespace``, the
        ranking stages' options, ...), but its limit, snippets and relations, which recall sets.
        """
        options = RecallOptions.of(self.settings, budget_tokens, max_memories, token_counter)
        if fixed := sorted({"limit", "snippets", "relations"} & set(search)):
            raise TypeError(f"recall sets {', '.join(fixed)} itself")
        moment = utcnow() if now is None else parse_time(now, what="now")
        found = self.search(
            task,
            limit=options.candidates,
            now=moment,
            snippets=False,
            relations=0,  # a recall block holds memories only
            **search,
        )
        from mnemex.search import recall as packing

        bodies = packing.read_bodies(self.session, [hit.id for hit in found.hits])
        echoed = echo(task if isinstance(task, str) else found.query)
        return packing.recall(echoed, found, bodies, options, moment)

    def stats(self, *, namespace: NamespaceArg = None) -> Stats:
        """What the namespace holds (or, with :data:`ALL`, the whole store).

        ``vectors``, ``pending_vectors`` and ``other_models`` count the namespace's memories;
        ``total_memories`` and ``namespaces`` always describe the whole file.
        """
        ns = self.resolve_namespace(namespace, allow_all=True)
        from mnemex import memories

        return memories.stats(self.session, ns, self.embedder)

    def iter_memories(
        self, *, namespace: NamespaceArg = None, batch: int = 1000
    ) -> Iterator[Memory]:
        """Every memory of the namespace (or all), oldest first, read in batches."""
        ns = self.resolve_namespace(namespace, allow_all=True)
        from mnemex import memories

        yield from memories.iterate(self.session, ns, batch)

    def count(self, *, namespace: NamespaceArg = None) -> int:
        ns = self.resolve_namespace(namespace, allow_all=True)
        from mnemex import memories

        return memories.count(self.session, ns)

    def check(self) -> dict[str, Any]:
        """Verify the store: SQLite and FTS5 integrity, and that the full-text index and the
        per-namespace ranking statistics hold exactly what a rebuild from the memories table
        would (no ghost rows).

        Reads every row: meant for ``mnemex check`` and tests, not hot paths.
        """
        from mnemex import memories

        return memories.check(self.session)

    def kind_counts(self, *, namespace: NamespaceArg = None) -> dict[str, dict[str, int]]:
        """Memories per kind in each namespace (one, or with :data:`ALL` every one):
        ``{namespace: {kind: count}}``, namespaces in order, kinds most common first."""
        ns = self.resolve_namespace(namespace, allow_all=True)
        from mnemex import memories

        return memories.kind_counts(self.session, ns)

    def thread(
        self, id: str, *, before: int = 5, after: int = 5, namespace: str | None = None
    ) -> list[TimelineEntry]:
        """A memory in its thread: the memories of the namespace with the same ``source``
        (a chat session, a captured agent session), up to ``before`` written just before it
        and ``after`` just after it, in the order written. A memory without a source is a
        thread of its own. An id not in the namespace raises
        :class:`~mnemex.errors.UnknownMemory`."""
        from mnemex import memories

        return memories.thread(self.session, self._own(namespace), id, before, after)

    def last_thread(
        self, kind: str, *, limit: int = 5, namespace: str | None = None
    ) -> list[Memory]:
        """The newest ``limit`` memories of ``kind`` from the thread (``source``) of the
        newest one of that kind (the last captured session's prompts), newest first."""
        from mnemex import memories

        return memories.last_thread(self.session, self._own(namespace), kind, limit)

    def notable(
        self, *, limit: int = 20, skip_kinds: Iterable[str] = (), namespace: str | None = None
    ) -> list[Memory]:
        """Up to ``limit`` memories of kinds other than ``skip_kinds``: pinned first, then
        the most confident, the newest first."""
        from mnemex import memories

        return memories.notable(self.session, self._own(namespace), skip_kinds, limit)

    # -- state kept for tools built on the store (the hooks) ---------------------------

    def state(self, key: str) -> str | None:
        """The value a tool keeps under ``key`` (see :meth:`set_state`), or ``None``."""
        return self.session.state(_state_key(key))

    def set_state(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` in the store's ``meta`` table. Keys start with
        ``hooks`` (the hooks' capture offsets, ``hooks doctor``'s mark): the store's own
        records are not to be written this way."""
        self.session.set_state(_state_key(key), value)

    def release_if_empty(self) -> bool:
        """Whether the store holds no memory, relation or workspace and no other process
        has it open (a SQLite file then leaves WAL mode: it can be deleted)."""
        return self.session.release_if_empty()

    def relations_of(self, memory_id: str, *, namespace: str | None = None) -> list[Relation]:
        """The relations read from a memory (their ``source_memory``), most confident first."""
        from mnemex import relations as relations_db

        return relations_db.read_from_in(self.session, memory_id, self._own(namespace))

    # -- the injection log (see mnemex.injections) ------------------------------------

    def log_injection(
        self,
        prompt: str,
        outcome: str,
        *,
        agent: str = "",
        session_id: str = "",
        event: str = "UserPromptSubmit",
        block: str = "",
        tokens: int = 0,
        budget_tokens: int = 0,
        mode_used: str = "",
        notes: Iterable[str] = (),
        memories: Iterable[Mapping[str, Any]] = (),
        floor: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        namespace: str | None = None,
    ) -> int | None:
        """Record what the prompt hook injected into a prompt (``outcome`` ``injected``,
        with its ``block``) or that it injected nothing (``nothing``), with each memory it
        weighed (``id``, ``kind``, ``score``, ``injected``, and ``line``, ``reason``) and the
        relevance ``floor``'s decision; then prune the log to ``injection_log_days`` and
        ``injection_log_entries``. Returns the entry's id, or ``None`` when the
        ``injection_log`` setting is off. Texts are stored as given: the hooks redact them
        first. Read back as :class:`~mnemex.results.Injection`."""
        from mnemex import injections

        fields = {
            "prompt": prompt,
            "outcome": outcome,
            "agent": agent,
            "session_id": session_id,
            "event": event,
            "block": block,
            "tokens": tokens,
            "budget_tokens": budget_tokens,
            "mode_used": mode_used,
            "notes": notes,
            "memories": memories,
            "floor": floor,
            "created_at": created_at,
        }
        return injections.log(self.session, self._own(namespace), fields)

    def injections(
        self,
        *,
        session_id: str | None = None,
        before: int | None = None,
        limit: int = 50,
        namespace: NamespaceArg = None,
    ) -> list[Injection]:
        """Entries of the injection log, newest first: of the namespace (or :data:`ALL`),
        of one agent session, with ids below ``before`` (the next page)."""
        from mnemex import injections

        ns = self.resolve_namespace(namespace, allow_all=True)
        return injections.read(self.session, ns, session_id, before, limit)

    def injection(self, id: int) -> Injection | None:
        """One entry of the injection log by its id (any namespace), or ``None``."""
        from mnemex import injections

        return injections.one(self.session, id)

    def injection_sessions(
        self, *, limit: int = 100, namespace: NamespaceArg = None
    ) -> list[InjectionSession]:
        """The agent sessions of the injection log, the latest first: prompts each, and how
        many of them got a block."""
        from mnemex import injections

        ns = self.resolve_namespace(namespace, allow_all=True)
        return injections.sessions(self.session, ns, limit)

    # -- markdown workspaces ------------------------------------------------------

    def sync(
        self,
        directory: str | os.PathLike[str],
        *,
        globs: Iterable[str] | None = None,
        ignore: Iterable[str] | None = None,
        embed: bool = True,
        progress: Callable[[str, int, int], None] | None = None,
        namespace: str | None = None,
    ) -> SyncReport:
        """Index the markdown workspace in ``directory`` and keep it true to the files.

        The first call registers the folder as a workspace of the namespace with ``globs`` (default
        ``MEMORY.md``, ``memory.md``, ``memory/**/*.md``) and ``ignore`` patterns (default hidden
        files and folders); later calls reuse them unless given again. Unchanged files are skipped
        by size and mtime, then by SHA-256; unchanged chunks keep their ids and vectors; chunks of
        deleted files are removed; renamed files move without re-embedding (see
        :mod:`mnemex.ingest.workspace`). Files that cannot be indexed (not UTF-8, unreadable) are
        reported in ``problems`` and the rest is indexed. ``progress(phase, done, total)`` is called
        while reading files and while embedding chunks.
        """
        from mnemex.ingest import workspace as spaces

        ns = self._own(namespace)
        return spaces.sync_folder(
            self.session, directory, ns, globs, ignore, embed=embed, progress=progress
        )

    def remove_workspace(
        self, directory: str | os.PathLike[str], *, namespace: str | None = None
    ) -> int:
        """Stop indexing a workspace: delete its files' records and chunks (never the files).

        Returns the number of chunks removed; raises when the folder is no workspace of the
        namespace.
        """
        from mnemex.ingest import workspace as spaces

        return spaces.remove(self.session, directory, self._own(namespace))

    def workspace_status(
        self, directory: str | os.PathLike[str] | None = None, *, namespace: NamespaceArg = None
    ) -> tuple[WorkspaceStatus, ...]:
        """Each workspace of the namespace (or ``ALL``, or only ``directory``): files, chunks,
        problems, pending vectors, the last sync, and how many files differ on disk now (a scan
        of sizes and mtimes).
        """
        from mnemex.ingest import workspace as spaces

        return spaces.statuses(
            self.session, self.resolve_namespace(namespace, allow_all=True), directory
        )

    def add_to_workspace(
        self,
        content: str,
        directory: str | os.PathLike[str],
        *,
        kind: str | None = None,
        tags: Iterable[str] | None = None,
        created_at: datetime | str | None = None,
        namespace: str | None = None,
    ) -> Appended:
        """Write a memory through to a workspace: append it to the daily file
        ``memory/YYYY-MM-DD.md`` (local date of ``created_at``, default now) as a ``## HH:MM ·
        kind · #tags`` entry, and index that file. The memory is then the chunk (or chunks)
        holding the entry: ``result.ids``. A folder not yet synced is synced first.
        """
        from mnemex.ingest import workspace as spaces

        ns = self._own(namespace)
        return spaces.write_through(
            self.session, directory, ns, content, kind=kind, tags=tags, created_at=created_at
        )

    def watch(
        self,
        directory: str | os.PathLike[str],
        *,
        debounce: float | None = None,
        stop: threading.Event | None = None,
        on_sync: Callable[[SyncReport], None] | None = None,
        namespace: str | None = None,
    ) -> None:
        """Sync a workspace, then again after each change (``debounce`` seconds of quiet, default
        1.5), until ``stop`` is set or the process is interrupted. Needs ``mnemex[watch]``; see
        :mod:`mnemex.ingest.watch`.
        """
        from mnemex.ingest import watch

        ns = self._own(namespace)
        watch.watch(self.session, directory, ns, debounce=debounce, stop=stop, on_sync=on_sync)

    def _freshen(self, namespace: str | None) -> tuple[list[str], bool]:
        """:func:`mnemex.ingest.workspace.freshen`, unless the namespace has no workspace
        (most stores): then not even its module is imported."""
        with self.session.connection() as conn:
            if not self.session.workspaces.exists(conn, namespace):
                return [], False
        from mnemex.ingest import workspace as spaces

        return spaces.freshen(self.session, namespace)


def _state_key(key: str) -> str:
    if not isinstance(key, str) or not key.startswith(STATE_PREFIX):
        raise InvalidInput(f"a state key starts with {STATE_PREFIX!r}, got {key!r}")
    return key
