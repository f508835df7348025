"""The inspector's pages that only read: search, explain, timeline, a memory, the prompt
preview, the injection log and health. Each is a function ``(ui, request) -> Response``
over the public :class:`~mnemex.Store` API."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mnemex.engine import ALL
from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.records import dataclass
from mnemex.ui import present

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from mnemex.engine import NamespaceArg
    from mnemex.models import Memory, SearchResult
    from mnemex.ui.inspector import Inspector

ALL_NAMESPACES: Final = "*"  # ``ns=*``: every namespace (as mnemex writes ALL elsewhere)
TIMELINE_PAGE: Final = 100  # entries a timeline request returns
INJECTIONS_PAGE: Final = 50
THREAD_SIDE: Final = 5  # thread neighbours shown on each side of a memory
SIMILAR: Final = 6  # memories a search with a memory's text may return beside it
SIMILAR_QUERY_CHARS: Final = 1_000
MAX_FILE_BYTES: Final = 2_000_000  # a workspace file larger than this is not shown
MODES: Final = ("", "lexical", "vector", "hybrid")


def split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@dataclass(frozen=True)
class Scope:
    """The filters of a search or a timeline, as the address gives them: ``ns`` (``*`` or
    absent: every namespace), ``kind`` and ``tag`` (comma-separated), ``since``,
    ``until``, ``mode``."""

    ns: str
    kinds: tuple[str, ...]
    tags: tuple[str, ...]
    since: str
    until: str
    mode: str

    @classmethod
    def of(cls, request: Request, default_ns: str = ALL_NAMESPACES) -> Scope:
        q = request.query_params
        mode = q.get("mode", "")
        if mode not in MODES:
            raise InvalidInput(f"mode must be lexical, vector or hybrid, got {mode!r}")
        return cls(
            ns=q.get("ns", "").strip() or default_ns,
            kinds=tuple(k for value in q.getlist("kind") for k in split(value)),
            tags=tuple(t for value in q.getlist("tag") for t in split(value)),
            since=q.get("since", "").strip(),
            until=q.get("until", "").strip(),
            mode=mode,
        )

    @property
    def namespace(self) -> NamespaceArg:
        return ALL if self.ns == ALL_NAMESPACES else self.ns

    @property
    def narrow(self) -> bool:
        return bool(self.kinds or self.tags or self.since or self.until or self.mode)

    def params(self) -> dict[str, Any]:
        """The filters as address parameters (for :func:`mnemex.ui.present.href`)."""
        return {
            "ns": None if self.ns == ALL_NAMESPACES else self.ns,
            "kind": ",".join(self.kinds),
            "tag": ",".join(self.tags),
            "since": self.since,
            "until": self.until,
            "mode": self.mode,
        }

    def search(self, ui: Inspector, query: str, **options: Any) -> SearchResult:
        return ui.store.search(
            query,
            kinds=list(self.kinds) or None,
            tags=list(self.tags) or None,
            since=self.since or None,
            until=self.until or None,
            mode=self.mode or None,
            namespace=self.namespace,
            **options,
        )


def _nav(ui: Inspector, scope: Scope | None = None) -> dict[str, Any]:
    """What every page's header and filters need."""
    kinds = ui.kinds()
    every = sorted({k for counts in kinds.values() for k in counts})
    return {"namespaces": list(kinds), "all_kinds": every, "scope": scope}


# -- search ------------------------------------------------------------------------------


def search_page(ui: Inspector, request: Request) -> Response:
    """``/?q=...``: the hits of a search as ``mnemex search`` ranks them, with its filters."""
    scope = Scope.of(request)
    query = request.query_params.get("q", "").strip()
    result = scope.search(ui, query) if query else None
    return ui.render(
        request,
        "search.html",
        fragment="_results.html",
        page="search",
        address=present.href("/", q=query, **scope.params()),
        q=query,
        result=result,
        empty=_why_empty(ui, scope, result) if result is not None and not result.hits else None,
        **_nav(ui, scope),
    )


def _why_empty(ui: Inspector, scope: Scope, result: SearchResult) -> dict[str, Any]:
    """Why a search returned nothing: its notes, the relevance floor's decision, and how
    many memories the filters leave to search."""
    counts = ui.kinds()
    spaces = list(counts) if scope.ns == ALL_NAMESPACES else [scope.ns]
    held = sum(n for ns in spaces for n in counts.get(ns, {}).values())
    of_kinds = sum(
        n for ns in spaces for kind, n in counts.get(ns, {}).items() if kind in scope.kinds
    )
    return {
        "notes": result.notes,
        "floor": result.floor,
        "held": held,
        "of_kinds": of_kinds if scope.kinds else None,
        "namespace_known": scope.ns == ALL_NAMESPACES or scope.ns in counts,
    }


def explain(ui: Inspector, request: Request) -> Response:
    """``/explain?q=...&id=...``: one hit's trace, from the same search with ``explain``."""
    scope = Scope.of(request)
    query = request.query_params.get("q", "").strip()
    ident = request.query_params.get("id", "")
    if not query or not ident:
        raise InvalidInput("explain needs the search (q=...) and the hit's id (id=...)")
    result = scope.search(ui, query, explain=True)
    hit = next((h for h in result.hits if h.id == ident), None)
    if hit is None:
        raise InvalidInput(f"{ident} is no longer a hit of this search: search again")
    return ui.render(
        request,
        "explain.html",
        fragment="_explain.html",
        page="search",
        q=query,
        hit=hit,
        result=result,
        **_nav(ui, scope),
    )


# -- timeline ----------------------------------------------------------------------------


def timeline(ui: Inspector, request: Request) -> Response:
    """``/timeline``: memories by day, newest first, a page at a time (``after=ID``: the
    page after that memory; ``until``: from a date back)."""
    scope = Scope.of(request)
    after = request.query_params.get("after", "").strip()
    options: dict[str, Any] = {
        "kinds": list(scope.kinds) or None,
        "tags": list(scope.tags) or None,
        "namespace": scope.namespace,
    }
    start, end = scope.since or None, scope.until or None
    if after:
        found = ui.store.timeline(
            start, end, around=after, before=TIMELINE_PAGE, after=0, **options
        )
        entries = [e for e in found if e.id != after]
    else:
        entries = ui.store.timeline(start, end, limit=TIMELINE_PAGE, **options)
    days: list[tuple[str, list[Any]]] = []
    for entry in entries:
        label = present.day(entry.created_at)
        if not days or days[-1][0] != label:
            days.append((label, []))
        days[-1][1].append(entry)
    return ui.render(
        request,
        "timeline.html",
        fragment="_timeline_page.html",
        page="timeline",
        days=days,
        last_day=request.query_params.get("day", ""),
        next_after=entries[-1].id if len(entries) >= TIMELINE_PAGE else None,
        **_nav(ui, scope),
    )


# -- a memory ----------------------------------------------------------------------------


def memory_page(ui: Inspector, request: Request) -> Response:
    """``/memory?id=...&ns=...``: every field, its relations, its thread, similar
    memories, and for a chunk of a workspace file the file's lines now."""
    ident, namespace = memory_address(request)
    found = ui.store.get([ident], namespace=namespace).memories
    if not found:
        session = request.state.session
        return ui.render(
            request,
            "missing.html",
            status=404,
            page="memory",
            ident=ident,
            ns=namespace,
            undo=ui.can_undo(session, namespace, ident) and not ui.read_only,
            **_nav(ui),
        )
    memory = found[0]
    return ui.render(
        request,
        "memory.html",
        page="memory",
        m=memory,
        relations=ui.store.relations_of(memory.id, namespace=namespace),
        thread=_thread(ui, memory),
        file=file_view(memory),
        **_nav(ui),
    )


def similar(ui: Inspector, request: Request) -> Response:
    """``/memory/similar?id=...&ns=...``: what a search with the memory's text finds beside
    it (asked by the memory's page once shown: a search with a long text is its slowest
    part)."""
    ident, namespace = memory_address(request)
    found = ui.store.get([ident], namespace=namespace).memories
    if not found:
        raise UnknownMemory([ident], namespace)
    memory = found[0]
    return ui.render(
        request,
        "similar.html",
        fragment="_similar.html",
        page="memory",
        m=memory,
        similar=_similar(ui, memory),
        **_nav(ui),
    )


def memory_address(request: Request) -> tuple[str, str]:
    ident = request.query_params.get("id", "").strip()
    namespace = request.query_params.get("ns", "").strip()
    if not ident or not namespace:
        raise InvalidInput("a memory's address names its id and namespace: /memory?id=...&ns=...")
    return ident, namespace


def _thread(ui: Inspector, memory: Memory) -> list[Any]:
    if memory.source is None or memory.location is not None:
        return []  # no thread; a workspace chunk's neighbours are its file's lines
    return ui.store.thread(
        memory.id, before=THREAD_SIDE, after=THREAD_SIDE, namespace=memory.namespace
    )


def _similar(ui: Inspector, memory: Memory) -> list[dict[str, Any]]:
    """Memories a search with this memory's text finds beside it, best first; a
    near-duplicate is one of the same text (ignoring case and spacing), or with a cosine
    at or above the store's ``dedup_cosine``."""
    query = memory.content[:SIMILAR_QUERY_CHARS]
    found = ui.store.search(
        query,
        limit=SIMILAR + 1,
        namespace=memory.namespace,
        explain=True,
        threshold=False,
        relations=0,
    )
    others = [hit for hit in found.hits if hit.id != memory.id][:SIMILAR]
    texts = {}
    if others:
        got = ui.store.get([hit.id for hit in others], namespace=memory.namespace)
        texts = {m.id: _folded(m.content) for m in got.memories}
    same, out = _folded(memory.content), []
    for hit in others:
        scores = (hit.explain or {}).get("scores", {})
        cosine = scores.get("cosine")
        near = texts.get(hit.id) == same or (
            cosine is not None and cosine >= ui.store.settings.dedup_cosine
        )
        out.append({"hit": hit, "cosine": cosine, "text": scores.get("text"), "near": near})
    return out


def _folded(text: str) -> str:
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class FileView:
    """A workspace chunk's file now: its lines at the chunk's place, and whether they
    still hold the chunk's text (``stale``: no; ``moved_to``: it is elsewhere)."""

    path: str
    label: str
    lines: tuple[tuple[int, str], ...] = ()
    stale: bool = False
    moved_to: str | None = None
    problem: str | None = None


def file_view(memory: Memory) -> FileView | None:
    place = memory.location
    if place is None:
        return None
    root = Path(place.workspace)
    path = root / place.path
    shown = str(path)
    try:
        if not path.resolve().is_relative_to(root.resolve()):
            return FileView(shown, place.label, problem="the path leaves its workspace")
        if path.stat().st_size > MAX_FILE_BYTES:
            return FileView(shown, place.label, problem="the file is too large to show")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return FileView(shown, place.label, stale=True, problem=f"cannot read it now: {exc}")
    lines = text.splitlines()
    here = lines[place.start_line - 1 : place.end_line]
    numbered = tuple(enumerate(here, start=place.start_line))
    if "\n".join(here).strip() == memory.content.strip():
        return FileView(shown, place.label, numbered)
    at = text.find(memory.content.strip())
    moved = None
    if at >= 0:
        first = text.count("\n", 0, at) + 1
        moved = f"{place.path}:{first}-{first + memory.content.strip().count(chr(10))}"
    return FileView(shown, place.label, numbered, stale=True, moved_to=moved)


# -- prompt preview ----------------------------------------------------------------------


def preview(ui: Inspector, request: Request) -> Response:
    """``/preview?prompt=...``: the block ``mnemex recall`` prints (and the prompt hook
    injects) for a prompt, with its tokens against the budget."""
    scope = Scope.of(request, default_ns=ui.store.namespace)
    prompt = request.query_params.get("prompt", "")
    result = None
    if prompt.strip():
        result = ui.store.recall(
            prompt,
            kinds=list(scope.kinds) or None,
            tags=list(scope.tags) or None,
            mode=scope.mode or None,
            namespace=scope.namespace,
        )
    return ui.render(
        request,
        "preview.html",
        fragment="_preview.html",
        page="preview",
        address=present.href("/preview", prompt=prompt, **scope.params()),
        no_time=True,
        prompt=prompt,
        result=result,
        settings=ui.store.settings,
        **_nav(ui, scope),
    )


# -- the injection log -------------------------------------------------------------------


def injections(ui: Inspector, request: Request) -> Response:
    """``/injections``: the agent sessions the prompt hook answered; with ``session=``,
    each of its prompts with what was injected, or why nothing was."""
    scope = Scope.of(request)
    session_id = request.query_params.get("session", "").strip() or None
    before = request.query_params.get("before", "").strip()
    if before and not before.isdigit():
        raise InvalidInput(f"before must be an entry's number, got {before!r}")
    entries, sessions = [], []
    if session_id is not None:
        entries = ui.store.injections(
            session_id=session_id,
            before=int(before) if before else None,
            limit=INJECTIONS_PAGE,
            namespace=scope.namespace,
        )
    else:
        sessions = ui.store.injection_sessions(namespace=scope.namespace)
    return ui.render(
        request,
        "injections.html",
        fragment="_entries.html" if before else None,
        page="injections",
        session_id=session_id,
        sessions=sessions,
        entries=entries,
        next_before=entries[-1].id if len(entries) >= INJECTIONS_PAGE else None,
        settings=ui.store.settings,
        **_nav(ui, scope),
    )


def injection(ui: Inspector, request: Request) -> Response:
    """``/injections/entry?id=N``: one prompt's entry."""
    given = request.query_params.get("id", "").strip()
    if not given.isdigit():
        raise InvalidInput(f"an entry's address is /injections/entry?id=N, got id={given!r}")
    entry = ui.store.injection(int(given))
    if entry is None:
        raise InvalidInput(
            f"the injection log has no entry {given} (the log keeps a bounded number)"
        )
    return ui.render(
        request,
        "injection.html",
        page="injections",
        entry=entry,
        settings=ui.store.settings,
        **_nav(ui),
    )


# -- health ------------------------------------------------------------------------------


def health(ui: Inspector, request: Request) -> Response:
    """``/health``: counts per namespace and kind, vectors, the embedder, workspaces."""
    store = ui.store
    stats = store.stats(namespace=ALL)
    return ui.render(
        request,
        "health.html",
        page="health",
        stats=stats,
        kinds=ui.kinds(fresh=True),
        engine="PostgreSQL" if store.settings.db_url else "SQLite",
        embedder=store.embedder,
        embedding_error=store.last_embedding_error,
        workspaces=store.workspace_status(namespace=ALL),
        sessions=len(store.injection_sessions(namespace=ALL, limit=1000)),
        settings=store.settings,
        **_nav(ui),
    )


def check(ui: Inspector, request: Request) -> Response:
    """``/health/check``: ``mnemex check`` now (reads every row)."""
    return ui.render(
        request,
        "check.html",
        fragment="_check.html",
        page="health",
        report=ui.store.check(),
        **_nav(ui),
    )
