"""Fixtures of the window tests, shared by the suite that runs on both engines
(``tests/engine/``) and by the tests that hold on SQLite alone (``tests/engine/sqlite/``)."""

from __future__ import annotations

import pytest

from mnemex.embed.local import LocalEmbedder
from tests.engine.test_windows import WindowedFake


@pytest.fixture
def windowed() -> WindowedFake:
    """The fake embedder that cuts a text of more than 12 words into windows."""
    return WindowedFake()


@pytest.fixture(scope="module")
def model() -> LocalEmbedder:
    """The local model, loaded once per module."""
    return LocalEmbedder()


@pytest.fixture
def sentences_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store of the test reads long texts sentence by sentence too
    (``pytestmark = pytest.mark.usefixtures("sentences_on")`` in a module)."""
    monkeypatch.setenv("MNEMEX_EMBED_SENTENCES", "true")
