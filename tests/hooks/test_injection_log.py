"""The injection log written by real ``mnemex hook`` processes: what each prompt got, or why
it got nothing, redacted, bounded, off with one setting, and never in the agent's way."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

import mnemex
from mnemex.hooks.capture import project_namespace
from mnemex.results import Injection
from tests.hook_fixtures import ClaudeSession
from tests.hooks.test_hooks import SECRET, injected, run_hook


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "ledgerly"
    (root / ".git").mkdir(parents=True)
    return root


def logged(db: Path | str) -> list[Injection]:
    with mnemex.open(db, embedder=None) as store:
        return store.injections(namespace=mnemex.ALL)


def port_question(tmp_path: Path, project: Path, home: Path) -> dict[str, object]:
    """A session that asked for the billing API's port, captured; and the prompt event of
    a new session asking again."""
    s = ClaudeSession(tmp_path / "s.jsonl", str(project), session_id="asked")
    s.turn("Which port does the billing API listen on?", "Port 8443, behind the gateway.")
    assert injected(run_hook(s.event("Stop"), home)) == ""
    other = ClaudeSession(tmp_path / "t.jsonl", str(project))
    return other.event("UserPromptSubmit", prompt="What port is the billing API on?")


def unwrapped(context: str) -> str:
    """The block inside the ``<mnemex-memories>`` tags the hook wraps it in."""
    inner = context.removeprefix("<mnemex-memories>\n").removesuffix("\n</mnemex-memories>")
    return inner + "\n"


def test_a_prompt_hook_logs_what_it_injected(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home"
    event = port_question(tmp_path, project, home)
    event["prompt"] = f"What port is the billing API on? my key is {SECRET}"
    context = injected(run_hook(event, home))
    assert "Port 8443" in context
    [entry] = logged(home / "memories.db")
    assert (entry.session_id, entry.agent, entry.event) == (
        event["session_id"],
        "claude-code",
        "UserPromptSubmit",
    )
    assert entry.namespace == project_namespace(str(project))
    assert entry.outcome == "injected" and entry.block == unwrapped(context)
    assert SECRET not in entry.prompt and "[REDACTED]" in entry.prompt
    assert entry.mode_used == "lexical" and entry.budget_tokens == 500
    assert 0 < entry.tokens <= 500
    lines = [m.line for m in entry.injected]
    assert lines and all(line in entry.block for line in lines)
    assert all(0 <= m.score <= 1 for m in entry.memories)  # two memories: IDF near 0
    assert not (home / "hooks.log").exists()


def test_the_own_session_and_nothing_relevant_are_logged_with_why(
    tmp_path: Path, project: Path
) -> None:
    home = tmp_path / "home"
    port_question(tmp_path, project, home)
    s = ClaudeSession(tmp_path / "s.jsonl", str(project), session_id="asked")
    own = s.event("UserPromptSubmit", prompt="Remind me which port the billing API uses")
    assert injected(run_hook(own, home)) == ""
    unknown = s.event("UserPromptSubmit", prompt="zebra quokka marmalade xylophone")
    assert injected(run_hook(unknown, home)) == ""
    assert injected(run_hook(s.event("UserPromptSubmit", prompt="ok thanks"), home)) == ""
    nothing, mine = logged(home / "memories.db")  # "ok thanks" asks nothing: not logged
    assert mine.outcome == "nothing" and mine.block == "" and mine.memories
    assert {m.reason for m in mine.memories} == {"this session's own (in the conversation already)"}
    assert not any(m.injected for m in mine.memories)
    assert nothing.outcome == "nothing" and nothing.memories == ()
    assert "no memory matches the query: no hits" in nothing.notes


def test_the_log_is_off_with_one_setting(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home"
    (home).mkdir()
    (home / "config.toml").write_text("injection_log = false\n")
    event = port_question(tmp_path, project, home)
    assert "Port 8443" in injected(run_hook(event, home))
    assert logged(home / "memories.db") == []


def test_a_busy_store_delays_the_answer_by_half_a_second_at_most(
    tmp_path: Path, project: Path
) -> None:
    home = tmp_path / "home"
    event = port_question(tmp_path, project, home)
    writer = sqlite3.connect(home / "memories.db")
    writer.execute("BEGIN IMMEDIATE")  # another process writing: the log must wait
    try:
        started = time.monotonic()
        result = run_hook(event, home)
        took = time.monotonic() - started
    finally:
        writer.rollback()
        writer.close()
    assert "Port 8443" in injected(result)
    assert took < 1.9  # the answer, then at most LOG_GRACE (0.5 s) for the log
    assert "the injection log was not written within 0.5 s" in (home / "hooks.log").read_text()
    assert logged(home / "memories.db") == []


def test_the_server_logs_the_prompts_it_answers(tmp_path: Path, project: Path) -> None:
    import threading
    import urllib.request

    from mnemex.hooks.serve import HookServer

    store = mnemex.open(tmp_path / "m.db")
    s = ClaudeSession(tmp_path / "s.jsonl", str(project), session_id="asked")
    s.turn("Which port does the billing API listen on?", "Port 8443, behind the gateway.")
    server = HookServer(store, 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        for event in (
            s.event("Stop"),
            ClaudeSession(tmp_path / "t.jsonl", str(project)).event(
                "UserPromptSubmit", prompt="What port is the billing API on?"
            ),
        ):
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.server_address[1]}/hook",
                data=json.dumps(event).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    context = json.loads(body)["hookSpecificOutput"]["additionalContext"]
    [entry] = store.injections(namespace=mnemex.ALL)
    assert entry.block == unwrapped(context)
    store.close()


@pytest.mark.postgres
def test_a_prompt_hook_on_postgres_logs_what_it_injected(
    tmp_path: Path, project: Path, pg_url: str
) -> None:
    namespace = project_namespace(str(project))
    with mnemex.open(pg_url, embedder=None) as store:
        store.add(
            "The billing API listens on port 8443, behind the gateway.",
            namespace=namespace,
            tags=["session:earlier"],
        )
    s = ClaudeSession(tmp_path / "s.jsonl", str(project))
    event = s.event("UserPromptSubmit", prompt="What port is the billing API on?")
    result = run_hook(event, tmp_path / "home", "--no-serve", db=pg_url)  # type: ignore[arg-type]
    context = injected(result)
    assert "port 8443" in context
    [entry] = logged(pg_url)
    assert entry.session_id == s.session_id and entry.namespace == namespace
    assert entry.block == unwrapped(context)
    assert [m.injected for m in entry.memories] == [True]
    assert not (tmp_path / "home" / "hooks.log").exists()


@pytest.mark.model
def test_the_floor_decision_is_logged_when_nothing_is_relevant(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    namespace = project_namespace(str(project))
    with mnemex.open(home / "memories.db", embedder="local") as store:
        store.add_many(
            [
                "The billing API listens on port 8443, behind the gateway.",
                "Invoices are rendered with WeasyPrint; embedded fonts made them slow.",
            ],
            namespace=namespace,
        )
    monkeypatch.setenv("MNEMEX_EMBEDDER", "local")
    s = ClaudeSession(tmp_path / "s.jsonl", str(project))
    prompt = "What is the airspeed velocity of an unladen swallow?"
    assert (
        injected(
            run_hook(
                s.event("UserPromptSubmit", prompt=prompt), home, "--no-serve", "--timeout", "60"
            )
        )
        == ""
    )
    [entry] = logged(home / "memories.db")
    assert entry.outcome == "nothing" and entry.mode_used == "hybrid"
    floor = entry.floor
    assert floor is not None and floor["passed"] is False and floor["version"].startswith("floor-")
    assert floor["best_cosine"] < floor["level"] + floor["above"]
