"""Hostile memory text and forged requests against a real ``mnemex ui``.

Memories hold what agents wrote: script tags, event handlers, ``javascript:``
links, bidirectional overrides and megabyte lines must render as inert text (no
dialog, no request, no layout wider than the window) in every view. Requests the
page did not make (no CSRF token, another Origin, another Host, no token off
loopback) change nothing.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import mnemex
from mnemex.hooks.capture import project_namespace
from tests.conftest import SRC
from tests.hooks.test_hooks import run_hook
from tests.ui.conftest import Server, cli

pytestmark = pytest.mark.browser  # Playwright and Chromium: make test-ui

expect: Any
try:
    from playwright.sync_api import expect
except ImportError:
    expect = None

HOSTILE = {
    "script": "deploy note <script>alert('script')</script> end",
    "img": 'deploy note <img src="http://attacker.invalid/x.png" onerror="alert(\'img\')"> end',
    "link": "deploy note [click](javascript:alert('link')) and <a href=\"javascript:alert('a')\">here</a>",
    "rtl": "deploy note \u202eexe.tnemhcatta\u202c and \u2066isolate\u2069 done",
    "htmx": 'deploy note <div hx-get="/memory/forget" hx-trigger="load">x</div> end',
    "style": "deploy note <style>body{display:none}</style><svg onload=alert('svg')></svg>",
}
HUGE = "deploy " + "A" * 1_100_000  # one line of 1.1 MB


def hostile_store(place: str, project: Path) -> None:
    with mnemex.open(place, embedder=None, max_content_bytes=2_000_000) as store:
        store.add_many(
            [
                {"id": f"evil-{name}", "content": text, "tags": [f"<b>{name}</b>"]}
                for name, text in HOSTILE.items()
            ]
            + [{"id": "evil-huge", "content": HUGE, "kind": "<i>kind</i>"}]
        )
        store.add_many(list(HOSTILE.values()), namespace=project_namespace(str(project)))
        store.relate("<script>alert(1)</script>", "uses", "\u202eevil", source_memory="evil-script")


@pytest.fixture
def hostile(tmp_path: Path, project: Path, serve: Callable[..., Server]) -> Server:
    db = tmp_path / "hostile.db"
    hostile_store(str(db), project)
    server = serve(db)
    event = {
        "session_id": "<script>alert('session')</script>",
        "transcript_path": str(project / "t.jsonl"),
        "cwd": str(project),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "deploy note <img src=x onerror=alert('prompt')> \u202eevil",
    }
    assert run_hook(event, server.home, "--no-serve", db=db).stdout  # a block was injected
    return server


def inert(watched: Any) -> None:
    """No dialog, no request elsewhere, no CSP violation, nothing wider than the window,
    no element made from memory text."""
    page = watched.page
    page.wait_for_timeout(300)  # an onerror or onload would have fired by now
    watched.clean()
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= page.viewport_size["width"], f"the page is {wide} px wide"
    made = page.evaluate(
        """() => [...document.querySelectorAll('main script, main img, main svg, main style,'
                  + ' main iframe, main [onerror], main [onload], a[href^="javascript"]')]
                 .map(e => e.outerHTML)"""
    )
    assert made == []
    inside = page.evaluate(  # memory text holds no element but the marks the page adds
        """() => [...document.querySelectorAll('#content, .snippet, blockquote.prompt,'
                  + ' pre.block, pre.lines, ul.entries a, .similar a, .relations li')]
                 .flatMap(el => [...el.querySelectorAll('*')])
                 .filter(e => !e.matches('mark, span.ctl, span.n, bdi, span.score'))
                 .map(e => e.outerHTML)"""
    )
    assert inside == []


def test_hostile_text_renders_inert_in_every_view(browser: Any, hostile: Server) -> None:
    pages = [
        "/?q=deploy+note",
        "/?q=" + "A" * 50,
        "/timeline",
        "/preview?prompt=deploy+note+script&ns=default",
        "/injections",
        "/health",
        *(f"/memory?id=evil-{name}&ns=default" for name in [*HOSTILE, "huge"]),
    ]
    for path in pages:
        watched = hostile.open(browser, path)
        inert(watched)
        watched.page.context.close()
    watched = hostile.open(browser, "/memory?id=evil-script&ns=default")
    page = watched.page
    expect(page.locator("#content")).to_have_text(HOSTILE["script"])  # shown, as text
    page.goto(hostile.origin + "/memory?id=evil-rtl&ns=default")
    expect(page.locator("#content .ctl").first).to_have_text("⟨U+202E⟩")
    page.goto(hostile.origin + "/?q=deploy+note")
    page.locator(".hit .why").first.click()
    expect(page.locator("table.trace")).to_be_visible()
    page.goto(hostile.origin + "/injections")
    page.locator("table.sessions a").first.click()
    expect(page.locator("blockquote.prompt")).to_contain_text("<img src=x onerror=")
    inert(watched)


def test_search_results_are_inert(browser: Any, hostile: Server) -> None:
    watched = hostile.open(browser, "/")
    watched.page.locator("#q").press_sequentially("deploy note", delay=20)
    expect(watched.page.locator(".hit")).to_have_count(6)
    inert(watched)


# -- forged requests ---------------------------------------------------------------------


def request(
    server: Server, method: str, path: str, headers: dict[str, str], body: str = ""
) -> tuple[int, dict[str, str], str]:
    where = urlsplit(server.url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for key, value in headers.items():
            connection.putheader(key, value)
        if body:
            connection.putheader("Content-Type", "application/x-www-form-urlencoded")
        connection.putheader("Content-Length", str(len(body.encode())))
        connection.endheaders(body.encode())
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def session_of(server: Server, host: str | None = None) -> tuple[str, str]:
    """A page session's cookie and CSRF token, as a browser gets them from a page."""
    host = host or urlsplit(server.url).netloc
    status, headers, page = request(server, "GET", "/health", {"Host": host})
    assert status == 200, page
    cookie = headers["set-cookie"].split(";")[0]
    csrf = page.split('"X-CSRF-Token": "')[1].split('"')[0]
    return cookie, csrf


def tagged(server: Server) -> list[str]:
    done = cli(server.db, server.home, "get", "evil-script", "--json")
    return json.loads(done.stdout)["memories"][0]["tags"]  # type: ignore[no-any-return]


def test_writes_without_the_page_token_or_from_elsewhere_are_refused(hostile: Server) -> None:
    host = urlsplit(hostile.url).netloc
    origin = f"http://{host}"
    cookie, csrf = session_of(hostile)
    edit = "/memory/edit?id=evil-script&ns=default"
    good = {"Host": host, "Origin": origin, "Cookie": cookie, "X-CSRF-Token": csrf}
    refused = [
        ({**good, "X-CSRF-Token": ""}, 403, "CSRF token"),
        (
            {**good, "X-CSRF-Token": csrf[:-1] + ("0" if csrf[-1] != "0" else "1")},
            403,
            "CSRF token",
        ),
        ({k: v for k, v in good.items() if k != "Cookie"}, 403, "CSRF token"),  # another session
        ({**good, "Origin": "http://attacker.example"}, 403, "another site"),
        ({**good, "Origin": "null"}, 403, "opaque origin"),
        ({k: v for k, v in good.items() if k != "Origin"}, 403, "must come from this page"),
        ({**good, "Origin": "http://attacker.example:80", "Host": "attacker.example"}, 421, "host"),
        ({**good, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, 403, "another site"),
    ]
    for headers, status, says in refused:
        answer = request(hostile, "POST", edit, headers, "tags=forged")
        assert answer[0] == status and says in answer[2], (headers, answer)
    assert tagged(hostile) == ["<b>script</b>"]
    assert request(hostile, "POST", edit, good, "tags=allowed")[0] == 200
    assert tagged(hostile) == ["allowed"]
    referer = {**{k: v for k, v in good.items() if k != "Origin"}, "Referer": origin + "/memory"}
    assert request(hostile, "POST", edit, referer, "tags=again")[0] == 200


def test_reads_check_the_host_and_the_origin(hostile: Server) -> None:
    host = urlsplit(hostile.url).netloc
    port = urlsplit(hostile.url).port
    for name in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.nip.io", ""):
        status, _, body = request(hostile, "GET", "/?q=deploy", {"Host": name})
        assert status == 421 and "does not answer for the host" in body, name
    for name in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
        assert request(hostile, "GET", "/health", {"Host": name})[0] == 200, name
    cross = {"Host": host, "Origin": "http://attacker.example"}
    assert request(hostile, "GET", "/?q=deploy", cross)[0] == 403
    fetched = {"Host": host, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
    assert request(hostile, "GET", "/?q=deploy", fetched)[0] == 403
    followed = {"Host": host, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    status, headers, _ = request(hostile, "GET", "/?q=deploy", followed)  # a shared link
    assert status == 200
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"


def test_a_page_on_another_site_cannot_change_a_memory(browser: Any, hostile: Server) -> None:
    """A real cross-site attack in the browser: a page elsewhere posts a form and a fetch
    to the inspector, with the user's cookies."""
    watched = hostile.open(browser, "/memory?id=evil-script&ns=default")  # the user's session
    context = watched.page.context
    target = hostile.origin + "/memory/edit?id=evil-script&ns=default"
    attack = f"""<html><body>
      <form id="f" method="post" action="{target}"><input name="tags" value="forged"></form>
      <script>
        fetch("{target}", {{method: "POST", mode: "no-cors", credentials: "include",
                            body: new URLSearchParams({{tags: "fetched"}})}});
        document.getElementById("f").submit();
      </script></body></html>"""
    context.route(
        "http://attacker.test/**",
        lambda route: route.fulfill(body=attack, content_type="text/html"),
    )
    evil = context.new_page()
    evil.goto("http://attacker.test/")
    evil.wait_for_url(target, timeout=15_000)  # the form was posted
    evil.wait_for_load_state()
    assert "is refused" in evil.content()
    assert tagged(hostile) == ["<b>script</b>"]
    watched.page.reload()
    expect(watched.page.locator(".f-tags")).to_have_text("<b>script</b>")


def test_read_only_refuses_every_write(
    serve: Callable[..., Server], tmp_path: Path, project: Path
) -> None:
    db = tmp_path / "ro.db"
    hostile_store(str(db), project)
    server = serve(db, "--read-only")
    host = urlsplit(server.url).netloc
    cookie, csrf = session_of(server)
    good = {"Host": host, "Origin": f"http://{host}", "Cookie": cookie, "X-CSRF-Token": csrf}
    for path in ("/memory/edit", "/memory/forget", "/memory/undo", "/", "/health/check"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, _, body = request(
                server, method, path + "?id=evil-script&ns=default", good, "tags=x"
            )
            assert status == 403 and "read-only" in body, (method, path)
    assert request(server, "GET", "/memory/forget?id=evil-script&ns=default", good)[0] == 400
    assert tagged(server) == ["<b>script</b>"]


# -- off loopback: a token ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_off_loopback_needs_a_token(
    tmp_path: Path, serve: Callable[..., Server], project: Path
) -> None:
    db = tmp_path / "remote.db"
    hostile_store(str(db), project)
    env = {**os.environ, "PYTHONPATH": str(SRC), "MNEMEX_HOME": str(tmp_path / "home")}
    base = [sys.executable, "-m", "mnemex", "--db", str(db), "ui", "--host", "0.0.0.0"]
    refused = subprocess.run(base, capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 1
    assert "not a loopback address" in refused.stderr and "--token" in refused.stderr
    short = subprocess.run(
        [*base, "--token", "short"], capture_output=True, text=True, env=env, timeout=60
    )
    assert short.returncode == 1 and "at least 16" in short.stderr
    token = "t0ken-" + "x" * 26
    server = serve(db, "--host", "0.0.0.0", "--token", token)
    assert server.url.endswith(f"/?token={token}")
    host = urlsplit(server.url).netloc
    assert request(server, "GET", "/health", {"Host": host})[0] == 401
    assert (
        request(
            server, "GET", "/health", {"Host": host, "Authorization": "Bearer wrong-token-value"}
        )[0]
        == 401
    )
    assert (
        request(server, "GET", "/health", {"Host": host, "Authorization": f"Bearer {token}"})[0]
        == 200
    )
    status, headers, _ = request(server, "GET", f"/?q=deploy&token={token}", {"Host": host})
    assert status == 303 and headers["location"] == "/?q=deploy"
    cookie = headers["set-cookie"].split(";")[0]
    assert token not in cookie
    assert request(server, "GET", "/?q=deploy", {"Host": host, "Cookie": cookie})[0] == 200
    forged = cookie.split("=")[0] + "=" + "0" * 64
    assert request(server, "GET", "/?q=deploy", {"Host": host, "Cookie": forged})[0] == 401
    try:
        lan = socket.gethostbyname(socket.gethostname())
    except OSError:
        lan = "127.0.0.1"
    if not lan.startswith("127."):  # the address of this machine on its network
        assert (
            request(
                server,
                "GET",
                "/health",
                {"Host": f"{lan}:{urlsplit(server.url).port}", "Authorization": f"Bearer {token}"},
            )[0]
            == 200
        )
    assert (
        request(
            server,
            "GET",
            "/health",
            {"Host": "attacker.example", "Authorization": f"Bearer {token}"},
        )[0]
        == 421
    )
