"""The embedder registry: an embedder registered here, outside mnemex, is chosen by the setting
``embedder``, searched with through ``Store.search``, and loaded again by a store indexed with
it (that no provider's library is imported by ``import mnemex``: tests/cli/test_cli.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from mnemex import config, embed
from mnemex.config import Settings, load_settings
from mnemex.errors import InvalidInput
from mnemex.store import Store

from .conftest import FakeEmbedder

MEMORIES = [
    "deploy the service with the blue green script",
    "rotate the token every month",
    "blue whales are the largest animals",
]


class Bow(FakeEmbedder):
    """The tests' bag-of-words embedder, with the record a store keeps to load it again."""

    def describe(self) -> dict[str, Any]:
        return {"provider": "bow", "model": "bow-64"}


def load_bow(record: Mapping[str, Any], settings: Settings) -> Bow:
    assert record["provider"] == "bow"
    return Bow()


@pytest.fixture
def bow() -> Iterator[embed.Provider]:
    provider = embed.register("bow", embed.Provider(load_bow))
    try:
        yield provider
    finally:
        embed.unregister("bow")


def test_a_registered_embedder_is_chosen_by_the_setting(
    bow: embed.Provider, tmp_path: Path
) -> None:
    settings = load_settings(tmp_path / "m.db", home=tmp_path, environ={}, embedder="bow")
    with Store(settings) as store:
        assert isinstance(store.embedder, Bow)
        store.add_many(MEMORIES)
        store.embed()
        found = store.search("whales", explain=True)
        assert found.mode_used == "hybrid" and "whales" in found.hits[0].snippet
        assert found.hits[0].explain is not None and found.hits[0].explain["vector"] is not None
    # indexed with it: the store loads it again with no embedder configured
    with Store(load_settings(tmp_path / "m.db", home=tmp_path, environ={})) as store:
        assert isinstance(store.embedder, Bow)
        assert store.search("whales").mode_used == "hybrid"
    env = {"MNEMEX_EMBEDDER": "bow"}
    assert load_settings(tmp_path / "m.db", home=tmp_path, environ=env).embedder == "bow"


def test_an_unregistered_embedder_is_refused_and_a_store_of_one_answers_lexically(
    tmp_path: Path,
) -> None:
    embed.register("bow", embed.Provider(load_bow))
    with Store(load_settings(tmp_path / "m.db", home=tmp_path, environ={}, embedder="bow")) as s:
        s.add_many(MEMORIES)
        s.embed()
    embed.unregister("bow")
    assert "bow" not in config.EMBEDDERS
    with pytest.raises(InvalidInput, match="embedder must be one of auto, local"):
        load_settings(tmp_path / "m.db", home=tmp_path, environ={}, embedder="bow")
    with Store(load_settings(tmp_path / "m.db", home=tmp_path, environ={})) as store:
        found = store.search("whales")
        assert found.mode_used == "lexical"
        assert any("cannot load by itself" in note for note in found.notes), found.notes
    with pytest.raises(ValueError, match="exists"):
        embed.register("local", embed.Provider(load_bow))


def test_the_builtin_providers_are_registry_entries() -> None:
    assert set(embed.PROVIDERS) == {"local", "sentence-transformers", "openai"}
    assert ["auto", *embed.PROVIDERS, "none"] == config.EMBEDDERS
