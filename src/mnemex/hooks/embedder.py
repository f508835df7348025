"""Embedding after capture, in a background process: one per store at a time.

``python -m mnemex.hooks.embedder DB`` takes an exclusive lock on
``DB.embed.lock`` (or exits at once when another process holds it), then
embeds the memories without vectors until none is left, so memories captured
while it ran are embedded too. For a PostgreSQL store the URL comes in
``MNEMEX_DB`` (not on the command line, where any user could read a password)
and the lock is a file in the data folder named by a digest of the URL.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MAX_ROUNDS = 20


def lock_path(db: str | os.PathLike[str]) -> Path:
    text = str(db)
    if text.startswith(("postgresql://", "postgres://")):
        import hashlib

        from mnemex.config import default_home

        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return default_home() / f"embed-{digest}.lock"
    return Path(f"{text}.embed.lock")


def running(db: str | os.PathLike[str]) -> bool:
    """Whether a background embedder holds the store's lock now."""
    import fcntl

    try:
        with open(lock_path(db), "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def main(db: str) -> None:
    import fcntl

    from mnemex.store import ALL, open_store

    with open(lock_path(db), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        with open_store(db) as store:
            for _ in range(MAX_ROUNDS):
                if store.stats(namespace=ALL).pending_vectors == 0:
                    break
                store.embed()


if __name__ == "__main__":  # pragma: no cover - started by mnemex.hooks.run.embed_later
    try:
        main(sys.argv[1] if len(sys.argv) > 1 else os.environ["MNEMEX_DB"])
    except Exception as exc:
        from mnemex.hooks.log import log

        log(None, {"hook_event_name": "embed"}, f"{type(exc).__name__}: {exc}")
