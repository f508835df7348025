"""The inspector's web application: routes, the page context, and the state it keeps
between requests (the namespaces it lists, what each page session forgot).

Every route is a plain function over the public :class:`~mnemex.Store` API
(:mod:`mnemex.ui.views` reads, :mod:`mnemex.ui.edits` writes), run in
Starlette's thread pool; :class:`~mnemex.ui.guard.Guard` stands in front of
all of them. A request sent by htmx (``HX-Request``) gets the part of the page
it replaces; any other request the whole page, so every view has an address
that can be bookmarked or shared.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

import mnemex
from mnemex.errors import MnemexError
from mnemex.ui import present
from mnemex.ui.guard import Guard, Policy

if TYPE_CHECKING:
    from mnemex.models import Memory
    from mnemex.store import Store

HERE: Final = Path(__file__).resolve().parent
NAMESPACES_TTL: Final = 10.0  # seconds the namespace list of the filters is kept
UNDO_PER_SESSION: Final = 200  # forgotten memories a page session can bring back
UNDO_SESSIONS: Final = 1_000
MAX_FORM_BYTES: Final = 65_536


@dataclass
class Inspector:
    """What the routes share: the store, the templates, the guard's policy, and the
    state kept between requests."""

    store: Store
    policy: Policy
    env: Environment
    _namespaces: tuple[float, dict[str, dict[str, int]]] = (0.0, {})
    _forgotten: OrderedDict[str, OrderedDict[tuple[str, str], Memory]] = field(
        default_factory=OrderedDict
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def read_only(self) -> bool:
        return self.policy.read_only

    def kinds(self, fresh: bool = False) -> dict[str, dict[str, int]]:
        """Memories per kind in each namespace, kept :data:`NAMESPACES_TTL` seconds."""
        at, counts = self._namespaces
        if fresh or time.monotonic() - at > NAMESPACES_TTL:
            counts = self.store.kind_counts(namespace=mnemex.ALL)
            self._namespaces = (time.monotonic(), counts)
        return counts

    def forgot(self, session: str, memory: Memory) -> None:
        """Keep a forgotten memory, to bring back while the page session lasts."""
        with self.lock:
            kept = self._forgotten.setdefault(session, OrderedDict())
            self._forgotten.move_to_end(session)
            kept[(memory.namespace, memory.id)] = memory
            while len(kept) > UNDO_PER_SESSION:
                kept.popitem(last=False)
            while len(self._forgotten) > UNDO_SESSIONS:
                self._forgotten.popitem(last=False)

    def take_back(self, session: str, namespace: str, ident: str) -> Memory | None:
        with self.lock:
            return self._forgotten.get(session, OrderedDict()).pop((namespace, ident), None)

    def can_undo(self, session: str, namespace: str, ident: str) -> bool:
        with self.lock:
            return (namespace, ident) in self._forgotten.get(session, {})

    def render(self, request: Request, template: str, status: int = 200, **ctx: Any) -> Response:
        """``template`` with the page context; for an htmx request that names a fragment
        (``fragment=...`` in ``ctx``), that fragment only, and the page's address to show
        (``address=...``: without the empty fields a form sends)."""
        fragment = ctx.pop("fragment", None)
        address = ctx.pop("address", None)
        partial = (
            fragment is not None
            and request.headers.get("hx-request") == "true"
            and request.headers.get("hx-history-restore-request") != "true"
        )
        name = fragment if partial else template
        context = {
            "page": "",
            "csrf": request.state.csrf,
            "read_only": self.read_only,
            "store_namespace": self.store.namespace,
            **ctx,
        }
        body = self.env.get_template(name).render(context)
        headers = {"vary": "HX-Request"}
        if partial and address is not None:
            headers["hx-push-url"] = address
        started = request.state.started if hasattr(request.state, "started") else None
        if started is not None:
            took = (time.perf_counter() - started) * 1000
            headers["server-timing"] = f"app;dur={took:.1f}"
        return HTMLResponse(body, status_code=status, headers=headers)


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(present.FILTERS)
    env.globals["href"] = present.href
    env.globals["static"] = static_addresses()
    return env


def static_addresses() -> dict[str, str]:
    """Each static file's address with a digest of its content: browsers keep them for a
    year, and a new version has a new address."""
    import hashlib

    out = {}
    for path in sorted((HERE / "static").iterdir()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        out[path.name] = f"/static/{path.name}?v={digest}"
    return out


Handler = Callable[[Inspector, Request], Response]


def route(ui: Inspector, path: str, handler: Handler, methods: tuple[str, ...] = ("GET",)) -> Route:
    """A route calling ``handler(ui, request)`` in the thread pool, with a write's form
    (URL-encoded, at most :data:`MAX_FORM_BYTES`) read first, and errors shown."""

    async def endpoint(request: Request) -> Response:
        request.state.started = time.perf_counter()
        if request.method not in ("GET", "HEAD"):
            body = await request.body()
            if len(body) > MAX_FORM_BYTES:
                return HTMLResponse("the form is too large", status_code=413)
            request.state.form = body.decode("utf-8", "replace")
        try:
            return await run_in_threadpool(handler, ui, request)
        except MnemexError as exc:
            return ui.render(
                request, "error.html", status=_status(exc), error=str(exc), fragment="_error.html"
            )

    return Route(path, endpoint, methods=list(methods))


def _status(exc: MnemexError) -> int:
    from mnemex.errors import InvalidInput, StoreLocked, UnknownMemory

    if isinstance(exc, UnknownMemory):
        return 404
    if isinstance(exc, InvalidInput):
        return 400
    return 503 if isinstance(exc, StoreLocked) else 500


def build_app(store: Store, policy: Policy) -> Any:
    """The inspector over ``store``, guarded by ``policy`` (an ASGI application)."""
    from mnemex.ui import edits, views

    ui = Inspector(store, policy, environment())
    reads: list[tuple[str, Handler]] = [
        ("/", views.search_page),
        ("/explain", views.explain),
        ("/timeline", views.timeline),
        ("/memory", views.memory_page),
        ("/memory/similar", views.similar),
        ("/memory/forget", edits.confirm_forget),
        ("/preview", views.preview),
        ("/injections", views.injections),
        ("/injections/entry", views.injection),
        ("/health", views.health),
        ("/health/check", views.check),
    ]
    writes: list[tuple[str, Handler]] = [
        ("/memory/edit", edits.edit),
        ("/memory/forget", edits.forget),
        ("/memory/undo", edits.undo),
    ]
    routes: list[BaseRoute] = [route(ui, path, handler) for path, handler in reads]
    if not policy.read_only:  # --read-only: no route writes (the guard refuses them too)
        routes += [route(ui, path, handler, ("POST",)) for path, handler in writes]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    app = Starlette(routes=routes)
    return Guard(app, policy)
