"""Markdown workspaces: sync, incremental updates, time, freshness, status, write-through."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex import InvalidInput
from mnemex.config import check_patterns
from mnemex.engine import engine_of
from mnemex.ingest import files
from mnemex.ingest.chunk import chunk_markdown
from mnemex.ingest.workspace import chunk_id
from mnemex.storage.migrations import LATEST
from mnemex.store import ALL, Store
from tests.conftest import PYTHON, FakeEmbedder, python_env
from tests.pg_fixtures import both_engines

HOUR_NS = 3_600 * 1_000_000_000


def paragraph(topic: str, n: int = 60) -> str:
    filler = "the team wrote this down so that later sessions remember it".split()
    return f"{topic} " + " ".join(filler[i % len(filler)] for i in range(n)) + "."


def write(root: Path, path: str, text: str | bytes, *, age_hours: float = 1.0) -> Path:
    """Write a file and date its mtime in the past (out of the racy window)."""
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        target.write_bytes(text)
    else:
        target.write_text(text, encoding="utf-8")
    stamp = time.time_ns() - int(age_hours * HOUR_NS)
    os.utime(target, ns=(stamp, stamp))
    return target


def long_note(title: str, topics: list[str]) -> str:
    return f"# {title}\n\n" + "\n\n".join(
        f"## {t}\n\n{paragraph(t)}\n\n{paragraph(t + 'x', 40)}" for t in topics
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "agent"
    write(folder, "MEMORY.md", long_note("Lasting", ["deploys", "billing", "databases"]))
    write(folder, "memory/2025-11-27.md", long_note("2025-11-27", ["standup", "invoices"]))
    write(folder, "memory/projects/search.md", "# Search\n\nWe ship hybrid search.\n")
    write(folder, "memory/.draft.md", "# hidden draft, ignored\n")
    write(folder, "memory/todo.txt", "not markdown, not indexed\n")
    write(folder, "notes/elsewhere.md", "# outside the default globs\n")
    return folder


@pytest.fixture
def wstore(make_store: Callable[..., Store], fake_embedder: FakeEmbedder) -> Store:
    return make_store("ws.db", embedder=fake_embedder)


def rows(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """A query (``?`` marks) on the store's tables, on either engine."""
    with store.session.connection() as conn:
        found = conn.execute(store.session.workspaces.sql(sql), params).fetchall()
    return [tuple(r) for r in found]


def value(store: Store, sql: str, params: tuple[Any, ...] = ()) -> Any:
    return rows(store, sql, params)[0][0]


def indexed(store: Store) -> set[tuple[str, int, int, str]]:
    """(path, start, end, content) of every chunk in the store."""
    found = rows(
        store,
        """SELECT f.path, c.start_line, c.end_line, m.content FROM chunks AS c
           JOIN files AS f ON f.id = c.file_id JOIN memories AS m ON m.seq = c.seq""",
    )
    return {tuple(r) for r in found}  # type: ignore[misc]


def expected(
    root: Path, globs: tuple[str, ...] = ("MEMORY.md", "memory.md", "memory/**/*.md")
) -> set[tuple[str, int, int, str]]:
    """What chunking the files on disk gives, independently of the store."""
    out = set()
    for path in files.scan(root, globs, ("**/.*",)).files:
        try:
            text = (root / path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if "\x00" in text:
            continue
        for c in chunk_markdown(text):
            out.add((path, c.start_line, c.end_line, c.text.strip()))
    return out


def fts_hits(store: Store, term: str) -> int:
    """The memories whose index holds the word ``term`` (the engine's own index)."""
    if engine_of(store.session) == "SQLite":
        sql = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?"
        return int(value(store, sql, (f'"{term}"',)))
    from mnemex.engine.postgres.tokens import tokens

    (key,) = tokens(term)
    return int(value(store, "SELECT count(DISTINCT seq) FROM postings WHERE term = ?", (key,)))


def chunk_ids(store: Store) -> dict[tuple[str, int], str]:
    found = rows(
        store,
        """SELECT f.path, c.position, m.id FROM chunks AS c JOIN files AS f ON f.id = c.file_id
           JOIN memories AS m ON m.seq = c.seq""",
    )
    return {(p, pos): i for p, pos, i in found}


def consistent(store: Store, root: Path) -> None:
    assert indexed(store) == expected(root)
    assert store.check()["ok"], store.check()["problems"]
    files_rows = value(store, "SELECT count(*) FROM files")
    assert files_rows == len(
        files.scan(root, ("MEMORY.md", "memory.md", "memory/**/*.md"), ("**/.*",)).files
    )


@both_engines
def test_first_sync_indexes_memory_md_and_daily_notes(wstore: Store, root: Path) -> None:
    report = wstore.sync(root)
    assert (report.added, report.changed, report.deleted, report.files) == (3, 0, 0, 3)
    assert report.chunks == len(expected(root)) == report.chunks_added > 3
    assert report.problems == () and report.complete
    assert report.embedded == report.chunks and report.pending_vectors == 0
    consistent(wstore, root)
    paths = {p for p, *_ in indexed(wstore)}
    assert paths == {"MEMORY.md", "memory/2025-11-27.md", "memory/projects/search.md"}
    kinds = rows(wstore, "SELECT DISTINCT kind FROM memories")
    assert kinds == [("chunk",)]
    hit = wstore.search("hybrid search ship", mode="lexical").hits[0]
    assert hit.location is not None and hit.location.label == "memory/projects/search.md:1-3"
    assert hit.location.heading == ("Search",) and hit.location.workspace == str(root.resolve())
    assert hit.to_dict()["location"]["label"] == "memory/projects/search.md:1-3"
    by_vector = wstore.search("hybrid search ship", mode="vector").hits[0]
    assert (by_vector.id, by_vector.location) == (hit.id, hit.location)
    memory = wstore.get(hit.id).memories[0]
    assert memory.source == "memory/projects/search.md" and memory.location == hit.location
    # a second sync reads nothing and changes nothing
    again = wstore.sync(root)
    assert (again.unchanged, again.touched, again.chunks_added, again.embedded) == (3, 0, 0, 0)


@both_engines
def test_edit_delete_rename_add_between_syncs(
    wstore: Store, root: Path, fake_embedder: FakeEmbedder
) -> None:
    wstore.sync(root)
    before = chunk_ids(wstore)
    embedded = fake_embedder.texts

    # edit: one section of MEMORY.md changes
    text = (root / "MEMORY.md").read_text(encoding="utf-8")
    write(root, "MEMORY.md", text.replace("billing the team", "billing zanzibar the team"))
    report = wstore.sync(root)
    assert (report.changed, report.unchanged) == (1, 2)
    assert 1 <= report.chunks_added == report.chunks_removed < len(before)
    assert fake_embedder.texts - embedded == report.chunks_added == report.embedded
    consistent(wstore, root)
    after = chunk_ids(wstore)
    kept = [k for k in before if before[k] == after.get(k)]
    assert len(kept) == len(before) - report.chunks_added  # unchanged chunks keep their ids
    assert fts_hits(wstore, "zanzibar") == 1

    # delete: the daily note goes, with its chunks and their index entries
    daily = {k: v for k, v in after.items() if k[0] == "memory/2025-11-27.md"}
    (root / "memory/2025-11-27.md").unlink()
    report = wstore.sync(root)
    assert (report.deleted, report.chunks_removed) == (1, len(daily))
    consistent(wstore, root)
    assert fts_hits(wstore, "standup") == 0
    assert wstore.get(list(daily.values())).missing == tuple(daily.values())
    assert value(wstore, "SELECT count(*) FROM embeddings") == len(indexed(wstore))

    # rename: rows move, nothing is embedded again
    seqs = rows(wstore, "SELECT seq FROM chunks ORDER BY seq")
    embedded = fake_embedder.texts
    (root / "memory/projects/search.md").rename(root / "memory/projects/hybrid.md")
    report = wstore.sync(root)
    assert (report.renamed, report.added, report.deleted, report.embedded) == (1, 0, 0, 0)
    assert fake_embedder.texts == embedded
    assert rows(wstore, "SELECT seq FROM chunks ORDER BY seq") == seqs
    consistent(wstore, root)
    hit = wstore.search("hybrid search ship", mode="lexical").hits[0]
    assert hit.location is not None and hit.location.path == "memory/projects/hybrid.md"
    digest = wstore.get(hit.id).memories[0].content_hash
    assert hit.id == chunk_id(
        "default", str(root.resolve()), "memory/projects/hybrid.md", digest, 0
    )

    # add: a new daily note
    write(root, "memory/2025-11-28.md", long_note("2025-11-28", ["retro"]))
    report = wstore.sync(root)
    assert report.added == 1 and report.chunks_added >= 1
    consistent(wstore, root)
    assert fts_hits(wstore, "retro") >= 1


@both_engines
def test_moved_text_is_not_embedded_again(
    wstore: Store, root: Path, fake_embedder: FakeEmbedder
) -> None:
    wstore.sync(root)
    embedded = fake_embedder.texts
    # the whole daily note moves into a new file with a different name and one more line
    text = (root / "memory/2025-11-27.md").read_text(encoding="utf-8")
    (root / "memory/2025-11-27.md").unlink()
    write(root, "memory/archive/2025-11-27.md", text + "\n\nOne more line.\n")
    report = wstore.sync(root)
    assert report.deleted == 1 and report.added == 1
    consistent(wstore, root)
    assert fake_embedder.texts - embedded == 1  # only the chunk that changed
    assert report.reused == report.chunks_added - 1


@both_engines
def test_unchanged_files_are_skipped_by_size_and_mtime(
    wstore: Store, root: Path, fake_embedder: FakeEmbedder
) -> None:
    wstore.sync(root)
    target = root / "memory/projects/search.md"
    info = target.stat()
    # same size, same mtime, different bytes: a sync trusts size and mtime and does not read
    target.write_text("# Search\n\nWe ship lexical search.\n"[: info.st_size].ljust(info.st_size))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert wstore.sync(root).unchanged == 3
    assert fts_hits(wstore, "hybrid") == 1
    # touched (new mtime), same bytes as indexed: read, hashed, nothing re-chunked
    write(root, "memory/projects/search.md", "# Search\n\nWe ship hybrid search.\n")
    calls = fake_embedder.calls
    report = wstore.sync(root)
    assert (report.unchanged, report.changed, report.chunks_added, report.embedded) == (3, 0, 0, 0)
    assert fake_embedder.calls == calls
    mtime = value(wstore, "SELECT mtime_ns FROM files WHERE path = 'memory/projects/search.md'")
    assert mtime == target.stat().st_mtime_ns


@both_engines
def test_a_file_written_just_before_a_sync_is_checked_again(wstore: Store, root: Path) -> None:
    target = root / "memory/projects/search.md"
    target.write_text("# Search\n\nWe ship hybrid search.\n")
    wstore.sync(root)
    info = target.stat()
    # changed within the same mtime tick: only the racy-file rule can notice
    target.write_text("# Search\n\nWe ship vector search.\n")
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert wstore.sync(root).changed == 1
    assert fts_hits(wstore, "vector") == 1 and fts_hits(wstore, "hybrid") == 0


@both_engines
def test_invalid_utf8_is_reported_and_skipped_the_rest_indexed(wstore: Store, root: Path) -> None:
    write(root, "memory/broken.md", b"# Broken\n\nlatin-1 text: caf\xe9\n")
    write(root, "memory/nul.md", b"# Binary\x00\x01\x02\n")
    report = wstore.sync(root)
    assert [p.path for p in report.problems] == ["memory/broken.md", "memory/nul.md"]
    assert "not valid UTF-8 (byte 27)" in report.problems[0].message
    assert "NUL" in report.problems[1].message
    assert report.files == 5 and report.chunks == len(expected(root))
    assert indexed(wstore) == expected(root) and wstore.check()["ok"]
    # a file that was fine and turns bad loses its chunks (they no longer say what it says)
    write(root, "memory/projects/search.md", b"# Search\n\n\xff\xfe\n")
    report = wstore.sync(root)
    assert "memory/projects/search.md" in [p.path for p in report.problems]
    assert fts_hits(wstore, "hybrid") == 0
    # fixed: indexed, the problem gone
    write(root, "memory/broken.md", "# Broken\n\nlatin-1 text: café\n")
    report = wstore.sync(root)
    assert [p.path for p in report.problems] == ["memory/nul.md", "memory/projects/search.md"]
    assert fts_hits(wstore, "café") == 1


@both_engines
def test_a_file_vanishing_mid_sync_is_treated_as_deleted(wstore: Store, root: Path) -> None:
    wstore.sync(root)
    for path in ("MEMORY.md", "memory/projects/search.md"):
        (root / path).write_text((root / path).read_text() + "\nedited\n")

    def vanish(phase: str, done: int, total: int) -> None:
        if phase == "reading" and done == 1:
            (root / "memory/projects/search.md").unlink()  # listed, not yet read

    report = wstore.sync(root, progress=vanish)
    assert report.problems == () and report.deleted == 1 and report.changed == 1
    consistent(wstore, root)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user can use (tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="mnemex-perm-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_an_unreadable_file_is_reported_and_keeps_its_chunks(shared_tmp: Path) -> None:
    """Run as an ordinary user (root reads anything): a child process as nobody when root."""
    root = shared_tmp / "agent"
    write(root, "MEMORY.md", "# Lasting\n\nreadable knowledge\n")
    write(root, "memory/secret.md", "# Secret\n\nclassified words\n")
    for folder in (root, root / "memory"):
        folder.chmod(0o777)
    for path in root.rglob("*.md"):
        path.chmod(0o666)
    db = shared_tmp / "perm.db"
    secret = root / "memory/secret.md"
    # Everything is imported and opened first: an ordinary user cannot read root's Python.
    code = f"""
import json, os, mnemex
store = mnemex.open({str(db)!r}, embedder=None)
first = store.sync({str(root)!r})
store.search("warm up every module", mode="lexical")
store.check()
os.chmod({str(secret)!r}, 0)
os.utime({str(secret)!r}, ns=(1, 1))
if os.geteuid() == 0:
    for name in os.listdir({str(shared_tmp)!r}):
        os.chmod(os.path.join({str(shared_tmp)!r}, name), 0o777)
    os.setgid(65534)
    os.setuid(65534)
second = store.sync({str(root)!r})
hits = [h.location.path for h in store.search("classified words", mode="lexical").hits]
print(json.dumps({{"first": first.to_dict(), "second": second.to_dict(), "hits": hits,
                  "ok": store.check()["ok"], "uid": os.geteuid()}}))
"""
    result = subprocess.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        env={**python_env(), "MNEMEX_HOME": str(shared_tmp)},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["first"]["problems"] == [] and out["first"]["chunks"] == 2
    problems = out["second"]["problems"]
    assert [p["path"] for p in problems] == ["memory/secret.md"]
    assert "cannot read" in problems[0]["message"]
    assert out["hits"] == ["memory/secret.md"]  # what was indexed stays until it can be read
    assert out["ok"] and out["uid"] != 0


@both_engines
def test_a_forgotten_chunk_comes_back_at_the_next_sync(wstore: Store, root: Path) -> None:
    wstore.sync(root)
    victim = wstore.search("hybrid search ship", mode="lexical").hits[0].id
    wstore.forget(victim)
    assert fts_hits(wstore, "hybrid") == 0
    assert "1 workspace files lack chunks" in wstore.check()["problems"][0]
    report = wstore.sync(root)
    assert (report.changed, report.chunks_added, report.chunks_removed) == (1, 1, 0)
    consistent(wstore, root)


@both_engines
def test_a_chunk_is_edited_through_its_file(wstore: Store, root: Path) -> None:
    wstore.sync(root)
    hit = wstore.search("hybrid search ship", mode="lexical").hits[0]
    with pytest.raises(InvalidInput, match="edit the file"):
        wstore.update(hit.id, content="something else")
    assert wstore.update(hit.id, confidence=0.95).confidence == 0.95


def test_a_relation_follows_its_chunk_through_a_rename(wstore: Store, root: Path) -> None:
    wstore.sync(root)
    chunk = wstore.search("hybrid search ship", mode="lexical").hits[0].id
    relation = wstore.relate("team", "ships", "hybrid search", source_memory=chunk)
    (root / "memory/projects/search.md").rename(root / "memory/projects/hybrid.md")
    assert wstore.sync(root).renamed == 1
    moved = wstore.search("hybrid search ship", mode="lexical").hits[0].id
    assert moved != chunk
    (kept,) = wstore.neighbors("team")
    assert kept.id == relation.id and kept.source_memory == moved


@both_engines
def test_concurrent_syncs_of_one_workspace(make_store: Callable[..., Store], root: Path) -> None:
    """Two stores (two connections, as two processes would be) sync the same changes at once."""
    import threading

    stores = [make_store("shared.db", busy_timeout=30), make_store("shared.db", busy_timeout=30)]
    stores[0].sync(root)
    for day in range(1, 30):
        write(root, f"memory/2025-09-{day:02d}.md", long_note(f"Day {day}", [f"topic{day}"]))
    (root / "memory/projects/search.md").rename(root / "memory/projects/moved.md")
    (root / "MEMORY.md").write_text("# Lasting\n\nrewritten\n")
    errors: list[BaseException] = []

    def run(store: Store) -> None:
        try:
            store.sync(root)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert indexed(stores[1]) == expected(root) and stores[1].check()["ok"]
    assert stores[0].sync(root).touched == 0


@both_engines
def test_two_processes_syncing_one_new_folder_at_once(
    root: Path, store_place: Callable[[str], Any]
) -> None:
    """Two machines sync the same folder into one store at the same moment, from
    nothing: each chunk is stored once, and a third sync finds nothing to do."""
    for day in range(1, 41):
        write(root, f"memory/2025-10-{day:02d}.md", long_note(f"Day {day}", [f"topic{day}"]))
    db = str(store_place("two.db"))
    mnemex.open(db).close()  # the schema first: the race is the sync's, not the migration's
    command = [PYTHON, "-m", "mnemex", "--db", db, "sync", str(root), "--json"]
    for first in (True, False):  # a sync from nothing, then of many edited files
        runs = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**python_env(), "MNEMEX_BUSY_TIMEOUT": "60"})
            for _ in range(2)
        ]  # fmt: skip
        outs = [run.communicate(timeout=120) for run in runs]
        for run, (out, err) in zip(runs, outs, strict=True):
            assert run.returncode == 0, err
            report = json.loads(out)
            assert report["problems"] == [] and report["complete"], report
        added = [json.loads(out)["chunks_added"] for out, _ in outs]
        with mnemex.open(db) as store:
            assert indexed(store) == expected(root) and store.check()["ok"]
            assert value(store, "SELECT count(*) FROM memories") == len(expected(root))
            if first:
                assert sum(added) == len(expected(root))  # each chunk added by one of them
            assert store.sync(root).touched == 0
        for path in sorted(root.glob("memory/2025-10-*.md"))[::3]:
            write(root, str(path.relative_to(root)), path.read_text() + "\nOne more line.\n")


@both_engines
def test_another_namespace_cannot_tell_a_chunk_from_an_unknown_id(
    wstore: Store, root: Path
) -> None:
    wstore.sync(root, namespace="team-a")
    (hit,) = wstore.search("hybrid search ship", namespace="team-a", mode="lexical", limit=1).hits
    unknown = "a" * len(hit.id)

    def outcome(call: Callable[[str], Any], ident: str) -> str:
        try:
            result = call(ident)
        except mnemex.MnemexError as exc:
            return f"{type(exc).__name__}: {str(exc).replace(ident, 'ID')}"
        return repr(result).replace(ident, "ID")

    calls: list[Callable[[str], Any]] = [
        lambda i: wstore.get(i, namespace="team-b"),
        lambda i: wstore.update(i, content="rewritten", namespace="team-b"),
        lambda i: wstore.update(i, confidence=0.9, namespace="team-b"),
        lambda i: wstore.timeline(around=i, namespace="team-b"),
        lambda i: wstore.forget(i, namespace="team-b"),
    ]
    for call in calls:
        assert outcome(call, hit.id) == outcome(call, unknown)
    assert wstore.get(hit.id, namespace="team-a").memories[0].location == hit.location
    assert wstore.search("hybrid search ship", namespace="team-b").hits == ()
    assert wstore.workspace_status(namespace="team-b") == ()
    with pytest.raises(InvalidInput, match="not a workspace of namespace 'team-b'"):
        wstore.workspace_status(root, namespace="team-b")
    with pytest.raises(InvalidInput, match="not a workspace of namespace 'team-b'"):
        wstore.remove_workspace(root, namespace="team-b")
    # the same folder synced into team-b: chunks of its own, nothing of team-a's touched
    report = wstore.sync(root, namespace="team-b")
    assert report.added == 3 and report.chunks == len(expected(root))
    theirs = wstore.search("hybrid search ship", namespace="team-b", mode="lexical").hits
    assert [h.id for h in theirs] != [hit.id] and len(theirs) == 1
    assert wstore.get(hit.id, namespace="team-a").memories[0].location == hit.location
    assert wstore.sync(root, namespace="team-a").touched == 0


@both_engines
def test_a_file_synced_by_another_process_meanwhile(
    make_store: Callable[..., Store], root: Path
) -> None:
    """A reads a file that another process indexed with other text after A looked at the
    table: A must cut it again, not keep the other process's chunks under its own hash."""
    first, second = make_store("race.db"), make_store("race.db")
    first.sync(root)
    target = root / "memory/projects/search.md"
    original = target.read_text()
    write(root, "memory/projects/search.md", original, age_hours=0.5)  # touched: A will read it

    def meanwhile(phase: str, done: int, total: int) -> None:
        if phase == "reading" and done == 0:
            write(root, "memory/projects/search.md", "# Search\n\nWe ship vector search.\n")
            assert second.sync(root).changed == 1
            write(root, "memory/projects/search.md", original, age_hours=0.25)

    first.sync(root, progress=meanwhile)
    assert indexed(first) == expected(root) and first.check()["ok"]
    assert fts_hits(first, "vector") == 0


@both_engines
def test_a_sync_by_another_store_is_seen_at_once(
    make_store: Callable[..., Store], root: Path
) -> None:
    """A store keeps the files rows it read; another store's sync makes them old."""
    first, second = make_store("seen.db"), make_store("seen.db")
    first.sync(root)
    assert first.workspace_status(root)[0].changed == 0
    write(root, "memory/projects/search.md", "# Search\n\nWe ship vector search.\n")
    assert first.workspace_status(root)[0].changed == 1
    assert second.sync(root).changed == 1
    (status,) = first.workspace_status(root)
    assert status.changed == 0 and status.in_sync
    assert first.sync(root).touched == 0


@both_engines
def test_two_workspaces_in_one_store(wstore: Store, root: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-agent"
    write(other, "MEMORY.md", "# Other\n\nThe other agent keeps kubernetes notes.\n")
    write(other, "memory/projects/search.md", "# Search\n\nWe ship hybrid search.\n")
    wstore.sync(root)
    wstore.sync(other, namespace="other")
    wstore.sync(other)  # the same folder in a second namespace
    found = wstore.search("kubernetes", mode="lexical").hits
    assert [h.location.workspace for h in found] == [str(other.resolve())]  # type: ignore[union-attr]
    found = wstore.search("kubernetes", namespace="other", mode="lexical").hits
    assert found[0].location.path == "MEMORY.md"  # type: ignore[union-attr]
    same = [h.id for h in wstore.search("hybrid search ship", namespace=ALL, mode="lexical").hits]
    assert len(same) == 3 and len(set(same)) == 3  # identical text, distinct ids
    statuses = wstore.workspace_status(namespace=ALL)
    assert sorted((s.namespace, Path(s.workspace).name) for s in statuses) == [
        ("default", "agent"),
        ("default", "other-agent"),
        ("other", "other-agent"),
    ]
    removed = wstore.remove_workspace(other)
    assert removed == 2
    assert wstore.search("kubernetes", mode="lexical").hits == ()
    assert len(wstore.search("kubernetes", namespace="other", mode="lexical").hits) == 1
    assert wstore.check()["ok"]
    with pytest.raises(InvalidInput, match="is not a workspace"):
        wstore.remove_workspace(other)


@both_engines
def test_chunks_of_one_file_lend_each_other_nothing(wstore: Store, root: Path) -> None:
    """A file's sections are in no thread (the thread stage is for turns of a talk)."""
    wstore.sync(root)
    found = wstore.search(
        "the team wrote this down so that later sessions remember it",
        mode="lexical", explain=True, limit=20, namespace=ALL,
    )  # fmt: skip
    paths = [h.location.path for h in found.hits]  # type: ignore[union-attr]
    assert paths.count("MEMORY.md") >= 2
    stages = [s["stage"] for h in found.hits for s in (h.explain or {}).get("stages", [])]
    assert "thread" not in stages and "top_k" in stages


@both_engines
def test_dates_from_file_names_evergreen_and_mtime(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    root = tmp_path / "timed"
    write(root, "MEMORY.md", "# Lasting\n\nsharedword evergreen knowledge\n", age_hours=24 * 400)
    write(root, "memory/2025-11-27.md", "# Day\n\nsharedword daily note\n")
    write(root, "memory/people.md", "# People\n\nsharedword undated note\n", age_hours=24 * 400)
    write(root, "journal/idea.md", "# Idea\n\nsharedword other note\n", age_hours=24 * 60)
    store = make_store("timed.db")
    store.sync(root, globs=["MEMORY.md", "memory/**/*.md", "journal/*.md"])
    found = store.search("sharedword", mode="lexical", decay=True, explain=True, now="2025-12-27")
    by_path = {h.location.path: h for h in found.hits}  # type: ignore[union-attr]
    assert by_path["memory/2025-11-27.md"].created_at == datetime(2025, 11, 27, tzinfo=UTC)
    mtime = datetime.fromtimestamp((root / "journal/idea.md").stat().st_mtime, UTC)
    assert abs((by_path["journal/idea.md"].created_at - mtime).total_seconds()) < 0.01

    def decay(path: str) -> dict[str, Any]:
        explain = by_path[path].explain
        assert explain is not None
        return next(s for s in explain["stages"] if s["stage"] == "decay")

    assert decay("MEMORY.md") == {"stage": "decay", "exempt": "evergreen"}
    assert decay("memory/people.md") == {"stage": "decay", "exempt": "evergreen"}
    assert decay("memory/2025-11-27.md")["age_days"] == 30.0
    assert decay("memory/2025-11-27.md")["factor"] == pytest.approx(0.5)
    assert "factor" in decay("journal/idea.md")


@both_engines
def test_search_syncs_a_changed_workspace_first(wstore: Store, root: Path) -> None:
    wstore.sync(root)
    write(root, "memory/2025-11-29.md", "# Day\n\nThe pager rotation moved to Fridays.\n")
    found = wstore.search("pager rotation")
    assert not found.stale and found.notes == ()
    assert found.hits[0].location.path == "memory/2025-11-29.md"  # type: ignore[union-attr]
    assert found.to_dict()["stale"] is False
    (root / "memory/2025-11-29.md").unlink()
    assert wstore.search("pager rotation", mode="lexical").hits == ()
    assert wstore.check()["ok"]
    # recall reads through search
    write(root, "memory/2025-11-30.md", "# Day\n\nThe pager rotation moved to Mondays.\n")
    block = wstore.recall("pager rotation")
    assert "Mondays" in block.markdown and not block.stale


@both_engines
def test_search_flags_stale_results_when_it_cannot_sync(
    make_store: Callable[..., Store], root: Path
) -> None:
    store = make_store("stale.db", sync_on_search=False)
    store.sync(root)
    write(root, "memory/2025-11-29.md", "# Day\n\nThe pager rotation moved to Fridays.\n")
    found = store.search("pager rotation")
    assert found.stale and found.hits == ()
    assert "changed since the last sync: run `mnemex sync" in found.notes[0]
    assert found.to_dict()["stale"] is True
    assert store.recall("pager rotation").stale
    # with too little time to sync everything, it answers anyway and says so
    hurried = make_store("stale.db", sync_timeout=1e-9)
    for day in range(1, 20):
        write(root, f"memory/2025-10-{day:02d}.md", f"# Day\n\npager note {day}\n")
    found = hurried.search("pager")
    assert found.stale and "could not be synced within sync_timeout" in found.notes[0]
    assert hurried.check()["ok"]
    # a missing folder
    shutil.rmtree(root)
    found = store.search("pager")
    assert found.stale and "is missing" in found.notes[0]


@both_engines
def test_a_store_without_workspaces_does_no_work(store: Store) -> None:
    store.add("plain memory")
    found = store.search("plain")
    assert not found.stale and found.notes == ()


@both_engines
def test_status_is_truthful(wstore: Store, root: Path, fake_embedder: FakeEmbedder) -> None:
    with pytest.raises(InvalidInput, match="run `mnemex sync"):
        wstore.workspace_status(root)
    wstore.sync(root)
    (status,) = wstore.workspace_status(root)
    assert (status.files, status.chunks, status.pending_vectors) == (3, len(expected(root)), 0)
    assert status.in_sync and status.changed == 0 and status.problems == ()
    assert status.embedder == fake_embedder.model_id
    assert status.synced_at is not None and status.last_sync["files"] == 3
    # a change on disk shows at once, without a sync
    write(root, "memory/2025-12-01.md", "# Day\n\nnew file\n")
    (root / "memory/projects/search.md").unlink()
    (status,) = wstore.workspace_status(root)
    assert status.changed == 2 and not status.in_sync and status.files == 3
    # chunks stored without vectors are counted as pending
    fake_embedder.fail = True
    report = wstore.sync(root)
    assert report.embedding_error and report.pending_vectors == 1
    (status,) = wstore.workspace_status(root)
    assert status.pending_vectors == 1 and status.in_sync
    assert status.to_dict()["pending_vectors"] == 1
    fake_embedder.fail = False
    assert wstore.sync(root).pending_vectors == 0


@both_engines
def test_changing_chunk_sizes_rechunks(make_store: Callable[..., Store], root: Path) -> None:
    make_store("sizes.db").sync(root)
    small = make_store("sizes.db", chunk_tokens=100, chunk_overlap=20)
    report = small.sync(root)
    assert report.changed == 2  # the short file is one chunk at either size
    assert value(small, "SELECT chunking FROM workspaces") == "md-v2 100/20"
    assert small.sync(root).touched == 0
    assert report.chunks == sum(
        len(chunk_markdown((root / p).read_text(), 100, 20))
        for p in ("MEMORY.md", "memory/2025-11-27.md", "memory/projects/search.md")
    )
    assert small.check()["ok"]


@both_engines
def test_add_to_workspace_writes_a_daily_file(wstore: Store, tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    first = wstore.add_to_workspace(
        "We picked PostgreSQL 16 for billing.",
        root,
        kind="Decision",
        tags=["db", "billing ops"],
        created_at="2025-11-27T10:30:00+00:00",
    )
    day = datetime(2025, 11, 27, 10, 30, tzinfo=UTC).astimezone()
    name = f"memory/{day.date().isoformat()}.md"
    text = (root / name).read_text(encoding="utf-8")
    header = f"## {day:%H:%M} · decision · #db #billing-ops"
    assert (
        text == f"# {day.date().isoformat()}\n\n{header}\n\nWe picked PostgreSQL 16 for billing.\n"
    )
    assert first.location.label == f"{name}:3-5" and len(first.ids) == 1
    assert first.location.heading == (day.date().isoformat(), header[3:])
    second = wstore.add_to_workspace(
        "Invoices render in a worker now.", root, created_at="2025-11-27T10:31:00Z"
    )
    assert second.location.start_line == 7
    lines = (root / name).read_text(encoding="utf-8").split("\n")
    assert lines[6].startswith("## ") and lines[8] == "Invoices render in a worker now."
    hit = wstore.search("postgresql billing", mode="lexical").hits[0]
    assert hit.id in first.ids and hit.location.path == name  # type: ignore[union-attr]
    assert not set(first.ids) & set(second.ids)  # each entry is a chunk of its own
    assert wstore.check()["ok"] and indexed(wstore) == expected(root)
    entry = wstore.get(first.ids).memories[0]
    assert (entry.kind, entry.tags) == ("decision", ("db", "billing-ops"))
    assert wstore.get(second.ids).memories[0].kind == "chunk"
    # a file without a final newline gets one before the entry
    (root / name).write_text((root / name).read_text().rstrip("\n"))
    third = wstore.add_to_workspace("Third.", root, created_at="2025-11-27T10:32:00Z")
    assert (root / name).read_text().split("\n")[third.location.end_line - 1] == "Third."
    with pytest.raises(InvalidInput):
        wstore.add_to_workspace("   ", root)


@both_engines
def test_add_to_workspace_outside_the_globs_is_refused(wstore: Store, root: Path) -> None:
    wstore.sync(root, globs=["MEMORY.md"])
    with pytest.raises(InvalidInput, match=r"add memory/\*\*/\*\.md"):
        wstore.add_to_workspace("note", root)


@both_engines
def test_a_file_and_a_memory_may_hold_the_same_text(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """The text of a chunk (here an entry with a kind) is never merged with a memory's,
    either way round, and removing the workspace leaves the memory."""
    store = make_store("same.db")
    first, second = tmp_path / "first", tmp_path / "second"
    entry = "# 2025-11-27\n\n## 10:30 · decision\n\nWe picked PostgreSQL 16.\n"
    write(first, "memory/2025-11-27.md", entry)
    store.sync(first)
    (chunk,) = store.timeline(kinds=["decision"])
    text = store.get(chunk.id).memories[0].content
    kept = store.remember(text, kind="decision")
    assert not kept.deduplicated and kept.id != chunk.id
    write(second, "memory/2025-11-27.md", entry)  # the memory's text first, then a file's
    report = store.sync(second)
    assert report.problems == () and report.chunks_added == 1
    assert store.count() == 3 and store.check()["ok"]
    assert store.remove_workspace(first) == store.remove_workspace(second) == 1
    assert [m.content for m in store.get(kept.id).memories] == [text]


def test_dedup_leaves_chunks_alone(make_store: Callable[..., Store], root: Path) -> None:
    store = make_store("dedup.db")
    store.sync(root)
    text = store.search("hybrid search ship", mode="lexical").hits[0]
    chunk = store.get(text.id).memories[0]
    added = store.remember(chunk.content)
    assert not added.deduplicated and added.id != chunk.id
    report = store.dedup()
    assert [p.keep for p in report.pairs] == [] or chunk.id not in [
        p.duplicate for p in report.pairs
    ]
    assert store.get(chunk.id).memories[0].namespace == "default"
    assert store.sync(root).touched == 0


@both_engines
def test_patterns_are_checked(wstore: Store, root: Path) -> None:
    with pytest.raises(InvalidInput, match="relative glob"):
        wstore.sync(root, globs=["/etc/*.md"])
    with pytest.raises(InvalidInput, match="relative glob"):
        wstore.sync(root, ignore=["../x"])
    with pytest.raises(InvalidInput, match="does not exist"):
        wstore.sync(root / "nope")
    report = wstore.sync(root, globs=["**/*.md"], ignore=["notes/**"])
    assert report.files == 4  # notes/ ignored; the hidden draft no longer is
    assert wstore.sync(root).files == 4  # the patterns are remembered
    (status,) = wstore.workspace_status(root)
    assert status.globs == ("**/*.md",) and status.ignore == ("notes/**",)


def test_migration_from_schema_3_keeps_memories(tmp_path: Path) -> None:
    from mnemex.storage.migrations import MIGRATIONS

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for _, _, statements in MIGRATIONS[:3]:
        for statement in statements:
            conn.execute(statement)
    conn.execute(
        "INSERT INTO memories (id, namespace, kind, content, created_at, updated_at, content_hash) "
        "VALUES ('old1', 'default', 'fact', 'kept through the upgrade', "
        "'2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z', 'h')"
    )
    conn.execute("PRAGMA user_version = 3")
    conn.close()
    with mnemex.open(path) as store:
        assert store.stats().schema_version == LATEST
        assert store.get("old1").memories[0].content == "kept through the upgrade"


def test_glob_matching() -> None:
    cases = {
        ("memory/**/*.md", "memory/a.md"): True,
        ("memory/**/*.md", "memory/2025/11/a.md"): True,
        ("memory/**/*.md", "memoryx/a.md"): False,
        ("memory/*.md", "memory/x/a.md"): False,
        ("*.md", "a/b.md"): False,
        ("**/.*", "memory/.swap.md"): True,
        ("**/.*", ".git"): True,
        ("[!_]*.md", "_x.md"): False,
        ("notes/**", "notes/deep/x.md"): True,
    }
    for (pattern, path), expected_match in cases.items():
        assert bool(files.glob_regex(pattern).match(path)) is expected_match, (pattern, path)
    with pytest.raises(ValueError, match="not valid"):
        check_patterns(["a/../b"], "globs")


def test_scan_walks_only_what_the_globs_reach(tmp_path: Path) -> None:
    write(tmp_path, "MEMORY.md", "x")
    write(tmp_path, "memory/a.md", "x")
    blocked = tmp_path / "node_modules"
    blocked.mkdir()
    blocked.chmod(0)  # listing it would fail (as a non-root user)
    (tmp_path / "link.md").symlink_to(tmp_path / "missing.md")  # dangling: not a file
    found = files.scan(tmp_path, ("MEMORY.md", "memory/**/*.md", "link.md"), ())
    assert sorted(found.files) == ["MEMORY.md", "memory/a.md"] and not found.errors
    blocked.chmod(stat.S_IRWXU)


# -- the CLI --------------------------------------------------------------------------


@both_engines
def test_cli_sync_status_search_and_write_through(
    root: Path, store_place: Callable[[str], Any]
) -> None:
    from click.testing import CliRunner

    from mnemex.cli import cli

    runner = CliRunner()
    db = str(store_place("cli.db"))

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(cli, ["--db", db, *args], catch_exceptions=False)
        assert result.exit_code == code, result.output + result.stderr
        return result

    write(root, "memory/bad.md", b"\xff")
    result = run("sync", str(root), "--json", code=1)  # a file could not be indexed
    report = json.loads(result.stdout)
    assert (report["files"], report["added"]) == (4, 4)
    assert report["problems"][0]["path"] == "memory/bad.md"
    assert "skipped memory/bad.md: not valid UTF-8" in result.stderr
    (root / "memory/bad.md").unlink()
    human = run("sync", str(root)).stdout
    assert "3 files" in human and "1 deleted" in human

    status = json.loads(run("status", "--json").stdout)["workspaces"][0]
    assert status["in_sync"] and status["files"] == 3 and status["pending_vectors"] is None
    assert "in sync with the files" in run("status", str(root)).stdout
    write(root, "memory/2025-12-02.md", "# Day\n\nchanged on disk\n")
    assert "1 file(s) changed since" in run("status").stdout

    found = json.loads(run("search", "hybrid search ship", "--json").stdout)
    assert found["stale"] is False
    assert found["hits"][0]["location"]["label"] == "memory/projects/search.md:1-3"
    assert "memory/projects/search.md:1-3" in run("search", "hybrid search ship").stdout
    assert "at: memory/projects/search.md:1-3" in run("get", found["hits"][0]["id"]).stdout

    added = run(
        "add", "Rotate the deploy token monthly", "--to-workspace", str(root), "--kind", "todo"
    )
    ident = added.stdout.strip()
    assert len(ident) == 16 and "appended to memory/" in added.stderr
    assert json.loads(run("get", ident, "--json").stdout)["memories"][0]["location"]
    appended = json.loads(
        run("add", "Second note", "--to-workspace", str(root), "--tag", "ops", "--json").stdout
    )
    assert appended["ids"] and appended["location"]["path"].startswith("memory/")
    refused = run("add", "x", "--to-workspace", str(root), "--pinned", "--id", "abc", code=2)
    assert "cannot hold --pinned, --id" in refused.stderr

    removed = json.loads(run("sync", str(root), "--remove", "--json").stdout)
    assert removed["removed"] and removed["chunks"] > 3
    assert json.loads(run("status", "--json").stdout) == {"workspaces": []}
    assert "no workspaces here" in run("status").stdout


@both_engines
def test_cli_sync_and_status_in_a_real_process(
    root: Path, tmp_path: Path, store_place: Callable[[str], Any]
) -> None:
    db = str(store_place("proc.db"))

    def mnemex(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-m", "mnemex", "--db", db, *args],
            capture_output=True,
            text=True,
            env=python_env(),
            timeout=60,
        )

    synced = mnemex("sync", str(root), "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["files"] == 3
    status = mnemex("status")
    assert status.returncode == 0, status.stderr
    assert str(root.resolve()) in status.stdout and "in sync with the files" in status.stdout
    missing = mnemex("sync", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
