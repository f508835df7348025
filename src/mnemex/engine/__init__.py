"""Storage engines: the session each store talks to (SQLite today), and what every
engine shares: the namespace marker :data:`ALL` and the ``mnemex`` logger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import logging


class _AllNamespaces:
    def __repr__(self) -> str:
        return "mnemex.ALL"


ALL: Final = _AllNamespaces()
"""Pass as ``namespace=`` to read across every namespace (search, timeline, stats, export)."""
NamespaceArg = str | _AllNamespaces | None


def logger() -> logging.Logger:
    """The ``mnemex`` logger (logging is imported when something is logged)."""
    import logging

    return logging.getLogger("mnemex")
