"""The one error hierarchy of mnemex.

Every message says what went wrong and what to do next. The CLI and the MCP
server print ``str(error)`` as is, so messages are single sentences written
for the person (or agent) who has to act on them.
"""

from __future__ import annotations


class MnemexError(Exception):
    """Base class of every error mnemex raises on purpose."""


class InvalidInput(MnemexError, ValueError):
    """An argument or a memory field is not acceptable."""


class ContentTooLarge(InvalidInput):
    """Content exceeds the configured size limit."""

    def __init__(self, size: int, limit: int, where: str = "content") -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"{where} is {size:,} bytes, over the limit of {limit:,} bytes; "
            "split it into smaller memories or raise max_content_bytes "
            "(MNEMEX_MAX_CONTENT_BYTES)"
        )


class InvalidQuery(InvalidInput):
    """A raw FTS5 query could not be parsed."""


FIND_IDS = {  # where the CLI shows the ids of each kind of record
    "memory": "find ids with `mnemex search` or `mnemex timeline`",
    "relation": "find ids with `mnemex neighbors` or `mnemex search`",
}


def unknown_ids(ids: list[str], namespace: str, what: str = "memory") -> str:
    """The one wording of ids that are not there, for every edge (API, CLI, MCP):
    ``no memory with id 'x' in namespace 'default'`` (``*``: the whole store)."""
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    shown = ", ".join(repr(i) for i in ids[:5]) + more
    noun = f"no {what} with id" if len(ids) == 1 else f"no {_PLURAL.get(what, what)} with ids"
    place = "in the store" if namespace == "*" else f"in namespace {namespace!r}"
    return f"{noun} {shown} {place}"


_PLURAL = {"memory": "memories", "relation": "relations"}


class UnknownMemory(MnemexError, LookupError):
    """One or more memory (or relation) ids do not exist in the namespace."""

    def __init__(
        self, ids: list[str], namespace: str, what: str = "memory", hint: str | None = None
    ) -> None:
        self.ids = ids
        self.namespace = namespace
        self.what = what
        found = FIND_IDS.get(what, FIND_IDS["memory"]) if hint is None else hint
        super().__init__(f"{unknown_ids(ids, namespace, what)}; {found}")


class DuplicateId(InvalidInput):
    """A memory id given by the caller already exists."""


class StoreLocked(MnemexError):
    """Another process held the database lock for longer than the busy timeout."""


class StoreError(MnemexError):
    """The database file cannot be used (corrupt, unreadable, newer schema...)."""


class MissingExtra(MnemexError, ImportError):
    """An optional dependency is not installed."""

    def __init__(self, extra: str, what: str, missing: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs {missing}: pip install 'mnemex[{extra}]'")


class EmbeddingError(MnemexError):
    """An embedder failed or returned unusable vectors."""


class ProviderDown(EmbeddingError):
    """An embedding provider failed recently and is skipped for a while (see mnemex.embed.breaker)."""


class IndexMismatch(MnemexError):
    """Stored vectors do not fit the configured embedding model."""
