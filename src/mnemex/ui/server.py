"""Serving the inspector: where it listens, who may use it, and the address it prints.

It binds 127.0.0.1 unless told otherwise; any other address needs a token of at
least :data:`MIN_TOKEN_CHARS` characters (``--token`` or ``MNEMEX_UI_TOKEN``),
which every request then carries (:mod:`mnemex.ui.guard`). The socket is bound
before anything is served, so a port in use fails at once with its reason, and
port 0 takes any free port (the address printed names it).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from mnemex.errors import InvalidInput
from mnemex.listen import bind, is_loopback
from mnemex.ui.guard import WILDCARDS

if TYPE_CHECKING:
    from mnemex.config import Settings

TOKEN_ENV: Final = "MNEMEX_UI_TOKEN"
MIN_TOKEN_CHARS: Final = 16
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8766


def check_bind(host: str, token: str | None) -> None:
    """Refuse a token too short to be a secret, and an address other machines can reach
    without one."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise InvalidInput(
            f"the token is {len(token)} characters; use a random secret of at least "
            f"{MIN_TOKEN_CHARS}, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    if token is None and not is_loopback(host):
        raise InvalidInput(
            f"{host} is not a loopback address, so other machines could read and change these "
            f"memories: give a token with --token or {TOKEN_ENV} (at least {MIN_TOKEN_CHARS} "
            "random characters); every request must then carry it"
        )


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free port)."""
    listener = bind(host, port)
    listener.listen(128)
    listener.set_inheritable(True)
    return listener


def address(host: str, port: int, token: str | None) -> str:
    """The address to open: the host bound (loopback for all addresses), with the token."""
    shown = "127.0.0.1" if host.strip("[]") in WILDCARDS else host.strip("[]")
    if ":" in shown:
        shown = f"[{shown}]"
    query = f"?token={quote(token, safe='')}" if token else ""
    return f"http://{shown}:{port}/{query}"


def run(
    settings: Settings,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    read_only: bool = False,
    open_browser: bool = False,
    allow_hosts: Sequence[str] = (),
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> None:
    """Serve the inspector on ``host:port`` until interrupted."""
    import uvicorn

    from mnemex.store import Store
    from mnemex.ui.app import build_app
    from mnemex.ui.guard import Policy
    from mnemex.ui.present import HIGHLIGHT_END, HIGHLIGHT_START

    check_bind(host, token)
    listener = listen(host, port)
    store = Store(settings.replace(highlight_start=HIGHLIGHT_START, highlight_end=HIGHLIGHT_END))
    try:
        policy = Policy(bind=host, token=token, read_only=read_only, allow_hosts=tuple(allow_hosts))
        app = build_app(store, policy)
        url = address(host, listener.getsockname()[1], token)
        print(url, flush=True)  # stdout: the address alone, for scripts
        mode = "read-only" if read_only else "read and write"
        say(f"mnemex ui on {url} (store {store.path}, {mode}); Ctrl-C stops it")
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            proxy_headers=False,
        )
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        listener.close()
        store.close()
