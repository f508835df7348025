"""`mnemex watch`: a real watchdog observer sees files change; errors never stop it."""

from __future__ import annotations

import json
import logging
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemex import MissingExtra
from mnemex.results import SyncReport
from mnemex.store import Store
from tests.conftest import PYTHON, python_env
from tests.pg_fixtures import both_engines

WAIT = 30.0  # seconds to wait for a sync the test caused (the machine may be busy)


class Watcher:
    """``store.watch`` on a thread, its sync reports on a queue."""

    def __init__(self, store: Store, root: Path, debounce: float = 0.3) -> None:
        self.reports: queue.Queue[SyncReport] = queue.Queue()
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=store.watch,
            args=(root,),
            kwargs={"debounce": debounce, "stop": self.stop, "on_sync": self.reports.put},
            daemon=True,
        )
        self.thread.start()
        self.first = self.reports.get(timeout=WAIT)

    def until(self, check: Callable[[SyncReport], bool]) -> SyncReport:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                report = self.reports.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if check(report):
                return report
        raise AssertionError("the watcher did not sync the change in time")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "agent"
    (folder / "memory").mkdir(parents=True)
    (folder / "MEMORY.md").write_text("# Lasting\n\nWe deploy on Fridays.\n", encoding="utf-8")
    return folder


@pytest.fixture
def watcher(make_store: Callable[..., Store], root: Path) -> Iterator[Watcher]:
    store = make_store("watch.db", sync_on_search=False)  # only the watcher syncs
    running = Watcher(store, root)
    running.store = store  # type: ignore[attr-defined]
    yield running
    running.close()


@pytest.mark.slow
@both_engines
def test_the_watcher_sees_files_change(watcher: Watcher, root: Path) -> None:
    store: Store = watcher.store  # type: ignore[attr-defined]
    assert watcher.first.files == 1 and watcher.first.chunks == 1
    (root / "memory/2025-11-27.md").write_text("# Day\n\nThe pager moved to Mondays.\n")
    report = watcher.until(lambda r: r.added == 1)
    assert report.files == 2
    hit = store.search("pager mondays").hits[0]
    assert hit.location is not None and hit.location.path == "memory/2025-11-27.md"

    # a bad file is reported and skipped; the watcher goes on
    (root / "memory/bad.md").write_bytes(b"# Bad\n\n\xff\xfe\n")
    report = watcher.until(lambda r: any(p.path == "memory/bad.md" for p in r.problems))
    (root / "memory/2025-11-27.md").write_text("# Day\n\nThe pager moved to Tuesdays.\n")
    watcher.until(lambda r: r.changed == 1)
    assert store.search("pager tuesdays").hits and not store.search("mondays").hits

    # deleted, and a folder of notes moved in
    (root / "memory/2025-11-27.md").unlink()
    watcher.until(lambda r: r.deleted == 1)
    outside = root.parent / "incoming"
    outside.mkdir()
    (outside / "a.md").write_text("# A\n\nkubernetes upgrade notes\n")
    outside.rename(root / "memory" / "incoming")
    watcher.until(lambda r: r.added == 1)
    assert store.search("kubernetes").hits[0].location.path == "memory/incoming/a.md"  # type: ignore[union-attr]
    assert store.check()["ok"]


@pytest.mark.slow
def test_an_unexpected_error_is_logged_and_watching_goes_on(
    make_store: Callable[..., Store], root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store("locked.db", busy_timeout=0.2, sync_on_search=False)
    running = Watcher(store, root)
    try:
        blocker = sqlite3.connect(store.path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with caplog.at_level(logging.ERROR, logger="mnemex.watch"):
            (root / "memory/2025-11-28.md").write_text("# Day\n\nlocked out at first\n")
            deadline = time.monotonic() + WAIT
            while "still watching" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.1)
        assert "sync of" in caplog.text and "is locked" in caplog.text
        assert running.thread.is_alive()
        blocker.execute("ROLLBACK")
        blocker.close()
        running.until(lambda r: r.added == 1)
        assert store.search("locked out").hits
    finally:
        running.close()


@both_engines
def test_watch_names_the_extra_when_watchdog_is_missing(
    store: Store, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "watchdog.observers", None)
    with pytest.raises(MissingExtra, match=r"mnemex\[watch\]"):
        store.watch(root, stop=threading.Event())


@pytest.mark.slow
@both_engines
def test_mnemex_watch_process(root: Path, store_place: Callable[[str], Any]) -> None:
    db = str(store_place("proc.db"))
    env = {**python_env(), "MNEMEX_SYNC_ON_SEARCH": "false"}
    watching = subprocess.Popen(
        [PYTHON, "-m", "mnemex", "--db", db, "watch", str(root), "--debounce", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(watching.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + WAIT
        while not any("watching" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        saved = time.monotonic()
        (root / "memory/2025-11-29.md").write_text("# Day\n\nthe saved note\n")
        found: list[object] = []
        while not found and time.monotonic() < deadline:
            time.sleep(0.1)
            out = subprocess.run(
                [PYTHON, "-m", "mnemex", "--db", db, "search", "saved note", "--json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            if out.returncode == 0:
                found = json.loads(out.stdout)["hits"]
        assert found, "".join(lines)
        assert time.monotonic() - saved < WAIT
    finally:
        watching.send_signal(signal.SIGTERM)
        watching.wait(timeout=30)
        reader.join(timeout=10)
    err = "".join(lines)
    assert watching.returncode == 0, err
    assert "initial sync of" in err and "1 added" in err.split("watching", 1)[1]
