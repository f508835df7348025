"""Serving the MCP server: stdio for a local agent, streamable HTTP on a chosen address.

HTTP binds 127.0.0.1 unless told otherwise. Any other address needs both an
explicit ``allow_remote`` and a bearer token (``MNEMEX_MCP_TOKEN``); with a
token, every request must carry ``Authorization: Bearer <token>`` and gets
401 without it, whatever the address.

Sessions are capped at ``mcp_max_sessions`` (one more gets 503 until another
ends) and closed after ``mcp_session_idle`` seconds without a request, so a
burst of clients that never say goodbye cannot grow the server without bound.
"""

from __future__ import annotations

from functools import partial

from mnemex.config import Settings
from mnemex.engine.embedding import FROM_SETTINGS
from mnemex.errors import InvalidInput
from mnemex.listen import bind, is_loopback
from mnemex.mcp.server import build_server
from mnemex.store import Store

TOKEN_ENV = "MNEMEX_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PATH = "/mcp"


def check_bind(host: str, *, allow_remote: bool, token: str | None) -> None:
    """Refuse an address that is not loopback without ``allow_remote`` and a token."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise InvalidInput(
            f"{TOKEN_ENV} is {len(token)} characters; use a random secret of at least "
            f"{MIN_TOKEN_CHARS}, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    if is_loopback(host):
        return
    if not allow_remote:
        raise InvalidInput(
            f"{host} is not a loopback address, so other machines could read and change these "
            f"memories; add --allow-remote and set {TOKEN_ENV} to a secret every request must carry"
        )
    if token is None:
        raise InvalidInput(
            f"--allow-remote needs a bearer token: set {TOKEN_ENV} to a random secret of at least "
            f"{MIN_TOKEN_CHARS} characters; clients send it as `Authorization: Bearer <token>`"
        )


def check_port(host: str, port: int) -> None:
    """Refuse a port that another process listens on, before anything is served (the
    server would otherwise start, then fail inside its event loop)."""
    bind(host, port).close()


def url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}{PATH}"


def serve(
    settings: Settings,
    *,
    http: bool = False,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    allow_remote: bool = False,
    token: str | None = None,
    embedder: object = FROM_SETTINGS,
) -> None:
    """Serve over stdio, or with ``http`` over streamable HTTP at ``host:port/mcp``.

    The store is opened once first, so that a bad path or a file that is not a
    store fails here with its message instead of inside the running server.
    """
    if http:
        check_bind(host, allow_remote=allow_remote, token=token)
        check_port(host, port)
    Store(settings, embedder=None).close()
    # A server searches on: numpy's arithmetic, faster than the plain floats in which a
    # short-lived process scores a namespace's rows, is loaded before the first request.
    import numpy  # noqa: F401

    if not http:
        build_server(settings, embedder=embedder).run("stdio")
        return
    import anyio

    server = build_server(settings, embedder=embedder, token=token, url=url(host, port))
    anyio.run(
        partial(
            server.run_streamable_http_async,
            host=host,
            port=port,
            streamable_http_path=PATH,
            session_idle_timeout=settings.mcp_session_idle,
            max_sessions=settings.mcp_max_sessions,
        )
    )
