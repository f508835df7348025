from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mnemex
from mnemex.store import Store
from tests.pg_fixtures import (  # noqa: F401  (fixtures and hooks of the postgres tests)
    engine,
    pg_databases,
    pg_server,
    pg_url,
    pytest_configure,
    pytest_generate_tests,
    store_place,
)

SRC = Path(__file__).resolve().parents[1] / "src"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--torch",
        action="store_true",
        help="also run the tests marked torch (they need PyTorch: make test-torch)",
    )
    parser.addoption(
        "--browser",
        action="store_true",
        help="also run the tests marked browser (Playwright and Chromium: make test-ui)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``torch`` run only with ``--torch``, those marked ``browser`` only with
    ``--browser``: ``make test`` installs neither PyTorch nor Playwright."""
    for marker in ("torch", "browser"):
        if config.getoption(f"--{marker}"):
            continue
        left = [item for item in items if item.get_closest_marker(marker)]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [item for item in items if not item.get_closest_marker(marker)]


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the real user data dir or a user config.

    Tests run without an embedder unless they ask for one (the fake below, or
    the real local model in tests marked ``model``), and in a folder of no project
    (the checkout is a git repository, whose root would be the namespace: see
    :func:`mnemex.config.where`).
    """
    home = tmp_path_factory.mktemp("mnemex-home")
    monkeypatch.setenv("MNEMEX_HOME", str(home))
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    for key in list(os.environ):
        if key.startswith("MNEMEX_") and key != "MNEMEX_HOME":
            monkeypatch.delenv(key)
    monkeypatch.setenv("MNEMEX_EMBEDDER", "none")
    from mnemex.embed import breaker

    breaker.reset_all()  # no provider known to be down from an earlier test


class FakeEmbedder:
    """Deterministic bag-of-words vectors: each word adds weight to two hashed dimensions.

    Texts that share words get similar vectors, which is all the unit tests of
    the vector and hybrid paths need. ``fail`` makes the next calls raise.
    """

    model_id = "fake:bow-64"
    dim = 64

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0
        self.fail = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise RuntimeError("the fake embedder is down")
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.md5(word.encode()).digest()
                out[row, digest[0] % self.dim] += 1.0
                out[row, digest[1] % self.dim] += 0.5
            if not out[row].any():
                out[row, 0] = 1.0
        return out


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def make_store(store_place: Callable[[str], Any]) -> Iterator[Callable[..., Store]]:  # noqa: F811
    """Open stores named ``name``: files in tmp_path, or, in a test marked ``both_engines``
    run on PostgreSQL, a database each (see tests/pg_fixtures.py)."""
    opened: list[Store] = []

    def make(name: str = "memories.db", **settings: Any) -> Store:
        store = mnemex.open(store_place(name), **settings)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()


@pytest.fixture
def vector_store(make_store: Callable[..., Store], fake_embedder: FakeEmbedder) -> Store:
    return make_store("vectors.db", embedder=fake_embedder)


def python_env() -> dict[str, str]:
    """Environment for child Python processes that import mnemex from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable
