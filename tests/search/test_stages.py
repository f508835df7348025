"""The ranking-stage registry: a stage registered here, outside mnemex, takes effect through
``Store.search``, its setting, its option of ``mnemex search`` and its explain line."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mnemex import config
from mnemex.cli import cli
from mnemex.config import load_settings
from mnemex.errors import InvalidInput
from mnemex.search import stages
from mnemex.search.stages import Candidates, Stage, Step
from mnemex.store import Store

QUERY = "deploy checklist billing"


def pinned_boost(c: Candidates, weight: float) -> Step:
    """Pinned memories score ``1 + weight`` times as much (``meta``: created at,
    confidence, pinned, source)."""
    pinned = [seq for seq in c.order if c.meta[seq][2]]
    scores = {seq: c.scores[seq] * (1 + weight if seq in pinned else 1) for seq in c.order}
    return Step(scores, {seq: {"stage": "pinned_boost", "weight": weight} for seq in pinned})


PINNED_BOOST = Stage(
    pinned_boost,
    setting="pinned_boost",
    default=0.0,
    option="pinned_boost",
    help="Rank pinned memories higher",
    explain=lambda entry: f"pinned x{1 + entry['weight']:g}",
)


@pytest.fixture
def boost() -> Iterator[Stage]:
    stages.register("pinned_boost", PINNED_BOOST)
    try:
        yield PINNED_BOOST
    finally:
        stages.unregister("pinned_boost")


def _memories(store: Store) -> tuple[str, str]:
    """A memory that matches the query best, and a pinned one that matches it a little less."""
    best = store.add("deploy checklist billing", confidence=1.0)
    pinned = store.add(
        "deploy checklist billing, the old run", pinned=True, confidence=1.0, dedup=False
    )
    store.add_many(["lunch on Fridays", "the office plants", "a note on the weather"])
    return best, pinned


def test_a_registered_stage_reranks_through_store_search(
    boost: Stage, make_store: Callable[..., Store]
) -> None:
    store = make_store(embedder=None)
    best, pinned = _memories(store)
    plain = store.search(QUERY, explain=True)
    assert [h.id for h in plain.hits][:2] == [best, pinned]  # off: its default is 0
    assert all(
        s["stage"] != "pinned_boost" for h in plain.hits for s in (h.explain or {})["stages"]
    )
    boosted = store.search(QUERY, explain=True, pinned_boost=2.0)
    assert [h.id for h in boosted.hits][:2] == [pinned, best]
    by_id = {h.id: h for h in boosted.hits}
    before = {h.id: h.score for h in plain.hits}
    assert by_id[pinned].score == pytest.approx(3 * before[pinned])
    assert by_id[best].score == pytest.approx(before[best])
    trace = by_id[pinned].explain
    assert trace is not None
    assert {"stage": "pinned_boost", "weight": 2.0} in trace["stages"]


def test_a_registered_stage_is_switched_on_by_its_setting(
    boost: Stage, make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = make_store(embedder=None, pinned_boost=2.0)
    best, pinned = _memories(store)
    assert store.settings.value("pinned_boost") == 2.0
    assert [h.id for h in store.search(QUERY).hits][:2] == [pinned, best]
    assert [h.id for h in store.search(QUERY, pinned_boost=0).hits][:2] == [best, pinned]
    env = {"MNEMEX_PINNED_BOOST": "0.5"}
    assert load_settings(tmp_path / "e.db", home=tmp_path, environ=env).value("pinned_boost") == 0.5
    (tmp_path / "config.toml").write_text("pinned_boost = 1.5\n", encoding="utf-8")
    from_file = load_settings(tmp_path / "e.db", home=tmp_path, environ={})
    assert from_file.value("pinned_boost") == 1.5
    with pytest.raises(InvalidInput, match="MNEMEX_PINNED_BOOST: pinned_boost must be a float"):
        load_settings(tmp_path / "e.db", home=tmp_path, environ={"MNEMEX_PINNED_BOOST": "lots"})
    with pytest.raises(InvalidInput, match="pinned_boost must be a number"):
        store.search(QUERY, pinned_boost="lots")


def test_a_registered_stage_has_an_option_and_an_explain_line(
    boost: Stage, make_store: Callable[..., Store]
) -> None:
    store = make_store(embedder=None)
    _memories(store)
    db = str(store.path)
    store.close()
    runner = CliRunner()
    shown = runner.invoke(cli, ["--db", db, "search", "--help"])
    assert "--pinned-boost WEIGHT" in shown.output
    assert "default 0 (setting pinned_boost)" in " ".join(shown.output.split())
    found = runner.invoke(cli, ["--db", db, "search", QUERY, "--pinned-boost", "2", "--explain"])
    assert found.exit_code == 0, found.output
    assert "pinned x3" in found.output
    assert found.output.index("old run") < found.output.index("deploy checklist billing\n")


def test_unregistering_removes_the_setting_and_the_option(make_store: Callable[..., Store]) -> None:
    stages.register("pinned_boost", PINNED_BOOST)
    with pytest.raises(ValueError, match="exists"):
        stages.register("pinned_boost", PINNED_BOOST)
    stages.unregister("pinned_boost")
    assert "pinned_boost" not in config.ADDED
    with pytest.raises(TypeError, match="unknown search option"):
        make_store(embedder=None).search(QUERY, pinned_boost=1.0)
    assert "--pinned-boost" not in CliRunner().invoke(cli, ["search", "--help"]).output


def test_the_builtin_stages_are_registry_entries() -> None:
    assert list(stages.STAGES) == ["thread", "thread_best", "decay", "confidence", "mmr"]
    assert set(stages.options()) == {"decay", "confidence", "mmr"}
    assert [name for name, s in stages.STAGES.items() if s.picks] == ["mmr"]
