"""Worker threads for search: the query's embedding and SQLite's vector arm
(:func:`query_pool`), and a limit of the BLAS library to one thread.

What the pipeline needs of :mod:`concurrent.futures` (submit a call, wait for its
result with a time limit, cancel it while it waits), without importing it:
``concurrent.futures`` imports ``logging``, which a hook process, started for
one prompt, would load for nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from queue import SimpleQueue

T = TypeVar("T")

_WAITING, _RUNNING, _CANCELLED = "waiting", "running", "cancelled"


class Job(Generic[T]):
    """A call submitted to :class:`Workers`: its result, once a worker has run it."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._state = _WAITING
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def run(self) -> None:
        with self._lock:
            if self._state == _CANCELLED:
                return
            self._state = _RUNNING
        try:
            self._value = self._call()
        except BaseException as exc:
            self._error = exc
        finally:
            self._finished.set()

    def done(self) -> bool:
        return self._finished.is_set()

    def wait(self) -> None:
        self._finished.wait()

    def cancel(self) -> bool:
        """Never run it, if no worker has started it (``True``); ``False`` otherwise."""
        with self._lock:
            if self._state != _WAITING:
                return self._state == _CANCELLED
            self._state = _CANCELLED
        self._finished.set()
        return True

    def result(self, timeout: float | None = None) -> T:
        """What the call returned (or raise what it raised); :class:`TimeoutError` when it
        has not finished within ``timeout`` seconds."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"not done within {timeout} s")
        if self._state == _CANCELLED:
            raise RuntimeError("the job was cancelled")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[no-any-return]


_pools: list[Workers] = []  # every pool of the process


def idle() -> bool:
    """Whether no call submitted to a pool of this process is unfinished (a process that
    ends with ``os._exit`` cuts none off mid-way: an embedder's request past the search's
    time limit still records its endpoint as slow)."""
    return not any(pool.busy() for pool in _pools)


class Workers:
    """``size`` daemon threads running submitted calls in order. At the interpreter's exit
    the calls running are waited for and the waiting ones cancelled, as
    :class:`concurrent.futures.ThreadPoolExecutor` does (no call is cut off mid-way)."""

    def __init__(self, size: int, name: str) -> None:
        import atexit
        import queue  # here: a lexical search starts no worker

        self._queue: SimpleQueue[Job[Any]] = queue.SimpleQueue()
        self._jobs: set[Job[Any]] = set()  # submitted, not finished
        self._lock = threading.Lock()
        for index in range(size):
            threading.Thread(target=self._work, name=f"{name}_{index}", daemon=True).start()
        atexit.register(self._drain)
        _pools.append(self)

    def busy(self) -> bool:
        with self._lock:
            return any(not job.done() for job in self._jobs)

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Job[T]:
        job = Job(lambda: fn(*args, **kwargs))
        with self._lock:
            self._jobs.add(job)
        self._queue.put(job)
        return job

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            job.run()
            with self._lock:
                self._jobs.discard(job)
            del job  # a thread waiting for the next holds nothing of the last (a closed store)

    def _drain(self) -> None:
        with self._lock:
            jobs = list(self._jobs)
        for job in jobs:
            if not job.cancel():
                job.wait()


_pool: Workers | None = None
_pool_lock = threading.Lock()


def query_pool() -> Workers:
    """The workers that embed the query and run the vector arm (made on first use: a
    lexical search, as in a hook process, starts no thread)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Workers(2, "mnemex-query")
        return _pool


_blas: Any = None


class _NoLimit:
    """The limiter of a BLAS library that runs one thread already: nothing to restore."""

    def restore_original_limits(self) -> None:
        pass


def one_blas_thread() -> Any:
    """Limit the BLAS library to one thread (threadpoolctl) until the returned
    limiter's ``restore_original_limits()``."""
    global _blas
    if _one_thread_already():
        return _NoLimit()
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")


def _one_thread_already() -> bool:
    """Whether numpy's BLAS runs one thread already: OpenBLAS with ``OPENBLAS_NUM_THREADS=1``
    (a hook process and a command typed in a shell set it before numpy loads:
    :func:`mnemex.hooks.run.quiet_blas`). Then threadpoolctl is not needed: its import and
    its scan of the process's libraries cost such a process a few milliseconds."""
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        return False
    config = getattr(sys.modules.get("numpy.__config__"), "CONFIG", None)
    if not isinstance(config, dict):
        return False
    blas = config.get("Build Dependencies", {}).get("blas", {})
    return "openblas" in str(blas.get("name", "")).lower()


def wait_quietly(job: Job[Any]) -> None:
    """Let a worker finish before its inputs go away (its error, if any, is already raised)."""
    with contextlib.suppress(Exception):
        job.result()
