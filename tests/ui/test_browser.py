"""``mnemex ui`` in Chromium: every view, on a real store and a real server process, on
SQLite and on PostgreSQL; what the page changes is read back with the ``mnemex`` CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex.hooks.capture import project_namespace
from tests.hooks.test_hooks import run_hook
from tests.pg_fixtures import both_engines
from tests.ui.conftest import Server, cli, screenshot

pytestmark = pytest.mark.browser  # Playwright and Chromium: make test-ui

expect: Any
try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip (or, in CI, fail) the tests
    expect = None

BASE = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)
MEMORIES = [
    (
        "deploy-token",
        "Deploys need FLY_API_TOKEN set in the CI secrets",
        "gotcha",
        ["deploy", "ci"],
        "session-a",
    ),
    (
        "billing-db",
        "We chose PostgreSQL 16 for the billing service",
        "decision",
        ["db", "billing"],
        "session-a",
    ),
    (
        "invoice-pdf",
        "Invoice PDFs rendered slowly because of embedded fonts",
        "observation",
        ["pdf", "perf"],
        "session-b",
    ),
    (
        "retry-policy",
        "The retry policy lives in config/retry.toml: 3 attempts",
        "fact",
        ["config"],
        "session-a",
    ),
    ("redis-evict", "Redis evicts sessions under memory pressure", "gotcha", ["redis"], None),
    (
        "oidc-cutover",
        "Users sign in with OIDC since the cutover in September",
        "decision",
        ["auth"],
        "session-b",
    ),
]


PROJECT = [  # the project's namespace, where the prompt hook looks
    "Deploys go out through Fly.io after the CI passes",
    "The deploy token is FLY_API_TOKEN, kept in the CI secrets",
    "The staging database is refreshed every Sunday night",
    "Invoices are rendered by an arq task, not in the request",
    "Kenji owns the Stripe integration and the billing code",
    "Amara owns the React frontend and the invoice editor",
]


def fill_store(place: str, project: Path) -> None:
    with mnemex.open(place, embedder=None) as store:
        store.add_many(
            [
                {
                    "id": ident,
                    "content": text,
                    "kind": kind,
                    "tags": tags,
                    "source": source,
                    "created_at": BASE + timedelta(hours=5 * i),
                }
                for i, (ident, text, kind, tags, source) in enumerate(MEMORIES)
            ]
        )
        store.add(
            "Deploys of the other project go through Heroku",
            id="other-1",
            namespace="other",
            created_at=BASE + timedelta(days=9),
        )
        store.relate("billing service", "uses", "PostgreSQL 16", source_memory="billing-db")
        store.add_many(
            [
                {
                    "content": f"Bulk note {i}: the nightly job number {i} finished",
                    "kind": "note",
                    "created_at": BASE - timedelta(hours=7 * i),
                }
                for i in range(230)
            ],
            namespace="bulk",
        )
        store.add_many(
            [
                {"id": f"project-{i}", "content": text, "created_at": BASE + timedelta(days=i)}
                for i, text in enumerate(PROJECT)
            ],
            namespace=project_namespace(str(project)),
        )


@pytest.fixture
def place(store_place: Callable[[str], Any], project: Path) -> str:
    where = str(store_place("ui.db"))
    fill_store(where, project)
    return where


@pytest.fixture
def server(place: str, serve: Callable[..., Server]) -> Server:
    return serve(place)


@pytest.fixture
def tab(browser: Any, server: Server) -> Iterator[Any]:
    """A page on the server's search, checked afterwards: no dialog, no request elsewhere,
    no CSP violation."""
    watched = server.open(browser)
    yield watched
    watched.clean()
    watched.page.context.close()


def hit_ids(page: Any) -> list[str]:
    return page.locator(".hit").evaluate_all("els => els.map(e => e.dataset.id)")  # type: ignore[no-any-return]


def wait_hits(page: Any, wanted: Callable[[list[str]], bool]) -> list[str]:
    """The hits once ``wanted(ids)`` holds (the page updates as the user types)."""
    page.wait_for_function("() => !document.querySelector('.htmx-request')", timeout=10_000)
    for _ in range(100):
        ids = hit_ids(page)
        if wanted(ids):
            return ids
        page.wait_for_timeout(100)
    raise AssertionError(f"the hits stayed {hit_ids(page)}")


def got(server: Server, ident: str, namespace: str = "default") -> dict[str, Any] | None:
    done = cli(server.db, server.home, "-n", namespace, "get", ident, "--json")
    if done.returncode != 0:
        return None
    return json.loads(done.stdout)["memories"][0]  # type: ignore[no-any-return]


@both_engines
def test_search_as_you_type_with_filters_and_an_address(
    tab: Any, browser: Any, server: Server, engine: str
) -> None:
    page = tab.page
    page.locator("#q").press_sequentially("deploys", delay=40)
    wait_hits(page, lambda ids: {"deploy-token", "other-1"} <= set(ids))
    assert page.url == server.origin + "/?q=deploys"
    page.select_option("select[name=ns]", "other")
    wait_hits(page, lambda ids: ids == ["other-1"])
    page.select_option("select[name=ns]", "*")
    page.locator("input[name=kind]").fill("gotcha")
    wait_hits(page, lambda ids: ids == ["deploy-token"])
    assert page.url == server.origin + "/?q=deploys&kind=gotcha"
    if engine == "sqlite":
        screenshot(page, "search", hide=(".summary",))
    shared = server.open(browser, page.url.removeprefix(server.origin))  # a bookmark
    expect(shared.page.locator(".hit")).to_have_count(1)
    assert hit_ids(shared.page) == ["deploy-token"]
    assert shared.page.locator("input[name=kind]").input_value() == "gotcha"
    shared.clean()
    page.locator("#q").fill("zebra quokka marmalade")
    expect(page.locator(".empty h2")).to_have_text("Nothing relevant")
    expect(page.locator(".empty")).to_contain_text("no memory matches the query")


@both_engines
def test_explain_opens_on_demand(tab: Any, engine: str) -> None:
    page = tab.page
    page.locator("#q").fill("billing database")
    wait_hits(page, lambda ids: ids[:1] == ["billing-db"])
    assert page.locator("table.trace").count() == 0
    page.locator(".hit .why").first.click()
    trace = page.locator(".hit table.trace").first
    expect(trace).to_be_visible()
    expect(trace).to_contain_text("lexical arm")
    expect(trace).to_contain_text("rank 1")
    expect(trace).to_contain_text("top 6 of")
    expect(trace).to_contain_text("relevance floor")


@both_engines
def test_edits_reach_the_store(browser: Any, server: Server, engine: str) -> None:
    watched = server.open(browser, "/memory?id=deploy-token&ns=default")
    page = watched.page
    expect(page.locator("#content")).to_have_text(MEMORIES[0][1])
    page.fill("input[name=tags]", "deploy, ci, secrets")
    page.fill("input[name=confidence]", "0.55")
    page.fill("input[name=kind]", "warning")
    page.check("input[name=pinned]")
    page.click("form.edit button[type=submit]")
    expect(page.locator(".flash")).to_have_text("Saved.")
    expect(page.locator(".f-confidence")).to_have_text("0.55")
    if engine == "sqlite":
        screenshot(page, "memory", hide=("#fields tr:nth-child(9) td",))
    stored = got(server, "deploy-token")
    assert stored is not None
    assert (stored["tags"], stored["confidence"], stored["pinned"], stored["kind"]) == (
        ["deploy", "ci", "secrets"],
        0.55,
        True,
        "warning",
    )
    page.fill("input[name=confidence]", "2")  # the browser asks for a number from 0 to 1
    page.click("form.edit button[type=submit]")
    assert page.locator("input[name=confidence]:invalid").count() == 1
    page.fill("input[name=confidence]", "0.3")
    page.fill("input[name=tags]", ",".join(f"t{i}" for i in range(70)))  # the store says no
    page.click("form.edit button[type=submit]")
    expect(page.locator("#fields .error")).to_contain_text("at most 64 tags")
    stored = got(server, "deploy-token")
    assert stored is not None and (stored["confidence"], len(stored["tags"])) == (0.55, 3)
    watched.clean()


@both_engines
def test_forget_asks_first_and_can_be_undone(browser: Any, server: Server, engine: str) -> None:
    before = got(server, "invoice-pdf")
    watched = server.open(browser, "/memory?id=invoice-pdf&ns=default")
    page = watched.page
    page.click("#forget button")
    expect(page.locator(".confirm")).to_be_visible()
    page.click(".confirm button:has-text('Keep it')")
    expect(page.locator(".confirm")).to_have_count(0)
    expect(page.locator("#forget button")).to_have_text("Forget…")
    assert got(server, "invoice-pdf") == before
    page.click("#forget button")
    page.click(".confirm button:has-text('Forget it')")
    expect(page.locator(".forgotten")).to_be_visible()
    assert got(server, "invoice-pdf") is None
    page.reload()  # the memory's address now says it is gone, and can bring it back
    expect(page.locator("h1")).to_contain_text("No memory")
    page.click("#forget button:has-text('Bring it back')")
    expect(page.locator(".restored")).to_be_visible()
    after = got(server, "invoice-pdf")
    assert after is not None and before is not None
    same = ("content", "kind", "tags", "source", "confidence", "pinned", "created_at", "metadata")
    assert {k: after[k] for k in same} == {k: before[k] for k in same}
    watched.clean()
    other = server.open(browser, "/memory?id=invoice-pdf&ns=default")  # another page session
    other.page.click("#forget button")
    other.page.click(".confirm button:has-text('Forget it')")
    expect(other.page.locator(".forgotten")).to_be_visible()
    third = server.open(browser, "/memory?id=invoice-pdf&ns=default")
    expect(third.page.locator("h1")).to_contain_text("No memory")
    assert third.page.locator("#forget").count() == 0  # only the session that forgot it
    other.clean()
    third.clean()


@both_engines
def test_the_prompt_preview_is_the_recall_block_byte_for_byte(
    browser: Any, server: Server, engine: str
) -> None:
    watched = server.open(browser, "/preview")
    page = watched.page
    prompt = "how do deploys get their token?"
    page.locator("#prompt").press_sequentially(prompt, delay=10)
    block = page.locator("#block")
    expect(block).to_be_visible()
    recalled = cli(server.db, server.home, "recall", prompt)
    assert recalled.returncode == 0, recalled.stderr
    shown = block.evaluate("el => el.textContent")
    assert shown.encode() == recalled.stdout.encode()
    tokens = re.search(r"(\d+)/500 tokens", recalled.stderr)
    assert tokens is not None
    expect(page.locator("#tokens")).to_have_text(tokens.group(1))
    assert "prompt=how+do+deploys" in page.url
    if engine == "sqlite":
        screenshot(page, "preview")
    watched.clean()


@both_engines
def test_the_injection_log_shows_what_a_real_hook_injected(
    browser: Any, server: Server, project: Path, engine: str
) -> None:
    event = {
        "session_id": "session-ui-1",
        "transcript_path": str(project / "t.jsonl"),
        "cwd": str(project),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "how do deploys get their token?",
    }
    done = run_hook(event, server.home, "--no-serve", db=server.db)  # type: ignore[arg-type]
    assert done.returncode == 0
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    block = context.removeprefix("<mnemex-memories>\n").removesuffix("\n</mnemex-memories>") + "\n"
    nothing = {**event, "prompt": "zebra quokka marmalade xylophone"}
    assert run_hook(nothing, server.home, "--no-serve", db=server.db).stdout == b""  # type: ignore[arg-type]
    watched = server.open(browser, "/injections")
    page = watched.page
    page.click("a:has-text('session-ui-1')")
    entries = page.locator("article.entry")
    expect(entries).to_have_count(2)
    latest, first = entries.nth(0), entries.nth(1)
    expect(latest).to_contain_text("nothing injected")
    expect(latest).to_contain_text("no memory matched the prompt")
    assert first.locator("pre.block").evaluate("el => el.textContent") == block
    expect(first.locator("blockquote.prompt")).to_have_text(event["prompt"])
    injected_rows = first.locator("table.weighed tr.in")
    assert injected_rows.count() == block.count("\n- [")
    if engine == "sqlite":
        screenshot(page, "injections", hide=("article.entry header .when",), under="#ffffff")
    first.locator("header a").click()  # the entry's own address
    expect(page.locator("article.entry pre.block")).to_have_count(1)
    assert "/injections/entry?id=" in page.url
    watched.clean()


@both_engines
def test_the_timeline_scrolls_through_the_days(browser: Any, server: Server, engine: str) -> None:
    watched = server.open(browser, "/timeline?ns=bulk")
    page = watched.page
    rows = page.locator("ul.entries li")
    expect(rows).to_have_count(100)
    for expected in (200, 230):
        page.locator(".more").scroll_into_view_if_needed()
        expect(rows).to_have_count(expected)
    expect(page.locator(".end")).to_have_text("The oldest memory.")
    days = page.locator("h2.day").all_inner_texts()
    assert days == sorted(set(days), reverse=True)  # each day once, newest first
    assert rows.first.inner_text().endswith("Bulk note 0: the nightly job number 0 finished")
    if engine == "sqlite":
        page.goto(server.origin + "/timeline")
        screenshot(page, "timeline", hide=(".ns",))
    watched.clean()


@both_engines
def test_a_memory_with_its_relations_thread_and_near_duplicates(
    browser: Any, server: Server, place: str, engine: str
) -> None:
    with mnemex.open(place, embedder=None) as store:
        store.add_many([MEMORIES[0][1].upper()])  # bulk writes do not deduplicate
    watched = server.open(browser, "/memory?id=billing-db&ns=default")
    page = watched.page
    expect(page.locator(".relations")).to_contain_text("billing service −[uses]→ PostgreSQL 16")
    thread = page.locator("ol.thread li")
    expect(thread).to_have_count(3)  # session-a: deploy-token, billing-db, retry-policy
    expect(page.locator("ol.thread li.here")).to_contain_text("PostgreSQL 16")
    page.goto(server.origin + "/memory?id=deploy-token&ns=default")
    near = page.locator(".similar li:has(.badge)")
    expect(near).to_have_count(1)
    expect(near).to_contain_text("DEPLOYS NEED")
    watched.clean()


@both_engines
def test_a_workspace_chunk_shows_its_file_and_goes_stale(
    browser: Any, serve: Callable[..., Server], place: str, tmp_path: Path, engine: str
) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    notes = folder / "MEMORY.md"
    notes.write_text("# Ledgerly\n\nDeploys go to Fly.io with FLY_API_TOKEN.\n")
    with mnemex.open(place, embedder=None) as store:
        store.sync(folder, namespace="notes")
        [chunk] = store.timeline(namespace="notes")
    server = serve(place, env={"MNEMEX_SYNC_ON_SEARCH": "false"})
    watched = server.open(browser, f"/memory?id={chunk.id}&ns=notes")
    page = watched.page
    expect(page.locator(".file pre.lines")).to_contain_text("Deploys go to Fly.io")
    assert page.locator(".stale").count() == 0
    assert page.locator("form.edit").count() == 1
    expect(page.locator("#forget")).to_contain_text("remove its lines from the file")
    notes.write_text("# Ledgerly\n\nDeploys go to Render now.\n")
    page.reload()
    expect(page.locator(".stale")).to_contain_text("Stale: the file changed")
    expect(page.locator(".file pre.lines")).to_contain_text("Deploys go to Render now.")
    watched.clean()


@both_engines
def test_health_counts_and_runs_check(browser: Any, server: Server, engine: str) -> None:
    watched = server.open(browser, "/health")
    page = watched.page
    expect(page.locator("#total")).to_contain_text("243 in 4 namespaces")
    expect(page.locator("#embedder")).to_contain_text("none: lexical search only")
    expect(page.locator("table.kinds")).to_contain_text("bulk")
    expect(page.locator("table.kinds")).to_contain_text("note 230")
    page.click("#check button")
    expect(page.locator("#check .ok")).to_contain_text("The store is sound: 243 memories")
    watched.clean()


@both_engines
def test_read_only_serves_no_change(
    browser: Any, serve: Callable[..., Server], place: str, engine: str
) -> None:
    server = serve(place, "--read-only")
    watched = server.open(browser, "/memory?id=billing-db&ns=default")
    page = watched.page
    expect(page.locator(".badge")).to_have_text("read-only")
    assert page.locator("form.edit").count() == 0 and page.locator("#forget").count() == 0
    csrf = json.loads(page.locator("body").get_attribute("hx-headers"))["X-CSRF-Token"]
    for path, body in (
        ("/memory/edit?id=billing-db&ns=default", "tags=changed"),
        ("/memory/forget?id=billing-db&ns=default", ""),
        ("/memory/undo?id=billing-db&ns=default", ""),
    ):
        status = page.evaluate(
            """([path, body, csrf]) => fetch(path, {method: "POST", body,
                 headers: {"X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded"}})
                 .then(r => r.status)""",
            [path, body, csrf],
        )
        assert status == 403, path
    stored = got(server, "billing-db")
    assert stored is not None and stored["tags"] == ["db", "billing"]
    watched.clean()
