"""``mnemex watch``: keep a workspace synced while its files change (needs ``watchdog``).

The folder is synced once, then watched recursively. An event on a file the
workspace's patterns select, or on a folder being created, moved or deleted,
marks the workspace dirty; once no such event has come for ``debounce``
seconds (1.5 by default) it is synced, and the sync is logged. A sync also
runs every ``poll`` seconds (60) whatever the events said, so an event the
operating system dropped (an overflowing inotify queue, a network file
system) delays an update but cannot lose it.

The watcher never dies silently. A file that vanishes mid-read, is not
UTF-8 or cannot be read is a problem of that sync (logged as a warning); any
other error is logged with its traceback and watching goes on; an observer
thread that died is started again; a missing folder is waited for.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.errors import MissingExtra
from mnemex.ingest import files
from mnemex.ingest import workspace as spaces
from mnemex.results import SyncReport

if TYPE_CHECKING:
    from mnemex.engine.sqlite.session import SqliteSession

logger = logging.getLogger("mnemex.watch")

POLL_SECONDS = 60.0  # a sync at least this often, events or not
TICK_SECONDS = 0.1  # how often the loop looks at the clock and the stop flag
MAX_BACKOFF = 30.0  # seconds between attempts while syncs keep failing


class _Changes:
    """What the observer thread tells the loop: when the last relevant event came."""

    def __init__(self, root: str, globs: tuple[str, ...], ignore: tuple[str, ...]) -> None:
        self.root = root
        self.globs = globs
        self.ignore = ignore
        self.lock = threading.Lock()
        self.last: float | None = None  # monotonic time of the last relevant event

    def relevant(self, path: str, folder: bool) -> bool:
        try:
            relative = Path(os.fsdecode(path)).relative_to(self.root).as_posix()
        except ValueError:
            return False
        if relative == ".":
            return False
        if folder:
            return not files.ignored(relative, self.ignore, folder=True)
        return files.matches(relative, self.globs) and not files.ignored(relative, self.ignore)

    def event(self, event: Any) -> None:
        """Called on the observer's thread for every file system event."""
        folder = bool(event.is_directory)
        if folder and event.event_type in ("modified", "opened", "closed", "closed_no_write"):
            return  # a folder's mtime moves whenever a file in it does: the file's event counts
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = [event.src_path, getattr(event, "dest_path", "") or ""]
        if any(p and self.relevant(p, folder) for p in paths):
            self.mark()

    def mark(self) -> None:
        with self.lock:
            self.last = time.monotonic()

    def due(self, debounce: float) -> bool:
        """Whether there were changes and ``debounce`` seconds have passed since the last."""
        with self.lock:
            if self.last is None or time.monotonic() - self.last < debounce:
                return False
            self.last = None
            return True


def watch(
    session: SqliteSession,
    directory: str | os.PathLike[str],
    namespace: str,
    *,
    debounce: float | None = None,
    stop: threading.Event | None = None,
    on_sync: Callable[[SyncReport], None] | None = None,
    poll: float = POLL_SECONDS,
) -> None:
    """Sync ``directory`` (a workspace of ``namespace``) now and after every change until
    ``stop`` is set (or Ctrl-C)."""
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        raise MissingExtra("watch", "mnemex watch", "watchdog") from None

    stop = stop or threading.Event()
    debounce = session.settings.watch_debounce if debounce is None else debounce
    first = spaces.sync_folder(session, directory, namespace, None, None)
    reported: set[tuple[str, str]] = set()
    _log(first, "initial sync", reported)
    if on_sync is not None:
        on_sync(first)
    with session.connection() as conn:
        ws = spaces.find(session, conn, first.workspace, first.namespace)
    assert ws is not None
    changes = _Changes(ws.root, ws.globs, ws.ignore)

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            changes.event(event)

    def start() -> Any:
        observer = Observer()
        observer.schedule(Handler(), ws.root, recursive=True)
        observer.daemon = True
        observer.start()
        return observer

    observer: Any = None
    next_poll = time.monotonic() + poll
    backoff = 1.0  # seconds to wait after an error, doubling while errors repeat
    logger.info("watching %s (namespace %s), debounce %.1f s", ws.root, ws.namespace, debounce)
    try:
        while not stop.is_set():
            try:
                if observer is None or not observer.is_alive():
                    if observer is not None:
                        logger.error("the file watcher stopped; starting it again")
                    observer = start()
                    changes.mark()  # sync what changed while nothing watched
                changed = changes.due(debounce)
                if changed or time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + poll
                    report = spaces.sync(session, ws, retry=True, record=False)
                    if changed or report.touched:
                        _log(report, "sync", reported)
                    if on_sync is not None:
                        on_sync(report)
                backoff = 1.0
            except FileNotFoundError:
                logger.error("the workspace folder %s is missing; waiting for it", ws.root)
                _stopped(observer)
                observer = None
                stop.wait(backoff)
                backoff = min(2 * backoff, MAX_BACKOFF)
            except Exception:
                logger.exception("sync of %s failed; still watching", ws.root)
                changes.mark()  # try again
                stop.wait(backoff)
                backoff = min(2 * backoff, MAX_BACKOFF)
            stop.wait(TICK_SECONDS)
    except KeyboardInterrupt:
        logger.info("stopped watching %s", ws.root)
    finally:
        _stopped(observer)


def _stopped(observer: Any) -> None:
    if observer is not None:
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=5)


def _log(report: SyncReport, what: str, reported: set[tuple[str, str]]) -> None:
    """Log a sync, and each file problem once (until it goes away and comes back)."""
    counts = "added changed renamed deleted files chunks chunks_added chunks_removed embedded"
    logger.info(
        "%s of %s: %d added, %d changed, %d renamed, %d deleted; %d files, %d chunks "
        "(+%d -%d), %d embedded, in %.0f ms",
        what,
        report.workspace,
        *(getattr(report, name) for name in counts.split()),
        report.took_ms,
    )
    current = {(p.path, p.message) for p in report.problems}
    for path, message in sorted(current - reported):
        logger.warning("%s: %s", path, message)
    reported.intersection_update(current)
    reported.update(current)
