"""mnemex: local-first memory search for AI agents.

    >>> import mnemex
    >>> store = mnemex.open("memories.db")
    >>> store.add("We chose PostgreSQL for the billing service", kind="decision")
    >>> store.search("which database for billing?").hits

The public API is small: :func:`open` returns a :class:`Store`; its methods
(``add``, ``remember``, ``add_many``, ``get``, ``update``, ``forget``,
``timeline``, ``search``, ``recall``, ``relate``, ``neighbors``, ``stats``,
and for markdown workspaces ``sync``, ``workspace_status``,
``add_to_workspace``, ``watch``) return the frozen values of :mod:`mnemex.models` and
:mod:`mnemex.results`; errors derive from :class:`MnemexError`. The rest is imported
from its module: settings from :mod:`mnemex.config`, copying a store to another
engine from :mod:`mnemex.migration`.
"""

from __future__ import annotations

from mnemex.version import __version__

TYPE_CHECKING = False  # not typing's: `import mnemex` stays cheap for the hook processes

__all__ = [
    "ALL",
    "Appended",
    "ContentTooLarge",
    "DuplicateId",
    "EmbeddingError",
    "ForgetResult",
    "GetResult",
    "Hit",
    "IndexMismatch",
    "InvalidInput",
    "InvalidQuery",
    "Location",
    "Memory",
    "MissingExtra",
    "MnemexError",
    "Relation",
    "SearchResult",
    "Stats",
    "Store",
    "StoreError",
    "StoreLocked",
    "SyncReport",
    "TimelineEntry",
    "UnknownMemory",
    "WorkspaceStatus",
    "__version__",
    "open",
]

_LAZY = {
    "ALL": "mnemex.store",
    "Store": "mnemex.store",
    "ContentTooLarge": "mnemex.errors",
    "DuplicateId": "mnemex.errors",
    "EmbeddingError": "mnemex.errors",
    "IndexMismatch": "mnemex.errors",
    "MissingExtra": "mnemex.errors",
    "InvalidInput": "mnemex.errors",
    "InvalidQuery": "mnemex.errors",
    "MnemexError": "mnemex.errors",
    "StoreError": "mnemex.errors",
    "StoreLocked": "mnemex.errors",
    "UnknownMemory": "mnemex.errors",
    "ForgetResult": "mnemex.results",
    "GetResult": "mnemex.results",
    "Hit": "mnemex.models",
    "Memory": "mnemex.models",
    "Relation": "mnemex.models",
    "Location": "mnemex.models",
    "SyncReport": "mnemex.results",
    "WorkspaceStatus": "mnemex.results",
    "Appended": "mnemex.results",
    "SearchResult": "mnemex.models",
    "Stats": "mnemex.results",
    "TimelineEntry": "mnemex.results",
}

if TYPE_CHECKING:
    from typing import Any

    from mnemex.errors import (
        ContentTooLarge,
        DuplicateId,
        EmbeddingError,
        IndexMismatch,
        InvalidInput,
        InvalidQuery,
        MissingExtra,
        MnemexError,
        StoreError,
        StoreLocked,
        UnknownMemory,
    )
    from mnemex.models import Hit, Location, Memory, Relation, SearchResult
    from mnemex.results import (
        Appended,
        ForgetResult,
        GetResult,
        Stats,
        SyncReport,
        TimelineEntry,
        WorkspaceStatus,
    )
    from mnemex.store import ALL, Store


def open(db: Any = None, *, namespace: str | None = None, **settings: Any) -> Store:
    """Open (creating if needed) a memory store; see :func:`mnemex.store.open_store`."""
    from mnemex.store import open_store

    return open_store(db, namespace=namespace, **settings)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mnemex' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
