"""The store over a PostgreSQL URL: what differs from SQLite, and what must hold only
there (two agents writing one fact at once). What holds on both engines is tested once,
in the tests marked ``both_engines`` (tests/test_store.py, tests/cli/test_cli.py, ...)."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex.config import load_settings
from tests.conftest import PYTHON, FakeEmbedder, python_env

postgres = pytest.mark.postgres


def test_settings_keep_a_url_whole_and_the_later_place_wins(tmp_path: Path) -> None:
    url = "postgresql://agent@db.internal:5432/team"
    assert load_settings(url).db_url == url
    assert load_settings(url, environ={"MNEMEX_DB": str(tmp_path / "x.db")}).db_url == url
    from_env = load_settings(environ={"MNEMEX_DB": "postgres://u@h/d"})
    assert from_env.db_url == "postgres://u@h/d"
    assert load_settings(tmp_path / "y.db", environ={"MNEMEX_DB": url}).db_url is None


def test_a_sqlite_store_never_imports_the_driver(tmp_path: Path) -> None:
    code = (
        "import sys, mnemex\n"
        f"s = mnemex.open({str(tmp_path / 'a.db')!r})\n"
        "s.add('x y z'); s.search('x'); s.recall('x'); s.stats(); s.close()\n"
        "assert not any(m.startswith(('psycopg', 'pgserver')) for m in sys.modules), "
        "sorted(m for m in sys.modules if m.startswith('psycopg'))\n"
    )
    done = subprocess.run([PYTHON, "-c", code], env=python_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _add_same(url: str, text: str) -> str:
    with mnemex.open(url) as store:
        return store.add(text)


@postgres
@pytest.mark.slow
def test_two_writers_adding_one_text_at_once_end_with_one_memory(pg_url: str) -> None:
    texts = [f"the deploy key rotates on day {n} of the month" for n in range(8)]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as workers:
        for text in texts:
            a = workers.submit(_add_same, pg_url, text)
            b = workers.submit(_add_same, pg_url, text)
            assert a.result() == b.result(), text
    with mnemex.open(pg_url) as store:
        assert store.count() == len(texts)
        assert store.check()["ok"]


def _remember(url: str, text: str) -> str:
    with mnemex.open(url) as store:
        return store.remember(text).id


@postgres
@pytest.mark.slow
def test_two_writers_remembering_one_fact_at_once_end_with_one_memory(pg_url: str) -> None:
    """Near-duplicates (not the same text: the unique index cannot decide) written at
    once by two processes: the second waits for the first's write and merges into it."""
    texts = [f"the deploy key rotates on day {n} of the month" for n in range(6)]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as workers:
        for text in texts:
            a = workers.submit(_remember, pg_url, text)
            b = workers.submit(_remember, pg_url, text.capitalize() + ".")
            assert a.result() == b.result(), text
    with mnemex.open(pg_url) as store:
        assert store.count() == len(texts)
        merged = [m for m in store.iter_memories() if m.metadata.get("duplicates")]
        assert len(merged) == len(texts)
        assert {m.metadata["duplicates"][0]["by"] for m in merged} == {"text"}
        assert store.check()["ok"]


@postgres
@pytest.mark.parametrize(
    "between", ["the deploy key rotates on day 3 of the month", "The deploy key rotates on day 3."]
)
def test_a_repeat_stored_between_the_lookup_and_the_write_is_merged_into(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, between: str
) -> None:
    """The lookup runs beside other writers (the namespace's lock shared); under the lock
    the write compares the rows stored since: a repeat (the same text, or a near one)
    another writer stored in between is found there, and the new text merged into it.
    Another namespace's rows in between move the largest seq on and change nothing."""
    from mnemex.engine.postgres import dedup

    lock, lookup, calls = dedup.lock_namespace, dedup._lookup, []

    def another_writer_first(conn: object, namespace: str, *, shared: bool = False) -> None:
        if not shared and "between" not in calls:  # the lookup is done, the write not begun
            calls.append("between")
            with mnemex.open(pg_url, namespace="other") as elsewhere:
                elsewhere.add_many([f"an unrelated note number {n}" for n in range(3)])
            with mnemex.open(pg_url) as other:
                other.remember(between)
        lock(conn, namespace, shared=shared)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args[5] if len(args) > 5 else 0)
        return lookup(*args, **kwargs)  # type: ignore[arg-type]

    with mnemex.open(pg_url) as store:
        store.add_many([f"the backup runs at {n} o'clock" for n in range(20)])
        monkeypatch.setattr(dedup, "lock_namespace", another_writer_first)
        monkeypatch.setattr(dedup, "_lookup", counted)
        added = store.remember("the deploy key rotates on day 3 of the month")
        assert added.deduplicated, added
        # looked up among every row, then (after the other writer's lookup and recheck)
        # among the rows after the 20 it saw
        assert calls[:2] == [0, "between"] and calls[-1] == 20, calls
        assert store.count() == 21
        held = store.get([added.id]).memories[0]
        assert held.content == between
        assert store.check()["ok"]


@postgres
def test_writes_add_many_and_remember_decide_repeats_alike(pg_url: str) -> None:
    with mnemex.open(pg_url) as store:
        first = store.remember("Billing is owned by the payments team", tags=["org"])
        again = store.remember("Billing is owned by the payments team", tags=["team"])
        assert not first.deduplicated
        assert (again.id, again.deduplicated, again.by) == (first.id, True, "exact")
        memory = store.get(first.id).memories[0]
        assert memory.tags == ("org", "team")
        assert memory.metadata["duplicates"][0]["by"] == "exact"
        # Bulk writes never merge on SQLite; here a repeated text keeps one memory, and
        # the id returned for it is the stored one.
        ids = store.add_many(["a new fact", "Billing is owned by the payments team"])
        assert ids[1] == first.id and store.count() == 2
        # Without dedup a repeat is refused by the schema the same way: one memory.
        assert store.add("a new fact", dedup=False) == ids[0]
        assert [h.id for h in store.search("payments team billing", tags=["team"]).hits] == [
            first.id
        ]


@postgres
def test_a_repeat_in_a_later_statement_of_a_batch_is_the_first(pg_url: str) -> None:
    """A batch goes as several pipelined statements of ``PIPELINED`` rows in one
    transaction: a text repeated in a later one is the memory the earlier one wrote."""
    from mnemex.engine.postgres.write import PIPELINED

    texts = [f"note {n} on the topic of {n % 13} lanterns" for n in range(3 * PIPELINED)]
    texts[-1] = texts[1]
    with mnemex.open(pg_url) as store:
        ids = store.add_many(texts)
        assert ids[-1] == ids[1] and len(set(ids)) == len(texts) - 1
        assert store.count() == len(texts) - 1
        assert store.check()["ok"]


@postgres
def test_a_batch_is_one_statement_where_libpq_has_no_pipeline(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from mnemex.engine.postgres.write import PIPELINED

    def refused(self: object) -> None:
        raise psycopg.NotSupportedError("libpq 13: no pipeline mode")

    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    monkeypatch.setattr(psycopg.Connection, "pipeline", refused)
    texts = [f"note {n} about {n % 7} kettles" for n in range(2 * PIPELINED + 1)]
    with mnemex.open(pg_url) as store:
        ids = store.add_many(texts)
        assert [m.content for m in store.get(ids).memories] == texts
        assert store.check()["ok"]


@postgres
def test_hybrid_search_uses_pgvector(pg_url: str, fake_embedder: FakeEmbedder) -> None:
    with mnemex.open(pg_url, embedder=fake_embedder) as store:
        a = store.add("the invoice renderer embeds every font", kind="fact")
        b = store.add("users sign in with OIDC since the cutover")
        assert store.stats().vectors == 2 and store.stats().pending_vectors == 0
        for mode in ("vector", "hybrid"):
            found = store.search("invoice font", mode=mode, explain=True)
            assert found.mode_used == mode and found.hits[0].id == a, mode
            assert found.hits[0].explain is not None
            assert found.hits[0].explain["vector"]["rank"] == 1
        assert [h.id for h in store.search("OIDC", mode="vector", kinds=["fact"]).hits] == [a]
        assert store.search("sign in OIDC", mode="hybrid", mmr=True).hits[0].id == b
        store.update(b, content="users sign in with passkeys now")
        assert store.stats().vectors == 2  # the new text was embedded again
        report = store.embed(force=True)
        assert (report.embedded, report.pending) == (2, 0) and store.stats().vectors == 2


@postgres
def test_the_vector_arm_runs_beside_the_lexical_arm_in_the_search_snapshot(
    pg_url: str, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search runs its vector arm on a second connection of the pool while the
    lexical arm runs on its own, both in one snapshot: the answers are those of the arms
    one after the other on one connection, and a memory written after the search's
    snapshot was taken is not seen by the second connection."""
    import contextlib

    import numpy as np

    from mnemex.engine.postgres import retrieval, session
    from mnemex.engine.postgres.vectors import dim_and_counts, vector

    # A spare connection is taken if free within a millisecond; a busy machine can miss it
    monkeypatch.setattr(session, "SPARE_WAIT", 10.0)
    with mnemex.open(pg_url, embedder=fake_embedder) as store:
        store.add_many([f"note {n} on topic {n % 7}, the invoice font renderer" for n in range(60)])
        queries = ["invoice font", "topic 3 renderer", "note 12", "the renderer of topic 5"]
        seen: list[object] = []
        original = retrieval._beside

        def counted(conn: object, exported: str, *args: object, **kwargs: bool) -> object:
            seen.append(conn)
            return original(conn, exported, *args, **kwargs)

        monkeypatch.setattr(retrieval, "_beside", counted)

        def answers() -> list[list[tuple[str, float]]]:
            return [[(h.id, h.score) for h in store.search(q, mode="hybrid").hits] for q in queries]

        for query in queries:  # each query's vector kept: the next search has it at once
            store.search(query, mode="hybrid")
        seen.clear()
        beside = answers()
        assert len(seen) == len(queries)
        monkeypatch.setattr(store.session, "spare", lambda: contextlib.nullcontext(None))
        assert answers() == beside and len(seen) == len(queries)  # one connection: the same

        text = "a late memory about passkeys"
        qvec = np.asarray(fake_embedder.embed([text])[0])
        model = fake_embedder.model_id
        with store.session.read() as conn:  # the search's snapshot, taken here
            exported = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
            shape = dim_and_counts(conn, model, "default")
            with mnemex.open(pg_url, embedder=fake_embedder) as writer:  # committed meanwhile
                late = writer.add(text)
            with mnemex.engine.postgres.connect(pg_url) as other:
                row = other.execute("SELECT seq FROM memories WHERE id = %s", (late,)).fetchone()
                now = vector(other, qvec, "default", model, 5)
                hits = retrieval._beside(other, exported, qvec, "default", model, 5, shape)
        assert now[0].seq == row[0]  # the late memory is the nearest, seen in a new snapshot
        assert len(hits) == 5 and row[0] not in {h.seq for h in hits}  # not in the search's

        monkeypatch.undo()  # the pool's spare connection again; then a search that fails
        monkeypatch.setattr(retrieval.PostgresEngine, "exported", _export_fails)
        with pytest.raises(RuntimeError, match="export failed"):
            store.search(queries[0], mode="hybrid")
        assert _all_returned(store.session._pool)  # every connection given back


def _all_returned(pool: Any) -> bool:
    """Whether every connection of ``pool`` is back in it (the pool may still be growing:
    a connection being opened counts in its size before it is available)."""
    for _ in range(200):
        stats = pool.get_stats()
        if stats["pool_available"] == stats["pool_size"] and not stats.get("pool_connecting"):
            return True
        time.sleep(0.01)
    return False


def _export_fails(self: object) -> str:
    raise RuntimeError("export failed")


@postgres
def test_cli_searches_a_raw_expression(pg_url: str) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-m", "mnemex", "--db", pg_url, *args],
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    for text in ("postgres primary failover drill", "the drill of the primary failover"):
        assert cli("add", text).returncode == 0
    done = cli("search", '"failover drill" OR NEAR(primary drill, 0)', "--raw", "--json")
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)["hits"]
    assert [h["snippet"] for h in hits] == ["postgres primary **failover drill**"]
    done = cli("search", 'broken "(', "--raw")
    assert done.returncode == 1 and "invalid FTS5 query" in done.stderr, done.stderr


@postgres
def test_cli_reports_an_unreachable_server_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql://nobody@/nothing?host={tmp_path}"
    done = subprocess.run(
        [PYTHON, "-m", "mnemex", "--db", url, "stats"],
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


@postgres
def test_ann_off_compares_every_vector(
    pg_url: str, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a namespace past ``EXACT_MAX`` vectors is searched through pgvector's
    HNSW index; with ``ann = "off"`` every search, hybrid or vector, compares every vector
    (as on SQLite): its hits are the nearest memories (any of those tied)."""
    import numpy as np

    from mnemex.engine.postgres import vectors

    monkeypatch.setattr(vectors, "EXACT_MAX", 5)
    efs: list[int | None] = []
    original = vectors.run_search

    def spied(conn: Any, qvec: Any, query: Any, limit: int, ef: int | None) -> Any:
        efs.append(ef)
        return original(conn, qvec, query, limit, ef)

    monkeypatch.setattr(vectors, "run_search", spied)
    texts = [f"note {n} on topic {n % 7}, the invoice font renderer" for n in range(40)]
    queries = ["invoice font", "topic 3 renderer", "note 12"]
    for ann in ("auto", "off"):
        with mnemex.open(pg_url, embedder=fake_embedder, ann=ann) as store:
            if ann == "auto":
                store.add_many(texts)
            efs.clear()
            for q in queries:
                store.search(q, mode="hybrid", limit=5)
                hits = store.search(q, mode="vector", limit=5).hits
                if ann == "off":
                    vecs = fake_embedder.embed([q, *texts])
                    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                    cosine = dict(zip(texts, (vecs[1:] @ vecs[0]).tolist(), strict=True))
                    fifth = sorted(cosine.values(), reverse=True)[4]
                    assert len(hits) == 5
                    held = store.get([h.id for h in hits]).memories
                    assert all(cosine[m.content] >= fifth - 1e-6 for m in held)
            assert len(efs) == 2 * len(queries)
            assert all(ef is None for ef in efs) if ann == "off" else None not in efs
