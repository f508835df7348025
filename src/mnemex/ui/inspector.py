"""What the inspector's routes share: the store, the templates, the guard's policy, and
the state kept between requests (the namespaces it lists, what each page session
forgot)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from mnemex.engine import ALL
from mnemex.records import dataclass
from mnemex.ui import present

if TYPE_CHECKING:
    from mnemex.models import Memory
    from mnemex.store import Store
    from mnemex.ui.guard import Policy

HERE: Final = Path(__file__).resolve().parent
NAMESPACES_TTL: Final = 10.0  # seconds the namespace list of the filters is kept
UNDO_PER_SESSION: Final = 200  # forgotten memories a page session can bring back
UNDO_SESSIONS: Final = 1_000


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
            counts = self.store.kind_counts(namespace=ALL)
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
