"""A progress bar for long work, on standard error, only when it is a terminal; the
phases of work done in several (:func:`phase`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Progress = Callable[[str, int, int], None]  # (phase, done, total), as sync reports it


def phase(progress: Progress | None, name: str, total: int) -> Callable[[int], None] | None:
    """``advance(n)`` for the phase ``name`` of ``total`` items of ``progress``: reports
    ``(name, 0, total)`` now and ``(name, done so far, total)`` at each advance
    (``None`` without ``progress``)."""
    if progress is None:
        return None
    progress(name, 0, total)
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        done += count
        progress(name, done, total)

    return advance


@contextmanager
def progress_bar(
    total: int | None, label: str, enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; draws a rich progress bar when enabled and stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
