"""The inspector's web application: its routes over :class:`~mnemex.ui.inspector.Inspector`.

Every route is a plain function over the public :class:`~mnemex.Store` API
(:mod:`mnemex.ui.views` reads, :mod:`mnemex.ui.edits` writes), run in
Starlette's thread pool; :class:`~mnemex.ui.guard.Guard` stands in front of
all of them. A request sent by htmx (``HX-Request``) gets the part of the page
it replaces; any other request the whole page, so every view has an address
that can be bookmarked or shared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from mnemex.errors import MnemexError
from mnemex.ui import edits, views
from mnemex.ui.guard import Guard, Policy
from mnemex.ui.inspector import HERE, Inspector, environment

if TYPE_CHECKING:
    from mnemex.store import Store

MAX_FORM_BYTES: Final = 65_536


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
