from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex.store import Store

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the real user data dir or a user config."""
    home = tmp_path_factory.mktemp("mnemex-home")
    monkeypatch.setenv("MNEMEX_HOME", str(home))
    for key in list(os.environ):
        if key.startswith("MNEMEX_") and key != "MNEMEX_HOME":
            monkeypatch.delenv(key)


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., Store]]:
    opened: list[Store] = []

    def make(name: str = "memories.db", **settings: Any) -> Store:
        store = mnemex.open(tmp_path / name, **settings)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()


def python_env() -> dict[str, str]:
    """Environment for child Python processes that import mnemex from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable
