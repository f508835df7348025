"""What SQLite's own modules use of its session besides the engine protocol's
:class:`~mnemex.engine.protocol.Session`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from mnemex.engine.protocol import Session

if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path

    from mnemex.embed import Embedder
    from mnemex.engine.sqlite.fts import Lexicon
    from mnemex.engine.sqlite.vectors import VectorIndex


class SqliteSurface(Session, Protocol):
    """What SQLite's embedding lifecycle and check use of its session besides."""

    @property
    def conn(self) -> sqlite3.Connection: ...

    @property
    def lexicon(self) -> Lexicon: ...

    @property
    def path(self) -> Path: ...

    @property
    def embedder(self) -> Embedder | None: ...

    def vectors(self, dim: int) -> VectorIndex: ...

    def update_ann(self, embedder: Embedder) -> None: ...

    def drop_ann(self, model_id: str) -> None: ...
