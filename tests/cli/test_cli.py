"""The CLI: in-process through click's runner, and as a real subprocess."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from mnemex.cli import cli
from tests.conftest import PYTHON, python_env
from tests.pg_fixtures import both_engines


@pytest.fixture
def run(store_place):  # type: ignore[no-untyped-def]
    db = store_place("cli.db")  # a file, or a PostgreSQL URL (tests marked both_engines)
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None, ok: bool = True):  # type: ignore[no-untyped-def]
        result = runner.invoke(cli, ["--db", str(db), *args], input=input, catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, result.output + (result.stderr or "")
        return result

    return invoke


@both_engines
def test_add_search_get_forget(run) -> None:  # type: ignore[no-untyped-def]
    ident = run(
        "add",
        "We chose PostgreSQL for billing",
        "--kind",
        "decision",
        "--tag",
        "db,billing",
        "--confidence",
        "0.9",
        "--meta",
        "adr=4",
    ).stdout.strip()
    assert len(ident) == 16
    found = json.loads(run("search", "which database for billing", "--json").stdout)
    assert found["mode_used"] == "lexical"
    assert [h["id"] for h in found["hits"]] == [ident]
    assert "**billing**" in found["hits"][0]["snippet"]
    human = run("search", "billing").stdout
    assert ident in human and "billing" in human
    got = json.loads(run("get", ident, "--json").stdout)
    memory = got["memories"][0]
    assert memory["kind"] == "decision" and memory["tags"] == ["db", "billing"]
    assert memory["confidence"] == 0.9 and memory["metadata"] == {"adr": "4"}
    assert got["missing"] == []
    assert "We chose PostgreSQL" in run("get", ident).stdout
    forgotten = json.loads(run("forget", ident, "--json").stdout)
    assert forgotten == {"forgotten": [ident], "missing": []}
    assert json.loads(run("search", "billing", "--json").stdout)["hits"] == []


@both_engines
def test_add_from_stdin(run) -> None:  # type: ignore[no-untyped-def]
    ident = run("add", "-", input="note from a pipe\n").stdout.strip()
    assert (
        json.loads(run("get", ident, "--json").stdout)["memories"][0]["content"]
        == "note from a pipe"
    )


@both_engines
def test_unknown_ids_exit_nonzero(run) -> None:  # type: ignore[no-untyped-def]
    ident = run("add", "exists").stdout.strip()
    result = run("get", ident, "nope", "--json", ok=False)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["missing"] == ["nope"]
    result = run("forget", "nope", ok=False)
    assert result.exit_code == 1


@both_engines
def test_unknown_ids_have_one_wording_everywhere(run) -> None:  # type: ignore[no-untyped-def]
    """get, forget, update, timeline --around and the API name an unknown id alike; the
    CLI adds the namespace that holds it when another one does."""
    from mnemex.errors import UnknownMemory

    run("add", "exists")
    one = "error: no memory with id 'nope' in namespace 'default'; find ids with `mnemex search`"
    for args in (
        ("get", "nope"),
        ("forget", "nope"),
        ("update", "nope", "--kind", "fact"),
        ("timeline", "--around", "nope"),
    ):
        result = run(*args, ok=False)
        assert result.exit_code == 1 and result.stderr.startswith(one), (args, result.stderr)
    assert str(UnknownMemory(["nope"], "default")).startswith(one.removeprefix("error: "))
    two = run("forget", "nope", "gone", ok=False).stderr
    assert two.startswith("error: no memories with ids 'nope', 'gone' in namespace 'default'")
    relation = run("forget", "--relations", "nope", ok=False).stderr
    assert relation.startswith("error: no relation with id 'nope' in namespace 'default'")
    theirs = run("-n", "theirs", "add", "elsewhere").stdout.strip()
    result = run("get", theirs, ok=False)
    assert f"{theirs!r} is in namespace 'theirs' (-n 'theirs')" in result.stderr


def test_errors_are_one_line_with_exit_1(run) -> None:  # type: ignore[no-untyped-def]
    run("add", "The store exists")
    result = run("add", "   ", ok=False)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: content is empty")
    assert result.stderr.count("\n") == 1
    result = run("add", "x", "--confidence", "7", ok=False)
    assert "between 0 and 1" in result.stderr
    result = run("search", 'broken "(', "--raw", ok=False)
    assert result.exit_code == 1 and "invalid FTS5 query" in result.stderr
    result = run("update", "nope", "--kind", "fact", ok=False)
    assert result.exit_code == 1 and "no memory with id 'nope'" in result.stderr
    result = run("add", "x", "--meta", "novalue", ok=False)
    assert result.exit_code == 2


@both_engines
def test_search_filters_and_namespaces(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("add", "redis eviction policy", "--kind", "fact", "--tag", "ops")
    run("-n", "other", "add", "redis in another namespace")
    hits = json.loads(run("search", "redis", "--json").stdout)["hits"]
    assert len(hits) == 1
    both = json.loads(run("search", "redis", "--all-namespaces", "--json").stdout)["hits"]
    assert len(both) == 2
    assert json.loads(run("search", "redis", "--kind", "todo", "--json").stdout)["hits"] == []
    assert len(json.loads(run("search", "redis", "--tag", "ops", "--json").stdout)["hits"]) == 1
    assert json.loads(run("search", "redis", "--since", "1d", "--json").stdout)["hits"]
    assert (
        json.loads(run("search", "redis", "--until", "2000-01-01", "--json").stdout)["hits"] == []
    )


@both_engines
def test_timeline_and_stats(run) -> None:  # type: ignore[no-untyped-def]
    run("add", "first", "--created-at", "2025-01-01T00:00:00Z")
    run("add", "second", "--created-at", "2025-02-01T00:00:00Z", "--kind", "decision")
    entries = json.loads(run("timeline", "--json").stdout)["entries"]
    assert [e["summary"] for e in entries] == ["second", "first"]
    assert [
        e["summary"]
        for e in json.loads(run("timeline", "--oldest-first", "--json").stdout)["entries"]
    ] == ["first", "second"]
    assert "second" in run("timeline").stdout
    third = run("add", "third", "--created-at", "2025-03-01T00:00:00Z").stdout.strip()
    around = json.loads(run("timeline", "--around", third, "--before", "1", "--json").stdout)[
        "entries"
    ]
    assert [e["summary"] for e in around] == ["third", "second"]
    assert "no memory with id 'nope'" in run("timeline", "--around", "nope", ok=False).stderr
    run("forget", third)
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["memories"] == 2 and stats["kinds"] == {"decision": 1, "observation": 1}
    assert "2 memories" in run("stats").stdout


@both_engines
def test_update(run) -> None:  # type: ignore[no-untyped-def]
    ident = run("add", "old text").stdout.strip()
    updated = json.loads(run("update", ident, "--content", "new text", "--pinned", "--json").stdout)
    assert updated["content"] == "new text" and updated["pinned"] is True
    assert run("update", ident, ok=False).exit_code == 2


@both_engines
def test_import_export_roundtrip(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "in.jsonl"
    lines = [
        json.dumps({"content": "first memory", "kind": "fact", "tags": ["a"]}),
        "{not json",
        json.dumps({"content": ""}),
        json.dumps({"content": "second memory", "created_at": "2025-05-05T05:05:05Z"}),
        "",
        json.dumps(["not", "an", "object"]),
    ]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run("import", str(source), "--json", ok=False)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["imported"] == 2
    assert [e["line"] for e in report["errors"]] == [2, 3, 6]
    out = tmp_path / "out.jsonl"
    run("export", str(out))
    exported = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [m["content"] for m in exported] == ["first memory", "second memory"]
    # Strict import of a file with a bad line imports nothing.
    result = run("-n", "strict", "import", str(source), "--strict", ok=False)
    assert result.exit_code == 1 and "nothing imported" in result.stderr
    assert json.loads(run("-n", "strict", "stats", "--json").stdout)["memories"] == 0
    # Re-importing an export skips existing ids.
    again = json.loads(run("import", str(out), "--json").stdout)
    assert again == {
        "imported": 0,
        "skipped": 2,
        "skipped_in": {},
        "relations": 0,
        "errors": [],
    }
    # Into another namespace of the same store: the ids are default's, --new-ids gives new ones.
    other = run("-n", "other", "import", str(out))
    assert "2 skipped: their ids are memories of namespace 'default'" in other.stderr
    assert "--new-ids" in other.stderr
    assert "imported 2," in run("-n", "other", "import", str(out), "--new-ids").stdout
    assert json.loads(run("-n", "other", "stats", "--json").stdout)["memories"] == 2


@both_engines
def test_check(run) -> None:  # type: ignore[no-untyped-def]
    run("add", "something to check")
    assert "index consistent" in run("check").stdout
    assert json.loads(run("check", "--json").stdout)["ok"] is True


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    for command in (
        "add",
        "search",
        "timeline",
        "get",
        "update",
        "forget",
        "stats",
        "import",
        "export",
        "check",
        "eval",
        "mcp",
    ):
        assert command in result.output


def test_every_command_is_shown_in_a_guide() -> None:
    """Beyond the generated command reference, each command is shown in use somewhere."""
    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *(root / "docs").rglob("*.md")]
    shown = "\n".join(
        p.read_text(encoding="utf-8")
        for p in pages
        if p.name != "cli.md" or p.parent.name != "reference"
    )
    for command in cli.commands:
        assert f"mnemex {command}" in shown, f"no page but the reference shows `mnemex {command}`"


@both_engines
def test_real_subprocess(store_place) -> None:  # type: ignore[no-untyped-def]
    db = str(store_place("proc.db"))

    def mnemex(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-m", "mnemex", "--db", db, *args],
            capture_output=True,
            text=True,
            input=input,
            env=python_env(),
            timeout=60,
        )

    added = mnemex("add", "The staging database is refreshed every Sunday", "--tag", "db")
    assert added.returncode == 0, added.stderr
    ident = added.stdout.strip()
    found = mnemex("search", "when is staging refreshed?", "--json")
    assert found.returncode == 0, found.stderr
    assert [h["id"] for h in json.loads(found.stdout)["hits"]] == [ident]
    bad = mnemex("add", "")
    assert bad.returncode == 1
    assert bad.stderr == "error: content is empty; a memory needs some text\n"
    version = mnemex("--version")
    assert version.returncode == 0 and "mnemex" in version.stdout


def test_import_and_help_stay_light() -> None:
    code = (
        "import sys, mnemex, mnemex.cli; "
        "heavy = [m for m in ('rich', 'sqlite3', 'mnemex.store', 'ir_measures', 'numpy', "
        "'starlette', 'uvicorn', 'jinja2', 'mnemex.ui', 'onnxruntime', 'tokenizers', 'httpx', "
        "'mnemex.embed.local', 'mnemex.embed.openai', 'mnemex.search.stages') "
        "if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=python_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
    helped = (
        "import sys; from mnemex.cli import main\n"
        "try:\n    main(['ui', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(','.join(m for m in ('starlette', 'uvicorn', 'jinja2') if m in sys.modules), "
        "file=sys.stderr)"
    )
    out = subprocess.run([PYTHON, "-c", helped], capture_output=True, text=True, env=python_env())
    assert out.returncode == 0 and "--read-only" in out.stdout
    assert out.stderr.strip() == ""  # `mnemex ui --help` loads no web library either


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemex.progress import progress_bar

    fake = _Terminal()
    monkeypatch.setattr(sys, "stderr", fake)
    with progress_bar(10, "importing") as advance:
        for _ in range(10):
            advance(1)
    assert "importing" in fake.getvalue()
    quiet = _Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    with progress_bar(10, "importing", enabled=False) as advance:
        advance(10)
    assert quiet.getvalue() == ""


@pytest.mark.model
def test_hybrid_cli_with_the_local_model(run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MNEMEX_EMBEDDER", "local")
    run("add", "Users now sign in through the company OIDC provider", "--kind", "decision")
    run("add", "The invoice PDF renderer moved to a background worker")
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["vectors"] == 2 and stats["pending_vectors"] == 0
    assert stats["embedder"].startswith("all-MiniLM-L6-v2-int8")
    hybrid = json.loads(run("search", "how do people log in?", "--explain", "--json").stdout)
    assert hybrid["mode_used"] == "hybrid" and hybrid["fusion"].startswith("adaptive(")
    assert hybrid["hits"][0]["snippet"].startswith("Users now sign in")
    assert hybrid["hits"][0]["explain"]["vector"]["rank"] == 1
    weighted = json.loads(
        run("search", "log in", "--fusion", "weighted", "--weights", "0.5,0.5", "--json").stdout
    )
    assert weighted["fusion"] == "weighted(0.5 vector, 0.5 text)"
    vector = json.loads(run("search", "how do people log in?", "--mode", "vector", "--json").stdout)
    # The relevance floor keeps the sign-in memory (cosine 0.44) and drops the unrelated one.
    assert vector["mode_used"] == "vector" and len(vector["hits"]) == 1
    human = run("search", "how do people log in?", "--explain", "--fusion", "rrf").stdout
    assert "vector: #1 cosine" in human and "rrf(k=60)" in human
    assert run("search", "x", "--weights", "nope", ok=False).exit_code == 2
    assert "embedded 0" in run("embed").stdout
    reindexed = json.loads(run("reindex", "--force", "--json").stdout)
    assert reindexed["embedded"] == 2 and reindexed["pending"] == 0


@pytest.mark.model
def test_add_and_search_load_the_local_model_fast(  # type: ignore[no-untyped-def]
    run, monkeypatch: pytest.MonkeyPatch, fake_embedder, tmp_path: Path
) -> None:
    """A command that embeds a text or two loads the local model unoptimized, or the folded
    copy a hook keeps in the data folder (never making it: seconds the first time), unless
    the store is indexed with another model: then the store's."""
    import os

    import mnemex
    from mnemex.embed import _local_models
    from mnemex.embed.local import LocalEmbedder

    monkeypatch.setenv("MNEMEX_EMBEDDER", "auto")
    _local_models.clear()
    run("add", "Users now sign in through the company OIDC provider")
    folded = Path(os.environ["MNEMEX_HOME"]) / "models"
    assert not folded.exists()
    assert [(m.optimize, m.saved_cache) for m in _local_models.values()] == [(False, None)]
    LocalEmbedder(optimize=False, saved_cache=folded).load()  # as the first hook does
    found = json.loads(run("search", "how do people log in?", "--json").stdout)
    assert found["mode_used"] == "hybrid" and found["hits"][0]["snippet"].startswith("Users")
    assert [m.saved_cache for m in _local_models.values()] == [None, folded]
    other = tmp_path / "other.db"
    with mnemex.open(other, embedder=fake_embedder) as store:
        store.add("Deploys go through Fly.io")
    result = CliRunner().invoke(cli, ["--db", str(other), "search", "deploys", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["mode_used"] == "lexical"
    assert any("fake:bow-64" in note for note in json.loads(result.stdout)["notes"])


@pytest.mark.model
def test_pending_vectors_are_announced(run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    run("add", "written before any model was configured")
    monkeypatch.setenv("MNEMEX_EMBEDDER", "local")
    result = run("search", "written before")
    assert "1 of 1 memories have no vector" in result.stderr
    assert "mnemex embed" in result.stderr
    assert "1 pending" in run("stats").stdout
    run("embed")
    assert "note:" not in run("search", "written before").stderr


@pytest.mark.model
def test_real_subprocess_hybrid(tmp_path: Path) -> None:
    env = python_env()
    env["MNEMEX_EMBEDDER"] = "local"
    db = str(tmp_path / "hybrid.db")
    added = subprocess.run(
        [PYTHON, "-m", "mnemex", "--db", db, "add", "Deploys go through Fly.io"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert added.returncode == 0, added.stderr
    found = subprocess.run(
        [PYTHON, "-m", "mnemex", "--db", db, "search", "how do deployments happen?", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert result["mode_used"] == "hybrid" and result["hits"]


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_namespace_is_a_usage_error_and_writes_nothing(run, empty: str) -> None:  # type: ignore[no-untyped-def]
    run("add", "already here")
    result = run("-n", empty, "add", "where would this go?", ok=False)
    assert result.exit_code == 2
    assert "is empty: name a namespace" in result.stderr
    assert json.loads(run("stats", "--all-namespaces", "--json").stdout)["memories"] == 1


def test_search_prints_the_same_lines_with_and_without_rich(  # type: ignore[no-untyped-def]
    run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """To a pipe a search prints its lines without rich (not imported: a tenth of a
    search's time), the same lines rich printed there: headers with tags, places and
    namespaces, snippets without their markers, explanations, relations, the summary."""
    from mnemex import cli as module

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "MEMORY.md").write_text("# Deploys\n\nDeploys [prod] go through Fly.io on Fridays.\n")
    run("sync", str(notes))
    run(
        "add",
        "Fly.io deploys need the [release] tag, see **notes**",
        "--tag",
        "ops",
        "--tag",
        "[x]",
    )
    run("-n", "other", "add", "Deploys of the other team: Fly.io too")
    run("relate", "deploys", "go_through", "Fly.io")
    searches = [
        ("search", "fly.io deploys"),
        ("search", "fly.io deploys", "--explain", "--all-namespaces"),
        ("search", "nothing like it at all"),
        ("-n", "empty", "search", "deploys"),
    ]
    for args in searches:
        plain = _untimed(run(*args).stdout)
        with monkeypatch.context() as patched:
            patched.setattr(module, "plain_output", lambda: False)
            through_rich = _untimed(run(*args).stdout)
        assert plain == through_rich and plain.strip(), args
    assert "Fly.io" in run("search", "fly.io deploys").stdout
    assert "-[go_through]->" in run("search", "fly.io deploys").stdout
    assert module.plain_output()  # CliRunner's output is not a terminal


def _untimed(text: str) -> str:
    import re

    return re.sub(r", [0-9.]+ ms$", ", N ms", text, flags=re.MULTILINE)


def test_the_all_namespaces_label_is_refused_as_a_namespace(run) -> None:  # type: ignore[no-untyped-def]
    run("-n", "ops", "add", "the deploy goes through Fly.io")
    for args in (("-n", "*", "search", "deploy"), ("-n", "*", "add", "a memory for all")):
        done = run(*args, ok=False)
        assert done.exit_code == 1 and "--all-namespaces" in done.stderr, done.output
    assert "Fly.io" in run("search", "deploy", "--all-namespaces").stdout


def test_the_entry_point_imports_inspect_on_first_use() -> None:
    """``mnemex``'s entry point leaves ``inspect`` unimported until something reads it; the
    module then behaves as ever, through a name bound before and through a new import."""
    code = textwrap.dedent(
        """
        import sys
        from mnemex.entry import _defer
        _defer("inspect")
        import dataclasses, inspect
        early = inspect
        @dataclasses.dataclass
        class Point:
            '''A point.'''
            x: int
        deferred = "ast" not in sys.modules
        assert str(inspect.signature(Point)) == "(x: int) -> None"
        assert sys.modules["inspect"] is not early and "ast" in sys.modules
        import inspect as again
        assert again.signature is early.signature and again.isfunction(len) is False
        _defer("os")  # imported already: left as it is
        assert type(sys.modules["os"]).__name__ == "module"
        print(deferred)
        """
    )
    done = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, check=True, env=python_env()
    )
    assert done.stdout.strip() == str(sys.version_info < (3, 12))
