"""Small SQL builders shared by every module that writes SQL by hand."""

from __future__ import annotations

from typing import Final

IN_CHUNK: Final = 500
"""Values per ``IN (...)`` list: far below SQLite's limit on bound parameters."""


def marks(count: int) -> str:
    """``count`` parameter marks for an ``IN (...)`` list or a ``VALUES (...)`` row: ``?,?,?``."""
    if count < 1:
        raise ValueError("an IN list needs at least one value")
    return ",".join("?" * count)
