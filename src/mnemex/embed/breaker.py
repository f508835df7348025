"""A circuit breaker for embedding providers reached over the network.

After a provider fails (refused the connection, timed out, or kept answering
429/5xx), it is skipped for ``cooldown`` seconds, doubled for each failure in
a row up to :data:`MAX_COOLDOWN`: a call in that time raises
:class:`~mnemex.errors.ProviderDown` at once instead of waiting on it again.
The first failure is logged once, as a warning. The state is kept for the
process and, when a state file is given (next to the store), written there
too, so that the next command, a new process, skips the provider as well.
A success closes the breaker and removes the provider from the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path

from mnemex.config import EMBED_COOLDOWN as COOLDOWN
from mnemex.errors import ProviderDown
from mnemex.records import dataclass

logger = logging.getLogger("mnemex.embed")

MAX_COOLDOWN = 600.0


@dataclass(frozen=True)
class Failure:
    at: float  # time.time() of the failure
    until: float  # skipped until then
    failures: int  # failures in a row
    reason: str


_lock = threading.Lock()
_failures: dict[str, Failure] = {}  # this process's view, by provider key


def state_file(db_path: str | os.PathLike[str]) -> Path:
    """Where a store keeps the providers it found down."""
    return Path(f"{os.fspath(db_path)}.embed-state.json")


class Breaker:
    """The breaker of one provider (``key``, e.g. its URL without credentials)."""

    def __init__(self, key: str, cooldown: float = COOLDOWN, path: Path | None = None) -> None:
        self.key = key
        self.cooldown = cooldown
        self.path = path

    def check(self) -> None:
        """Raise :class:`ProviderDown` while the provider is skipped."""
        if self.cooldown <= 0:
            return
        failure = self._current()
        now = time.time()
        if failure is not None and now < failure.until:
            raise ProviderDown(
                f"skipping the embedder for {failure.until - now:.0f} s more: "
                f"{failure.reason} ({now - failure.at:.0f} s ago)"
            )

    def failed(self, reason: str, *, wait: float = 0.0) -> ProviderDown:
        """Record a failure; the error to raise. ``wait``: what the provider asked for."""
        if self.cooldown <= 0:
            return ProviderDown(reason)
        previous = self._current()
        now = time.time()
        failures = 1 if previous is None else previous.failures + 1
        cooldown = min(max(self.cooldown * 2 ** (failures - 1), wait), MAX_COOLDOWN)
        failure = Failure(at=now, until=now + cooldown, failures=failures, reason=reason)
        with _lock:
            _failures[self.key] = failure
            self._write(failure)
        if previous is None:  # said once: until the provider answers again
            logger.warning("%s; skipping it for %.3g s", reason, cooldown)
        return ProviderDown(f"{reason}; skipping it for {cooldown:.3g} s")

    def reset(self) -> None:
        """Forget the failures: the next call tries the provider (after it answered, or on
        an explicit request such as ``mnemex embed``)."""
        with _lock:
            known = _failures.pop(self.key, None)
            if known is not None or (self.path is not None and self.path.exists()):
                self._write(None)

    def _current(self) -> Failure | None:
        with _lock:
            mine = _failures.get(self.key)
        theirs = self._read().get(self.key)
        latest = theirs if mine is None or (theirs is not None and theirs.at > mine.at) else mine
        if latest is not None and time.time() > latest.until + MAX_COOLDOWN:
            return None  # long past: the next failure is a first one again
        return latest

    def _read(self) -> dict[str, Failure]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return {key: Failure(**value) for key, value in data.items()}
        except (OSError, ValueError, TypeError):  # absent, unreadable or damaged: no state
            return {}

    def _write(self, failure: Failure | None) -> None:
        """Put (or with ``None`` remove) this provider in the state file; best effort."""
        if self.path is None:
            return
        states = self._read()
        if failure is None:
            if states.pop(self.key, None) is None:
                return
        else:
            states[self.key] = failure
        temp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(OSError):  # a read-only folder: this process remembers alone
            if not states:
                self.path.unlink(missing_ok=True)
                return
            temp.write_text(
                json.dumps({key: asdict(value) for key, value in states.items()}),
                encoding="utf-8",
            )
            os.replace(temp, self.path)


def reset_all() -> None:
    """Forget every failure this process knows of (tests)."""
    with _lock:
        _failures.clear()
