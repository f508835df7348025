"""What the embedding lifecycles of both engines share: the constants of catching up, the
backlog mark, the messages, and which stored memories a reindex gives new windows.

SQLite's lifecycle is :mod:`mnemex.engine.sqlite.embedding`, PostgreSQL's
:mod:`mnemex.engine.postgres.embedding`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from mnemex import embed as embedders
from mnemex.engine import logger

if TYPE_CHECKING:
    from mnemex.results import Pending

Cut = Callable[[str], list[tuple[int, str]]]  # a text's numbered windows (one: (0, text))
REWINDOWING: Final = "re-windowing"  # reindex's phase that gives memories their windows
FROM_SETTINGS: Final = object()  # Store(embedder=...) default: resolve the embedder setting
DEADLINE_SLICE = 32  # memories embedded between two looks at the clock when time is limited
# A write that finds memories left without vectors by an earlier one (failed, interrupted)
# embeds at most this many of them, or as many as it wrote if more: bounded work per write.
CATCH_UP_MEMORIES = 500
# Nor a memory longer than this (a raised max_content_bytes): minutes of embedding that a
# write of a line would not expect. `mnemex embed` embeds those.
CATCH_UP_MAX_CHARS = 65_536


class Backlog:
    """The store's mark that memories may lack vectors: set before a write embeds (so an
    interruption leaves it), kept when embedding fails, cleared once none is left.

    The ``meta`` row ``embed_backlog``, read and written in statements both engines
    take (``mark`` is the driver's parameter mark).
    """

    KEY: Final = "embed_backlog"

    def __init__(self, session: Any, mark: str = "?") -> None:
        self.session = session
        self.mark = mark

    def marked(self) -> bool:
        with self.session.connection() as conn:
            sql = f"SELECT 1 FROM meta WHERE key = {self.mark}"
            return conn.execute(sql, (self.KEY,)).fetchone() is not None

    def set(self, why: str) -> None:
        with self.session.transaction() as conn:
            conn.execute(f"DELETE FROM meta WHERE key = {self.mark}", (self.KEY,))
            sql = f"INSERT INTO meta (key, value) VALUES ({self.mark}, {self.mark})"
            conn.execute(sql, (self.KEY, why))

    def clear(self) -> None:
        with self.session.transaction() as conn:
            conn.execute(f"DELETE FROM meta WHERE key = {self.mark}", (self.KEY,))


def catch_up_size(written: int) -> int:
    """How many memories left without vectors a write of ``written`` memories embeds."""
    return max(CATCH_UP_MEMORIES, written)


def say_catching_up(doing: int, pending: int) -> None:
    logger().warning(
        "embedding %d of the %d memories an earlier write left without vectors", doing, pending
    )


def say_left(left: int) -> None:
    if left > 0:
        logger().warning(
            "%d memories still have no vector: each write embeds more (none longer than %d "
            "characters), `mnemex embed` all of them",
            left,
            CATCH_UP_MAX_CHARS,
        )


def rewindowed(stored: Sequence[tuple[Pending, tuple[int, int]]], cut: Cut) -> list[Pending]:
    """Of (memory, (windows stored, of them sentence windows)), the memories whose text is
    cut otherwise now (a long text stored with one vector, or with its token windows but
    no sentences, or its sentences not numbered as sentences)."""
    out = []
    for memory, shape in stored:
        numbers = [number for number, _ in cut(memory.content)]
        if (len(numbers), sum(map(embedders.is_sentence, numbers))) != shape:
            out.append(memory)
    return out
