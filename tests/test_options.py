"""SearchOptions and RecallOptions: the settings, then the caller's overrides, checked once."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from mnemex.config import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
    RECALL_BUDGET_TOKENS,
    RECALL_CANDIDATES,
    RECALL_MAX_MEMORIES,
    RecallOptions,
    SearchOptions,
    Settings,
    default_text,
    given_store,
    load_settings,
)
from mnemex.errors import InvalidInput
from mnemex.search.stages import switches


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(tmp_path / "o.db", home=tmp_path, environ={})


def test_search_defaults_come_from_the_settings(settings: Settings) -> None:
    options = SearchOptions.of(settings)
    assert options.limit == DEFAULT_SEARCH_LIMIT
    assert (options.mode, options.fusion) == ("auto", "adaptive")
    assert (options.vector_weight, options.text_weight) == (0.5, 0.5)
    assert (options.relations, options.rrf_k) == (5, 60)
    assert options.expand is True and options.stages == {}
    assert switches(settings, options.stages) == {
        "thread": 0.3,
        "thread_best": 0.3,
        "decay": False,
        "confidence": True,
        "mmr": False,
    }
    assert options.threshold is True
    tuned = settings.replace(
        search_limit=9, search_mode="lexical", fusion="rrf", decay=True, search_relations=0
    )
    options = SearchOptions.of(tuned)
    assert (options.limit, options.mode, options.fusion) == (9, "lexical", "rrf")
    assert switches(tuned, options.stages)["decay"] is True
    assert options.relations == 0


def test_search_overrides_beat_the_settings(settings: Settings) -> None:
    options = SearchOptions.of(
        settings.replace(mmr=True),
        limit=MAX_SEARCH_LIMIT,
        mode="vector",
        fusion="weighted",
        weights=[1, 0],
        relations=0,
        expand=False,
        decay=True,
        confidence=False,
        mmr=False,
        threshold=False,
    )
    assert (options.limit, options.mode, options.fusion) == (MAX_SEARCH_LIMIT, "vector", "weighted")
    assert (options.vector_weight, options.text_weight) == (1.0, 0.0)
    assert (options.relations, options.expand, options.threshold) == (0, False, False)
    on = switches(settings.replace(mmr=True), options.stages)
    assert (on["decay"], on["confidence"], on["mmr"]) == (True, False, False)


def test_auto_is_resolved_in_one_place(settings: Settings) -> None:
    auto = SearchOptions.of(settings)
    assert auto.wants_vectors and auto.mode_for(True) == "hybrid"
    assert auto.mode_for(False) == "lexical"
    lexical = SearchOptions.of(settings, mode="lexical")
    assert not lexical.wants_vectors and lexical.mode_for(True) == "lexical"
    assert SearchOptions.of(settings, mode="vector").mode_for(False) == "vector"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"limit": 0}, "limit must be an integer between 1 and 1000, got 0"),
        ({"limit": MAX_SEARCH_LIMIT + 1}, "limit must be an integer between 1 and 1000, got 1001"),
        ({"limit": True}, "limit must be an integer between 1 and 1000, got True"),
        ({"limit": 2.0}, "limit must be an integer between 1 and 1000, got 2.0"),
        ({"limit": "5"}, "limit must be an integer between 1 and 1000, got '5'"),
        ({"relations": -1}, "relations must be an integer between 0 and 1000, got -1"),
        ({"relations": 1001}, "relations must be an integer between 0 and 1000, got 1001"),
        ({"relations": False}, "relations must be an integer between 0 and 1000, got False"),
        ({"mode": "fast"}, "mode must be one of auto, lexical, vector, hybrid, got 'fast'"),
        ({"mode": ""}, "mode must be one of auto, lexical, vector, hybrid, got ''"),
        ({"fusion": "max"}, "fusion must be one of rrf, weighted, adaptive, got 'max'"),
        ({"weights": (0, 0)}, "weights must be two numbers >= 0, not both 0 (vector, text)"),
        ({"weights": (-1, 2)}, "weights must be two numbers >= 0, not both 0"),
        ({"weights": (1, 2, 3)}, "weights must be two numbers >= 0, not both 0"),
        ({"weights": (math.inf, 1)}, "weights must be two numbers >= 0, not both 0"),
        ({"weights": (math.nan, 1)}, "weights must be two numbers >= 0, not both 0"),
        ({"weights": (True, 1)}, "weights must be two numbers >= 0, not both 0"),
        ({"weights": (2**60, 1)}, "weights must be two numbers >= 0, not both 0"),
        ({"weights": "0.5,0.5"}, "weights must be two numbers >= 0, not both 0"),
    ],
)
def test_search_refuses_each_bad_override(
    settings: Settings, given: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        SearchOptions.of(settings, **given)
    assert message in str(caught.value)


def test_the_bounds_hold_at_their_edges(settings: Settings) -> None:
    assert SearchOptions.of(settings, limit=1).limit == 1
    assert SearchOptions.of(settings, relations=MAX_SEARCH_LIMIT).relations == MAX_SEARCH_LIMIT
    assert SearchOptions.of(settings, weights=(0, 0.1)).vector_weight == 0.0


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("search_limit", 0, "search_limit must be an integer between 1 and 1000, got 0"),
        ("search_relations", 1001, "search_relations must be an integer between 0 and 1000"),
        ("search_mode", "x", "search_mode must be one of auto, lexical, vector, hybrid"),
        ("fusion", "x", "fusion must be one of rrf, weighted, adaptive, got 'x'"),
        ("vector_weight", 0, "vector_weight and text_weight must be two numbers >= 0, not both 0"),
        ("recall_budget", 0, "recall_budget must be a positive integer, got 0"),
        ("recall_max", 0, "recall_max must be a positive integer, got 0"),
    ],
)
def test_settings_are_checked_by_the_same_rules(
    tmp_path: Path, setting: str, value: object, message: str
) -> None:
    changes: dict[str, object] = {setting: value}
    if setting == "vector_weight":
        changes["text_weight"] = 0
    with pytest.raises(InvalidInput) as caught:
        load_settings(tmp_path / "o.db", home=tmp_path, environ={}, **changes)
    assert message in str(caught.value)


def test_recall_defaults_and_candidates(settings: Settings) -> None:
    options = RecallOptions.of(settings)
    assert (options.budget, options.most) == (RECALL_BUDGET_TOKENS, RECALL_MAX_MEMORIES)
    assert options.token_counter == "chars" and options.candidates == RECALL_CANDIDATES
    assert RecallOptions.of(settings, max_memories=10).candidates == 40
    assert RecallOptions.of(settings, max_memories=10**6).candidates == MAX_SEARCH_LIMIT
    tuned = RecallOptions.of(settings.replace(recall_budget=80, token_counter="wordpiece"))
    assert (tuned.budget, tuned.token_counter) == (80, "wordpiece")
    assert RecallOptions.of(settings, token_counter=len).token_counter is len


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"budget_tokens": 0}, "budget_tokens must be a positive integer, got 0"),
        ({"budget_tokens": 1.5}, "budget_tokens must be a positive integer, got 1.5"),
        ({"max_memories": 0}, "max_memories must be a positive integer, got 0"),
        ({"max_memories": True}, "max_memories must be a positive integer, got True"),
        ({"token_counter": "words"}, "token_counter must be one of chars, wordpiece or a function"),
        ({"token_counter": ["chars"]}, "token_counter must be one of chars, wordpiece"),
        # the budget is checked before the counter
        ({"budget_tokens": -1, "token_counter": "x"}, "budget_tokens must be a positive integer"),
    ],
)
def test_recall_refuses_each_bad_override(
    settings: Settings, given: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        RecallOptions.of(settings, **given)
    assert message in str(caught.value)


def test_options_are_frozen(settings: Settings) -> None:
    options = SearchOptions.of(settings)
    with pytest.raises(AttributeError):
        options.limit = 3  # type: ignore[misc]


def test_help_text_names_the_setting_and_its_default() -> None:
    assert default_text("search_limit") == f"default {DEFAULT_SEARCH_LIMIT} (setting search_limit)"
    assert default_text("decay", "half_life_days") == (
        "default off (setting decay), 30 (setting half_life_days)"
    )
    assert default_text("vector_weight") == "default 0.5 (setting vector_weight)"
    assert default_text("fusion") == "default 'adaptive' (setting fusion)"
    with pytest.raises(KeyError):
        default_text("no_such_setting")


def test_an_unknown_option_is_a_programming_error(settings: Settings) -> None:
    with pytest.raises(TypeError, match="unknown search option"):
        switches(settings, SearchOptions.of(settings, limt=3).stages)


def test_the_store_and_namespace_given_come_from_options_then_the_environment() -> None:
    env = {"MNEMEX_DB": "/env.db", "MNEMEX_NAMESPACE": "env"}
    assert given_store(None, None, env) == ("/env.db", "env")
    assert given_store("/opt.db", "opt", env) == ("/opt.db", "opt")
    assert given_store(None, None, {"MNEMEX_DB": "", "MNEMEX_NAMESPACE": ""}) == (None, None)
    assert given_store(None, None, {}) == (None, None)


def test_store_search_takes_its_query_and_options_by_keyword_too(tmp_path: Path) -> None:
    import mnemex

    with mnemex.open(tmp_path / "k.db", embedder=None) as store:
        store.add("the deploy key rotates every ninety days", id="k")
        by_position = store.search("deploy key", 3)
        options = SearchOptions.of(store.settings, limit=3)
        for result in (
            store.search(query="deploy key", limit=3),
            store.search(query="deploy key", options=options),
            store.search("deploy key", options=3),
        ):
            assert [h.id for h in result.hits] == [h.id for h in by_position.hits] == ["k"]
        with pytest.raises(TypeError, match="not both"):
            store.search(query="deploy key", options=options, limit=2)
        for wrong in ([], "3", 2.5, True):
            with pytest.raises(InvalidInput, match="options must be SearchOptions or a limit"):
                store.search("deploy key", wrong)
