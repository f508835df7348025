"""A PostgreSQL 16 server with pgvector on this machine, from the ``pgserver`` package.

For tests, benchmarks and trying the engine out: ``pgserver`` ships the
server binaries and pgvector in its wheel, so no system package, container
or network is needed. Run as root, it runs the server as a ``pgserver``
system user that it creates. The server listens on a Unix socket only.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from mnemex.errors import MissingExtra
from mnemex.records import dataclass


@dataclass(frozen=True, slots=True)
class LocalServer:
    """A running server: its URL (database ``postgres``) and data folder."""

    url: str
    data: Path
    handle: Any

    def url_for(self, database: str) -> str:
        return str(self.handle.get_uri(database))

    def stop(self) -> None:
        """Stop the server (its data folder stays unless it was started with ``delete``)."""
        self.handle.cleanup()


def load_pgserver() -> Any:
    """The ``pgserver`` module, or :class:`MissingExtra` naming the extra to install."""
    try:
        with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR, so /tmp is used
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        raise MissingExtra("postgres", "a local PostgreSQL server", "pgserver") from None
    return pgserver


def start(data: Path, *, delete: bool = False) -> LocalServer:
    """Start (or reuse) the server whose data folder is ``data``; its parent must exist."""
    pgserver = load_pgserver()
    handle = pgserver.get_server(data, cleanup_mode="delete" if delete else "stop")
    return LocalServer(str(handle.get_uri()), data, handle)
