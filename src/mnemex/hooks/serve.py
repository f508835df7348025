"""``mnemex serve``: the hooks over local HTTP, for Claude Code's ``http`` hook type.

A new process per prompt pays for Python's start, the imports and opening the
store (and, in hybrid mode, loading the model and the vectors) every time. A
running server pays once: Claude Code POSTs the same JSON it would pipe to
``mnemex hook`` to ``http://127.0.0.1:PORT/hook`` and reads the answer's body
as it would read the command's stdout.

The server listens on 127.0.0.1 only and answers only POSTs to ``/hook``
with ``Content-Type: application/json`` and a local ``Host`` header: a web
page cannot send such a request without a CORS preflight, which is refused,
nor reach it through a rebound DNS name. As with the command, every error is
answered with ``{}`` and logged to ``hooks.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from mnemex.hooks import AGENTS
from mnemex.hooks.log import log
from mnemex.hooks.run import MAX_STDIN, SERVE_FILE, handle, server_lock

if TYPE_CHECKING:
    from mnemex.store import Store

DEFAULT_PORT = 8767
PATH = "/hook"
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# Seconds a connection may take to send its request (or to take the answer): a client that
# connects and sends nothing holds the server no longer than this.
REQUEST_TIMEOUT = 5.0


class HookServer(HTTPServer):
    """Answers one event at a time, in the order they come, on the thread that accepts
    them: a capture and a prompt never interleave. (A thread per request, which waited for
    that lock anyway, cost a served hybrid prompt 2.6-3.1 ms at the median on two loaded
    cores.) Each answer closes its connection, so that no client keeps the one thread."""

    request_queue_size = 64  # events waiting while a long capture runs

    def __init__(
        self,
        store: Store,
        port: int = DEFAULT_PORT,
        *,
        agent: str | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.store = store
        self.agent = agent
        self.namespace = namespace
        self.home = str(store.settings.home)
        self.handled = 0  # events answered
        self.last_event = time.monotonic()


class _Handler(BaseHTTPRequestHandler):
    server: HookServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the answer goes out as soon as it is written
    # Buffered: the status line, the headers and the body leave in one send (unbuffered,
    # the headers went out first and the body after them, a second wake-up of the client).
    wbufsize = -1
    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per request on stderr

    def do_POST(self) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        path, _, query = self.path.partition("?")
        if path != PATH or host not in _LOCAL_HOSTS:
            self._answer(404, b'{"error": "not found"}')
            return
        if kind != "application/json":
            self._answer(415, b'{"error": "send application/json"}')
            return
        event: dict[str, Any] = {}
        out = ""
        answered: list[bool] = []

        def answer(text: str) -> None:
            """Send the answer now: the injection log is written after it."""
            self._answer(200, (text.strip() or "{}").encode())
            answered.append(True)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_WR)

        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_STDIN:
                raise ValueError(f"a hook event of {length} bytes")
            parsed = json.loads(self.rfile.read(length))
            if not isinstance(parsed, dict):
                raise ValueError(f"the hook input is JSON {type(parsed).__name__}, not an object")
            event = parsed
            agent = parse_qs(query).get("agent", [None])[0]
            self.server.handled += 1
            self.server.last_event = time.monotonic()
            out = handle(
                event,
                agent=agent if agent in AGENTS else self.server.agent,
                namespace=self.server.namespace,
                store=self.server.store,
                answer=answer,
            )
        except Exception as exc:
            log(self.server.home, event, f"{type(exc).__name__}: {exc}")
            out = ""
        if not answered:
            self._answer(200, (out.strip() or "{}").encode())

    def do_GET(self) -> None:
        self._answer(404, b'{"error": "POST hook events to /hook"}')

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")  # the next event comes on a new connection
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()


def serve(
    store: Store,
    port: int = DEFAULT_PORT,
    *,
    namespace: str | None = None,
    idle_exit: float | None = None,
    ready: Any = None,
) -> None:
    """Answer hook events on ``127.0.0.1:port`` until interrupted (or idle for ``idle_exit`` s).

    While it runs, ``serve.json`` in the data folder names the port and the
    store, so that ``mnemex hook`` processes hand their events over (unless
    the server was started for one namespace); one such server runs per data
    folder (``serve.lock``).
    """
    home = store.settings.home
    lock = None
    if namespace is None:
        lock = server_lock(home)
        if lock is None:
            from mnemex.errors import InvalidInput

            raise InvalidInput(
                f"a mnemex serve already answers hook events for {home} (see serve.json there); "
                "stop it first, or give this one a --namespace"
            )
    server = HookServer(store, port, namespace=namespace)
    marker = home / SERVE_FILE
    if namespace is None:
        info = {
            "port": server.server_address[1],
            "db": str(store.path),
            "pid": os.getpid(),
            "started": time.time(),
            "idle_exit": idle_exit,
        }
        marker.write_text(json.dumps(info), encoding="utf-8")
    if idle_exit is not None:
        threading.Thread(target=_watch_idle, args=(server, idle_exit), daemon=True).start()
    # A server searches on: numpy's arithmetic, faster than the plain floats in which a
    # short-lived process scores a namespace's rows, is loaded before the first event.
    import numpy  # noqa: F401

    if ready is not None:
        ready(server)
    blas = one_blas_thread()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if blas is not None:
            blas.restore_original_limits()
        if lock is not None:
            with contextlib.suppress(OSError, ValueError):
                if json.loads(marker.read_text(encoding="utf-8")).get("pid") == os.getpid():
                    marker.unlink()
            lock.close()


def one_blas_thread() -> Any:
    """Unless numpy's BLAS threads sleep as soon as a product is done (``mnemex serve``
    sets ``OPENBLAS_THREAD_TIMEOUT`` before numpy loads, see
    :func:`mnemex.hooks.run.quiet_blas`), run BLAS on one thread until the returned
    limiter's ``restore_original_limits()``; ``None`` when nothing is limited.

    An event's products are small (one query against the vectors). Between events,
    idle BLAS threads would spin on the cores the model's threads need (measured on
    two cores: twice the CPU time per hybrid event).
    """
    if "numpy" not in sys.modules or "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return None
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().limit(limits=1, user_api="blas")


def _watch_idle(server: HookServer, seconds: float) -> None:
    while True:
        time.sleep(min(seconds, 5.0))
        if time.monotonic() - server.last_event > seconds:
            server.shutdown()
            return
