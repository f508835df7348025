"""Several OS processes on one store: concurrent writers, a killed writer, a held lock."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

import mnemex
from mnemex import StoreLocked
from mnemex.storage.migrations import LATEST

from .conftest import PYTHON, python_env

pytestmark = pytest.mark.slow


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )


WRITER = """
import sys, time, mnemex
db, name, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = mnemex.open(db)
while time.time() < start:
    time.sleep(0.001)
for i in range(1000):
    store.add(f"process {name} wrote memory number {i} about the deploy queue", tags=[name], dedup=False)
store.close()
print("done")
"""


def test_two_processes_add_1000_each(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    mnemex.open(db).close()  # create the schema once, like a first run would
    start = str(time.time() + 1.0)
    procs = [spawn(WRITER, str(db), name, start) for name in ("alpha", "beta")]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert out.strip() == "done"
    with mnemex.open(db) as store:
        assert store.count() == 2000
        assert len(store.timeline(tags=["alpha"], limit=1000)) == 1000
        assert len(store.timeline(tags=["beta"], limit=1000)) == 1000
        report = store.check()
        assert report["ok"], report["problems"]


def test_two_processes_create_the_store_at_once(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    start = str(time.time() + 1.0)
    procs = [spawn(WRITER, str(db), name, start) for name in ("one", "two")]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with mnemex.open(db) as store:
        assert store.count() == 2000
        applied = store.session.conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
        assert applied == LATEST


KILLED = """
import sys, mnemex
db = sys.argv[1]
store = mnemex.open(db)
store.add_many([f"baseline memory {i}" for i in range(100)])
items = [f"batch memory {i} with some words to index" for i in range(200_000)]
announced = False
def inside():
    global announced
    if not announced and store.session.conn.in_transaction:
        announced = True
        print("inside", flush=True)
    return 0
store.session.conn.set_progress_handler(inside, 20_000)
store.add_many(items)
print("finished", flush=True)
"""


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_sigkill_during_add_many_leaves_all_or_nothing(tmp_path: Path, delay: float) -> None:
    db = tmp_path / "killed.db"
    proc = spawn(KILLED, str(db))
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "inside", proc.stderr.read() if proc.stderr else ""
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with mnemex.open(db) as store:
        count = store.count()
        assert count in (100, 100 + 200_000)
        assert count == 100  # killed before the commit
        report = store.check()
        assert report["ok"], report["problems"]
        ident = store.add("written after the crash")
        assert [h.id for h in store.search("crash").hits] == [ident]


HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO meta (key, value) VALUES ('held', '1')")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
print("released", flush=True)
"""


def test_locked_store_waits_then_errors_clearly(tmp_path: Path) -> None:
    db = tmp_path / "locked.db"
    mnemex.open(db).close()
    holder = spawn(HOLDER, str(db), "3")
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    try:
        with mnemex.open(db, busy_timeout=0.5) as store:
            started = time.monotonic()
            with pytest.raises(StoreLocked, match="locked by another process") as info:
                store.add("blocked write")
            waited = time.monotonic() - started
            assert waited >= 0.45
            assert "MNEMEX_BUSY_TIMEOUT" in str(info.value)
            # Reads are not blocked by a writer in WAL mode.
            assert store.search("anything").hits == ()
    finally:
        holder.communicate(timeout=30)
    with mnemex.open(db) as store:
        store.add("after the lock")
        assert store.count() == 1


def test_locked_store_waits_for_a_short_lock(tmp_path: Path) -> None:
    db = tmp_path / "brief.db"
    mnemex.open(db).close()
    holder = spawn(HOLDER, str(db), "0.5")
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    try:
        with mnemex.open(db, busy_timeout=10) as store:
            store.add("waited for the lock")
            assert store.count() == 1
    finally:
        holder.communicate(timeout=30)


BULK = """
import sys, time, mnemex
db, name, start, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
store = mnemex.open(db)
while time.time() < start:
    time.sleep(0.001)
written = 0
while time.time() < start + seconds:
    store.add_many([f"bulk {name} row {written + i} of the nightly import" for i in range(500)])
    written += 500
store.close()
print(written)
"""

SINGLE = """
import json, sys, time, mnemex
db, name, start, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
store = mnemex.open(db)
while time.time() < start:
    time.sleep(0.001)
latencies, ids, errors = [], [], []
while time.time() < start + seconds:
    began = time.monotonic()
    try:
        added = store.remember(f"agent {name} noted fact {len(ids)} about the deploy queue")
    except mnemex.MnemexError as exc:
        errors.append(str(exc))
        continue
    latencies.append(time.monotonic() - began)
    ids.append(added.id)
store.close()
print(json.dumps({"latencies": latencies, "ids": ids, "errors": errors}))
"""


def test_a_single_writer_makes_steady_progress_beside_bulk_writers(tmp_path: Path) -> None:
    db = tmp_path / "contended.db"
    mnemex.open(db).close()
    seconds = 8.0
    start = str(time.time() + 1.5)
    bulk = [spawn(BULK, str(db), name, start, str(seconds)) for name in ("b1", "b2")]
    single = spawn(SINGLE, str(db), "s1", start, str(seconds))
    written = 0
    for proc in bulk:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        written += int(out)
    out, err = single.communicate(timeout=300)
    assert single.returncode == 0, err
    result = json.loads(out)
    assert result["errors"] == []
    latencies = result["latencies"]
    # Before writers took turns, a single writer here managed about 2 writes a
    # second and waited up to 25 s for one; now it waits for one bulk batch at most.
    assert len(latencies) >= 40, latencies
    assert max(latencies) < 3.0, sorted(latencies)[-5:]
    with mnemex.open(db) as store:
        assert store.count() == written + len(result["ids"])  # nothing lost, nothing twice
        assert len(store.get(result["ids"]).memories) == len(set(result["ids"]))
        report = store.check()
        assert report["ok"], report["problems"]


SAME_FACTS = """
import json, random, sys, time, mnemex
db, name, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = mnemex.open(db)
facts = [f"the staging database {n} runs on port {5400 + n}" for n in range(30)]
random.Random(name).shuffle(facts)
while time.time() < start:
    time.sleep(0.001)
print(json.dumps({fact: store.remember(fact).id for fact in facts}))
"""


def test_processes_remembering_the_same_facts_at_once_keep_one_memory_each(
    tmp_path: Path,
) -> None:
    db = tmp_path / "same.db"
    mnemex.open(db).close()
    start = str(time.time() + 1.5)
    procs = [spawn(SAME_FACTS, str(db), name, start) for name in ("p1", "p2", "p3", "p4")]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        answers.append(json.loads(out))
    with mnemex.open(db) as store:
        assert store.count() == 30
        stored = {m.content: m.id for m in store.iter_memories()}
    for answer in answers:
        assert answer == stored  # every process got the one memory's id


def test_reindex_force_beside_a_writer(tmp_path: Path) -> None:
    db = tmp_path / "reindexed.db"
    with mnemex.open(db) as store:
        store.add_many([f"seed memory {i} about the release train" for i in range(5_000)])
    seconds = 8.0
    start = str(time.time() + 1.0)
    writer = spawn(SINGLE, str(db), "w1", start, str(seconds))
    time.sleep(1.5)
    runs = []
    while time.time() < float(start) + seconds - 1:
        runs.append(
            subprocess.run(
                [PYTHON, "-m", "mnemex", "--db", str(db), "reindex", "--force"],
                capture_output=True,
                text=True,
                env=python_env(),
                timeout=120,
            )
        )
    out, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, err
    result = json.loads(out)
    assert result["errors"] == [] and result["ids"]
    assert runs and all(run.returncode == 0 for run in runs), [r.stderr for r in runs]
    with mnemex.open(db) as store:
        assert store.count() == 5_000 + len(result["ids"])
        report = store.check()
        assert report["ok"], report["problems"]


QUEUED = """
import fcntl, sys, time
with open(sys.argv[1] + "-writers", "a") as queue:
    fcntl.flock(queue, fcntl.LOCK_EX)
    print("queued", flush=True)
    time.sleep(float(sys.argv[2]))
print("released", flush=True)
"""


def test_a_wait_in_the_writer_queue_ends_clearly(tmp_path: Path) -> None:
    db = tmp_path / "queued.db"
    mnemex.open(db).close()
    holder = spawn(QUEUED, str(db), "3")
    assert holder.stdout is not None and holder.stdout.readline().strip() == "queued"
    try:
        with mnemex.open(db, busy_timeout=0.5) as store:
            started = time.monotonic()
            with pytest.raises(StoreLocked, match="locked by another process"):
                store.add("blocked write")
            assert time.monotonic() - started >= 0.45
            assert store.count() == 0
    finally:
        holder.communicate(timeout=30)
    with mnemex.open(db, busy_timeout=0.5) as store:  # the abandoned wait left nothing held
        store.add("after the queue")
        assert store.count() == 1


MEASURED = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdin=sys.stdin, capture_output=True, text=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # KiB, its one child's peak
print(done.returncode)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
"""


@pytest.mark.model
@pytest.mark.parametrize("size", [512 * 1024])
def test_a_memory_at_a_raised_size_limit_is_added_in_bounded_memory_with_progress(
    tmp_path: Path, size: int
) -> None:
    """`mnemex add` of a memory at the limit (max_content_bytes raised) peaks at 300 MB plus
    ten times its size, says how far embedding it is, and is found by both arms."""
    import random

    words = Path(__file__).read_text(encoding="utf-8").split()
    rng = random.Random(7)
    text = " ".join(rng.choice(words) for _ in range(size // 4))[:size]
    text = text + "x" * (size - len(text.encode()))  # exactly at the limit
    env = {**python_env(), "MNEMEX_HOME": str(tmp_path / "home"), "MNEMEX_EMBEDDER": "local"}
    env["MNEMEX_MAX_CONTENT_BYTES"] = str(size)
    db = str(tmp_path / "big.db")
    mnemex_cli = [PYTHON, "-m", "mnemex", "--db", db]
    subprocess.run([*mnemex_cli, "add", "a small memory first"], env=env, check=True, timeout=120)
    run = subprocess.run(
        [PYTHON, "-c", MEASURED, *mnemex_cli, "add", "-"],
        input=text,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    peak_kib, code, ident = run.stdout.split()[:3]
    assert code == "0", run.stderr
    print(f"peak RSS of a {size:,}-byte add: {int(peak_kib) / 1024:.0f} MiB")
    assert int(peak_kib) * 1024 <= 300e6 + 10 * size, (int(peak_kib) / 1024, run.stderr)
    assert "windows of long text" in run.stderr  # progress, then
    with mnemex.open(db, embedder="local") as store:
        assert store.stats().pending_vectors == 0
        assert store.get(ident).memories[0].content == text
    too_big = subprocess.run(
        [*mnemex_cli, "add", "-"], input=text + "y", env=env, capture_output=True, text=True
    )
    assert too_big.returncode == 1 and "raise max_content_bytes" in too_big.stderr


_BLAS = """
import json
import numpy
from threadpoolctl import threadpool_info
from mnemex.workers import one_blas_thread

def threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

before = threads()
limiter = one_blas_thread()
during = threads()
limiter.restore_original_limits()
print(json.dumps([before, during, threads(), type(limiter).__name__]))
"""


@pytest.mark.parametrize("env_threads", [None, "1", "2"])
def test_the_vector_arm_limits_blas_to_one_thread(env_threads: str | None) -> None:
    """One BLAS thread while the vector arm runs: left as it is when OpenBLAS was loaded
    with one thread already (a hook, a command typed in a shell), limited and restored
    otherwise."""
    env = python_env()
    env.pop("OPENBLAS_NUM_THREADS", None)
    if env_threads is not None:
        env["OPENBLAS_NUM_THREADS"] = env_threads
    done = subprocess.run(
        [PYTHON, "-c", _BLAS], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    before, during, after, kind = json.loads(done.stdout)
    assert before and during == [1] * len(before) and after == before
    if env_threads == "1":
        assert kind == "_NoLimit" and before == [1] * len(before)
    else:  # threadpoolctl's limiter
        assert kind != "_NoLimit"
    if env_threads == "2":
        assert before == [2] * len(before)
