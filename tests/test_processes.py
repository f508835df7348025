"""Several OS processes on one store: concurrent writers, a killed writer, a held lock."""

from __future__ import annotations

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
        applied = store.conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
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
    if not announced and store.conn.in_transaction:
        announced = True
        print("inside", flush=True)
    return 0
store.conn.set_progress_handler(inside, 20_000)
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
