"""What a new user meets on the command line: missing stores, empty queries, busy
ports, piped output, one JSON object per command. Real subprocesses throughout, since
the output depends on whether stdout is a terminal."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, python_env


def mnemex(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "mnemex", *args],
        capture_output=True,
        text=True,
        input=input,
        env={**python_env(), **(env or {})},
        timeout=120,
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "m.db")
    added = mnemex("--db", path, "add", "The staging database is refreshed every Sunday")
    assert added.returncode == 0, added.stderr
    return path


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("search", ""), "the query is empty"),
        (("search", "   "), "the query is empty"),
        (("search", "-"), "the query is empty"),
        (("recall", ""), "the task is empty"),
    ],
)
def test_an_empty_query_is_an_error(db: str, args: tuple[str, ...], says: str) -> None:
    out = mnemex("--db", db, *args, input="\n")
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.startswith(f"error: {says}") and out.stderr.count("\n") == 1


def test_mcp_http_on_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = mnemex("--db", str(tmp_path / "m.db"), "mcp", "--http", "--port", str(port))
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert out.stderr.count("\n") == 1, out.stderr


def test_workspace_entries_keep_their_kind_and_tags(tmp_path: Path) -> None:
    space = tmp_path / "agent"
    (space / "memory").mkdir(parents=True)
    (space / "MEMORY.md").write_text("# Notes\n\nThe deploy runs on Fridays.\n")
    db = str(tmp_path / "m.db")
    for text, kind, tag in (
        ("Rotate the staging keys", "todo", "ops"),
        ("We keep Postgres for billing", "decision", "db"),
    ):
        out = mnemex(
            "--db", db, "add", text, "--to-workspace", str(space), "--kind", kind, "--tag", tag
        )
        assert out.returncode == 0, out.stderr

    def kinds() -> dict[str, tuple[str, list[str]]]:
        out = mnemex("--db", db, "timeline", "--json")
        assert out.returncode == 0, out.stderr
        entries = json.loads(out.stdout)["entries"]
        return {e["summary"]: (e["kind"], e["tags"]) for e in entries}

    def found(kind: str) -> list[str]:
        out = mnemex("--db", db, "search", "staging keys billing", "--kind", kind, "--json")
        assert out.returncode == 0, out.stderr
        return [h["snippet"] for h in json.loads(out.stdout)["hits"]]

    assert any("Rotate" in s for s in found("todo"))
    assert not any("Postgres" in s for s in found("todo"))
    assert any("Postgres" in s for s in found("decision"))
    before = kinds()
    assert sorted(k for k, _ in before.values()) == ["chunk", "decision", "todo"]
    assert ["ops"] in [t for _, t in before.values()]
    # A fresh index of the same files, and a sync after an edit, keep them.
    (space / "MEMORY.md").write_text("# Notes\n\nThe deploy runs on Thursdays.\n")
    assert mnemex("--db", db, "sync", str(space)).returncode == 0
    fresh = str(tmp_path / "fresh.db")
    assert mnemex("--db", fresh, "sync", str(space)).returncode == 0
    assert sorted(k for k, _ in kinds().values()) == ["chunk", "decision", "todo"]
    db = fresh
    assert sorted(k for k, _ in kinds().values()) == ["chunk", "decision", "todo"]
    assert any("Rotate" in s for s in found("todo"))


READS = [
    ("search", "deploy"),
    ("recall", "deploy"),
    ("get", "abc"),
    ("stats",),
    ("timeline",),
    ("neighbors", "billing"),
    ("export",),
    ("check",),
    ("status",),
    ("dedup", "--dry-run"),
    ("update", "abc", "--kind", "fact"),
    ("forget", "abc"),
    ("sync", "--remove", "."),
]


@pytest.mark.parametrize("args", READS, ids=lambda a: a[0])
def test_a_read_on_a_missing_store_fails_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    db = tmp_path / "typo" / "dir" / "m.db"
    out = mnemex("--db", str(db), *args)
    assert out.returncode == 1, out
    assert out.stdout == ""
    assert out.stderr == (
        f"error: no store at {db}: check the path given with --db (or MNEMEX_DB); "
        "a command that writes (`mnemex add`, `mnemex sync DIR`) creates it\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_default_store_is_not_made_by_a_read(tmp_path: Path) -> None:
    out = mnemex("stats", env={"MNEMEX_HOME": str(tmp_path / "home")})
    assert out.returncode == 1 and out.stderr.startswith("error: no store yet at ")
    assert "`mnemex add`" in out.stderr and not (tmp_path / "home").exists()


def test_a_write_creates_the_store_and_says_so_once(tmp_path: Path) -> None:
    db = tmp_path / "new" / "m.db"
    failed = mnemex("--db", str(db), "add", "   ")
    assert failed.returncode == 1 and failed.stderr.startswith("error: content is empty")
    assert list(tmp_path.iterdir()) == []  # a failed write leaves nothing behind
    first = mnemex("--db", str(db), "add", "The staging database is refreshed every Sunday")
    assert first.returncode == 0 and first.stderr == f"created store at {db}\n"
    second = mnemex("--db", str(db), "add", "Deploys happen on Fridays")
    assert second.returncode == 0 and second.stderr == ""
    assert mnemex("--db", str(db), "stats").returncode == 0


def test_an_unknown_namespace_or_kind_says_which_exist(db: str) -> None:
    assert (
        mnemex("--db", db, "-n", "work", "add", "Fix the flaky test", "--kind", "todo").returncode
        == 0
    )
    out = mnemex("--db", db, "-n", "wrok", "search", "staging")
    assert out.returncode == 0
    where = "1 memories in namespace 'default', 1 memories in namespace 'work'"
    assert out.stderr == (
        "note: this namespace ('wrok': given with -n/--namespace) is empty; "
        f"{where} (choose with -n NAME, or --all-namespaces)\n"
    )
    for command in (("timeline",), ("recall", "staging"), ("stats",)):
        out = mnemex("--db", db, "-n", "wrok", *command)
        assert where in out.stderr, command
    out = mnemex("--db", db, "search", "staging", "--kind", "todoo", "--json")
    assert json.loads(out.stdout)["hits"] == []
    assert (
        "note: no memories of kind 'todoo' in the namespace 'default'; its kinds are "
        "observation (1)" in out.stderr
    )
    out = mnemex("--db", db, "timeline", "--kind", "todoo", "--all-namespaces")
    assert "in the store; its kinds are observation (1), todo (1)" in out.stderr


def test_piped_text_is_plain_lines(tmp_path: Path) -> None:
    space = tmp_path / "agent"
    (space / "memory" / "projects" / "a-rather-long-project-name").mkdir(parents=True)
    note = space / "memory" / "projects" / "a-rather-long-project-name" / "deployment-notes.md"
    note.write_text("# Deploys\n\n" + "The staging database is refreshed every Sunday night. " * 8)
    db = str(tmp_path / "m.db")
    assert mnemex("--db", db, "sync", str(space), "--glob", "memory/**/*.md").returncode == 0
    out = mnemex("--db", db, "add", "Deploys are frozen on Fridays", "--tag", "ops")
    for args in (
        ("search", "staging refreshed deploys"),
        ("timeline",),
        ("get", out.stdout.strip()),
    ):
        out = mnemex("--db", db, *args)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert all(line == line.rstrip() for line in lines), args
        assert all("\x1b" not in line for line in lines), args
    search = mnemex("--db", db, "search", "staging refreshed").stdout.splitlines()
    header = next(line for line in search if "deployment-notes.md" in line)
    assert re.search(r"^ 1\. .*/deployment-notes\.md:\d+-\d+  \d{4}-\d\d-\d\d \d\d:\d\d$", header)
    snippet = search[search.index(header) + 1]
    assert snippet.startswith("     ") and len(snippet) > 200  # one line, not wrapped


def test_every_json_output_is_one_object_and_hits_carry_their_namespace(db: str) -> None:
    assert mnemex("--db", db, "-n", "work", "add", "The staging cluster moved").returncode == 0
    assert mnemex("--db", db, "relate", "staging", "runs_on", "k8s").returncode == 0
    found = json.loads(mnemex("--db", db, "search", "staging", "--all-namespaces", "--json").stdout)
    assert sorted(h["namespace"] for h in found["hits"]) == ["default", "work"]
    text = mnemex("--db", db, "search", "staging", "--all-namespaces").stdout
    assert "  work  " in text and "  default  " in text
    timeline = json.loads(mnemex("--db", db, "timeline", "--all-namespaces", "--json").stdout)
    assert sorted(e["namespace"] for e in timeline["entries"]) == ["default", "work"]
    assert "  work  " in mnemex("--db", db, "timeline", "--all-namespaces").stdout
    neighbors = json.loads(mnemex("--db", db, "neighbors", "staging", "--json").stdout)
    assert [r["object"] for r in neighbors["relations"]] == ["k8s"]
    for args in (("stats",), ("check",), ("status",), ("get", found["hits"][0]["id"])):
        assert isinstance(json.loads(mnemex("--db", db, *args, "--json").stdout), dict), args


def test_explain_shows_the_bm25_behind_the_score(db: str) -> None:
    assert mnemex("--db", db, "add", "Deploys are frozen on Fridays").returncode == 0
    found = json.loads(mnemex("--db", db, "search", "staging Sunday", "--explain", "--json").stdout)
    lexical = found["hits"][0]["explain"]["lexical"]
    assert lexical["bm25"] > 0 and lexical["norm"] > 0  # tiny in a two-memory store
    assert math.tanh(lexical["bm25"] / lexical["norm"]) == pytest.approx(lexical["score"], abs=1e-5)
    text = mnemex("--db", db, "search", "staging Sunday", "--explain").stdout
    shown = re.search(r"tanh\(bm25 (\S+) / norm (\S+)\) -> (\S+) ", text)
    assert shown is not None, text
    bm25, norm, score = (float(v) for v in shown.groups())
    assert math.tanh(bm25 / norm) == pytest.approx(score, abs=2e-3)


def test_help_says_what_the_tool_is() -> None:
    out = mnemex("--help")
    first = out.stdout.split("\n\n")[1].strip()
    assert first == "Hybrid memory search for AI agents: BM25 and vectors, local-first."
    assert "vector similarity" in out.stdout and "fuses" in out.stdout


def test_hooks_install_json_is_one_object(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    out = subprocess.run(
        [PYTHON, "-m", "mnemex", "hooks", "install", "claude-code", "--json"],
        capture_output=True,
        text=True,
        cwd=project,
        env={**python_env(), "HOME": str(tmp_path)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    files = json.loads(out.stdout)["files"]
    assert files and all("path" in f for f in files)


def test_a_terminal_still_gets_wrapped_and_indented_output(db: str) -> None:
    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [PYTHON, "-m", "mnemex", "--db", db, "search", "staging database"],
            stdout=follower,
            stderr=subprocess.PIPE,
            env={**python_env(), "COLUMNS": "60", "TERM": "xterm"},
            timeout=60,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
    assert proc.returncode == 0, proc.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode())
    lines = text.replace("\r\n", "\n").splitlines()
    assert any(line.startswith(" 1. ") for line in lines)
    snippet = next(line for line in lines if "staging" in line and not line.startswith(" 1."))
    assert snippet.startswith("     ") and max(len(line) for line in lines) <= 60
