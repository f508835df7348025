"""The pipeline's worker threads: results, errors, time limits, cancelling a waiting call."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from mnemex.workers import Workers
from tests.conftest import SRC


def test_result_error_and_time_limit() -> None:
    workers = Workers(2, "test")
    assert workers.submit(lambda a, b=0: a + b, 2, b=3).result(timeout=10) == 5
    failing = workers.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=10)
    assert failing.done()
    release = threading.Event()
    slow = workers.submit(release.wait, 10)
    with pytest.raises(TimeoutError):
        slow.result(timeout=0.05)
    assert not slow.done() and not slow.cancel()  # running: it cannot be cancelled
    release.set()
    assert slow.result(timeout=10) is True


def test_a_waiting_call_is_cancelled_and_never_runs() -> None:
    workers = Workers(1, "test")
    release = threading.Event()
    ran: list[str] = []
    busy = workers.submit(release.wait, 10)
    waiting = workers.submit(ran.append, "ran")
    assert waiting.cancel() and waiting.cancel() and waiting.done()
    release.set()
    busy.result(timeout=10)
    workers.submit(lambda: None).result(timeout=10)  # the worker has gone past it
    assert ran == []
    with pytest.raises(RuntimeError, match="cancelled"):
        waiting.result()


def test_exit_waits_for_a_running_call() -> None:
    code = (
        "import time; from mnemex.workers import Workers\n"
        "w = Workers(1, 't'); w.submit(lambda: (time.sleep(0.3), print('finished', flush=True)))\n"
        "time.sleep(0.05)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
        timeout=60,
    )
    assert done.stdout.strip() == "finished", done.stderr
