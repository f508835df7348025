"""The local model folded in the background, for the commands typed in a shell.

A command that embeds a text or two (``mnemex search``, ``add``, ``recall``) loads the
local model's folded copy when the data folder holds one
(:func:`mnemex.embed.local.folded_session`), and never folds it itself: folding costs
about a second, more than the command. When it had to load the model unfolded, it hands
the folding to a background process as it exits (:func:`later`), so that the commands
after it load the folded copy, which loads faster (docs/install.md, "Where things are").
``python -m mnemex.embed.fold HOME`` is that process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mnemex.embed.local import FOLDED_STALE_SECONDS, MODEL_NAME

if TYPE_CHECKING:
    from mnemex.embed.local import LocalEmbedder


def needed(embedder: LocalEmbedder, folder: Path) -> bool:
    """Whether ``embedder`` ran the model unfolded, no folded copy is in ``folder`` or
    being written there (by another process, for less than the time after which such a
    folder counts as abandoned), and ``folder`` can be written (or made)."""
    if embedder.session is None or embedder.saved_cache is not None or embedder.optimize:
        return False
    try:
        names = os.listdir(folder)
    except OSError:  # none yet: made where it can be written
        return os.access(_existing(folder), os.W_OK)
    for name in names:
        if name.startswith(f"{MODEL_NAME}-") and not name.endswith("-optimized"):
            return False
        if name.startswith(f".{MODEL_NAME}-") and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                if time.time() - (folder / name).stat().st_mtime < FOLDED_STALE_SECONDS:
                    return False
    return os.access(folder, os.W_OK)


def _existing(path: Path) -> Path:
    """``path``, or its nearest folder that exists."""
    for folder in (path, *path.parents):
        if folder.exists():
            return folder
    return path


def later(home: Path) -> None:
    """Start ``python -m mnemex.embed.fold home`` in the background, detached from this
    process (which may exit at once) and from its terminal; never raises."""
    import subprocess

    with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
        subprocess.Popen(
            [sys.executable, "-m", "mnemex.embed.fold", str(home)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "MNEMEX_HOME": str(home)},
        )


def main(argv: list[str]) -> int:
    """Fold the local model into the data folder ``argv[0]``, at a low priority."""
    from mnemex.embed import CHECKSUM_FILE, FOLDED_FOLDER
    from mnemex.embed.local import LocalEmbedder

    with contextlib.suppress(OSError, AttributeError):
        os.nice(10)  # the commands a person types come first
    home = Path(argv[0]).expanduser()
    embedder = LocalEmbedder(
        threads=1,
        optimize=False,
        checksum_cache=home / CHECKSUM_FILE,
        saved_cache=home / FOLDED_FOLDER,
    )
    try:
        embedder.load()
    except Exception:  # nothing to report to: the next command folds again
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a process by the tests
    raise SystemExit(main(sys.argv[1:]))
