"""The inspector's request guard: an ASGI middleware in front of every route.

Memory text is written by agents and must be treated as hostile; the page may
be open while the user browses other sites. In order, each request:

1. names an allowed ``Host`` (loopback names, the address bound, ``--allow-host``
   names; any IP address when bound to all of them): no DNS rebinding;
2. carries the token when there is one (``Authorization: Bearer``, or the cookie
   set when the address printed with ``?token=`` was opened), compared in
   constant time;
3. comes from this page: an ``Origin`` (or, without one, a ``Referer``) of
   another site is refused, a write must name this page's origin, and only a
   navigation may come from another site (``Sec-Fetch-Site``);
4. writes (any method but GET and HEAD) only when the server is not
   ``--read-only``, and with the session's CSRF token in ``X-CSRF-Token``.

Every response gets a Content-Security-Policy that allows scripts and styles
from this server only (no inline script, no ``eval``), no framing, no
caching of pages, and the session cookie that the CSRF token is derived from.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import field
from http.cookies import SimpleCookie
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

from mnemex.listen import is_loopback
from mnemex.records import dataclass

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE: Final = "mnemex_ui_session"
AUTH_COOKIE: Final = "mnemex_ui_auth"
CSRF_HEADER: Final = "x-csrf-token"
TOKEN_PARAM: Final = "token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS: Final = frozenset({"0.0.0.0", "::", ""})
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Final = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, lower case (IPv6 without brackets)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else ""
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass
class Policy:
    """What the guard allows: the address bound, extra host names, the token, whether
    writes are served; and this server's secret, which signs the cookies it sets."""

    bind: str
    token: str | None = None
    read_only: bool = False
    allow_hosts: tuple[str, ...] = ()
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def host_allowed(self, header: str) -> bool:
        name = host_name(header)
        if not name:
            return False
        if name in LOOPBACK_NAMES or is_loopback(name) or name == host_name(self.bind):
            return True
        if name in (h.lower() for h in self.allow_hosts):
            return True
        if self.bind.strip("[]") in WILDCARDS:
            try:
                ipaddress.ip_address(name)
                return True
            except ValueError:
                return False
        return False

    def csrf(self, session: str) -> str:
        """The CSRF token of a session: an HMAC of its id under this server's secret."""
        return hmac.new(self.secret, b"csrf:" + session.encode(), hashlib.sha256).hexdigest()

    def auth_cookie(self) -> str:
        """The value of the cookie that stands for the token (valid for this server only)."""
        assert self.token is not None
        return hmac.new(self.secret, b"auth:" + self.token.encode(), hashlib.sha256).hexdigest()

    def token_given(self, value: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(value.encode(), self.token.encode())


class Guard:
    """The ASGI middleware that applies a :class:`Policy` (see the module's docstring)."""

    def __init__(self, app: App, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        cookies = _cookies(headers.get("cookie", ""))
        refused = self.refusal(scope, headers, cookies)
        if refused is not None:
            status, message = refused
            await _plain(send, status, message)
            return
        if self.policy.token is not None and TOKEN_PARAM in dict(_query(scope)):
            await self._sign_in(scope, send)
            return
        session = cookies.get(SESSION_COOKIE, "")
        fresh = not _well_formed(session)
        if fresh:
            session = secrets.token_urlsafe(32)
        scope.setdefault("state", {})
        scope["state"]["session"] = session
        scope["state"]["csrf"] = self.policy.csrf(session)
        static = scope["path"].startswith("/static/")
        await self.app(scope, receive, _with_headers(send, session if fresh else None, static))

    def refusal(
        self, scope: Scope, headers: dict[str, str], cookies: dict[str, str]
    ) -> tuple[int, str] | None:
        """Why the request is refused (status and message), or ``None``."""
        policy, method = self.policy, scope["method"]
        host = headers.get("host", "")
        if not policy.host_allowed(host):
            return 421, (
                f"this inspector does not answer for the host {host!r}: open it at the "
                "address `mnemex ui` printed (or name the host with --allow-host)"
            )
        if policy.token is not None and not self._signed_in(scope, headers, cookies):
            return 401, (
                "this inspector needs its token: open the address `mnemex ui` printed "
                "(it ends in ?token=...), or send `Authorization: Bearer <token>`"
            )
        crossed = _cross_site(method, host, headers)
        if crossed is not None:
            return 403, crossed
        if method not in SAFE_METHODS:
            if policy.read_only:
                return (
                    403,
                    "this inspector is read-only (mnemex ui --read-only): nothing is changed",
                )
            session = cookies.get(SESSION_COOKIE, "")
            given = headers.get(CSRF_HEADER, "")
            if not _well_formed(session) or not hmac.compare_digest(
                given.encode(), policy.csrf(session).encode()
            ):
                return 403, (
                    "this change lacks the page's CSRF token: reload the page and try again"
                )
        return None

    def _signed_in(self, scope: Scope, headers: dict[str, str], cookies: dict[str, str]) -> bool:
        policy = self.policy
        bearer = headers.get("authorization", "")
        if bearer[:7].lower() == "bearer " and policy.token_given(bearer[7:].strip()):
            return True
        given = dict(_query(scope)).get(TOKEN_PARAM)
        if given is not None and policy.token_given(given):
            return True
        cookie = cookies.get(AUTH_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), policy.auth_cookie().encode())

    async def _sign_in(self, scope: Scope, send: Send) -> None:
        """The token was in the address: set the cookie that stands for it, and send the
        browser to the same address without it (out of its history and logs)."""
        rest = [(k, v) for k, v in _query(scope) if k != TOKEN_PARAM]
        target = scope["path"] + (f"?{urlencode(rest)}" if rest else "")
        cookie = f"{AUTH_COOKIE}={self.policy.auth_cookie()}; Path=/; HttpOnly; SameSite=Lax"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", target.encode()),
                    (b"set-cookie", cookie.encode()),
                    (b"cache-control", b"no-store"),
                    *HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _cross_site(method: str, host: str, headers: dict[str, str]) -> str | None:
    """Why a request from another site is refused, or ``None``. A navigation (a link
    followed, a bookmark) may come from anywhere; nothing else may."""
    origin = headers.get("origin")
    referer = headers.get("referer")
    if origin is not None and origin != "null" and not _same(origin, host):
        return f"a request from another site ({origin}) is refused"
    if origin == "null" and method not in SAFE_METHODS:
        return "a change from an opaque origin is refused"
    site = headers.get("sec-fetch-site", "")
    navigation = headers.get("sec-fetch-mode", "navigate") == "navigate"
    if site == "cross-site" and (method not in SAFE_METHODS or not navigation):
        return "a request from another site is refused"
    if method not in SAFE_METHODS and origin is None and not (referer and _same(referer, host)):
        return "a change must come from this page (no Origin or Referer of this site)"
    return None


def _same(url: str, host: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in scope["headers"]:
        name = key.decode("latin-1").lower()
        if name not in out:  # the first of repeated headers
            out[name] = value.decode("latin-1")
    return out


def _cookies(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed header carries no cookie of ours
        return {}
    return {key: morsel.value for key, morsel in jar.items()}


def _query(scope: Scope) -> list[tuple[str, str]]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return parse_qsl(raw, keep_blank_values=True)


def _well_formed(session: str) -> bool:
    return 32 <= len(session) <= 64 and all(c.isalnum() or c in "-_" for c in session)


def _with_headers(send: Send, new_session: str | None, static: bool = False) -> Send:
    """``send`` adding the security headers (and the new session's cookie) to the start
    of the response. Pages are never cached (they hold memory text); the static files
    are, for a year: their addresses carry a digest of their content."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", []), *HEADERS]
            names = {k.lower() for k, _ in headers}
            if static and message.get("status") == 200:
                headers.append((b"cache-control", b"public, max-age=31536000, immutable"))
            elif b"cache-control" not in names:
                headers.append((b"cache-control", b"no-store"))
            if new_session is not None:
                cookie = f"{SESSION_COOKIE}={new_session}; Path=/; HttpOnly; SameSite=Lax"
                headers.append((b"set-cookie", cookie.encode()))
            message["headers"] = headers
        await send(message)

    return sending


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
