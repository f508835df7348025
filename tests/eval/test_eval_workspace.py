"""LoCoMo as a markdown workspace: files written, synced into a real store, scored by lines."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mnemex.eval.data import load_locomo
from mnemex.eval.locomo import run_locomo
from mnemex.eval.runner import Spec
from mnemex.eval.workspace import cut_block, found_in_chunks, found_in_text, write_workspace
from mnemex.search.recall import count_chars
from tests.conftest import FakeEmbedder

FILLER = [
    "Sounds good, talk to you soon about the weekend plans and everything else.",
    "Yeah, work has been busy lately but I am managing to keep up with it all.",
    "Haha, that is so true, we should catch up more often when things calm down.",
    "I hear you, the weather has been strange this month, rain and then sunshine.",
]


def _session(number: int, facts: dict[int, tuple[str, str]], length: int) -> list[dict[str, str]]:
    turns = []
    for index in range(1, length + 1):
        speaker, text = facts.get(index, ("Ana" if index % 2 else "Ben", FILLER[index % 4]))
        turns.append({"speaker": speaker, "dia_id": f"D{number}:{index}", "text": text})
    return turns


@pytest.fixture
def conversation_file(tmp_path: Path) -> Path:
    conversation = {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": _session(1, {30: ("Ana", "I adopted a grey kitten named Pixel.")}, 40),
        "session_2_date_time": "7:10 pm on 8 May, 2023",  # the same day: the same file
        "session_2": _session(2, {3: ("Ben", "My cello teacher moved to Lisbon.")}, 12),
        "session_3_date_time": "10:04 am on 19 June, 2023",
        "session_3": _session(3, {5: ("Ana", "Pixel learned to open the fridge door.")}, 8),
    }
    qa = [
        {"question": "What is the name of Ana's kitten?", "evidence": ["D1:30"], "category": 4},
        {"question": "Where did Ben's cello teacher move?", "evidence": ["D2:3"], "category": 1},
        {"question": "What did Pixel learn to open?", "evidence": ["D3:5"], "category": 2},
        {"question": "An adversarial one", "evidence": ["D1:1"], "category": 5},
    ]
    path = tmp_path / "tiny-locomo.json"
    path.write_text(
        json.dumps([{"sample_id": "conv-x", "conversation": conversation, "qa": qa}]),
        encoding="utf-8",
    )
    return path


def test_each_turn_is_one_line_of_its_day_file(conversation_file: Path, tmp_path: Path) -> None:
    data = load_locomo(conversation_file)
    ws = write_workspace("conv-x", data.turns, tmp_path / "ws")
    files = sorted(p.name for p in (tmp_path / "ws" / "memory").iterdir())
    assert files == ["2023-05-08.md", "2023-06-19.md"]
    for turn in data.turns:
        path, line = ws.lines[turn.id]
        lines = (tmp_path / "ws" / path).read_text(encoding="utf-8").split("\n")
        assert lines[line - 1] == "- " + turn.content == "- " + ws.text[turn.id]
    day = (tmp_path / "ws" / "memory" / "2023-05-08.md").read_text(encoding="utf-8")
    assert day.startswith("# 2023-05-08\n\n## 1:56 pm\n\n- Ana: ")
    assert "\n## 7:10 pm\n\n- Ana: " in day
    assert ws.lines["conv-x:D2:1"][0] == ws.lines["conv-x:D1:1"][0]


def test_found_by_line_range_and_by_whole_text() -> None:
    evidence = [("memory/a.md", 12)]
    assert found_in_chunks([("memory/a.md", 5, 12)], evidence)
    assert not found_in_chunks([("memory/a.md", 13, 20), None, ("memory/b.md", 1, 99)], evidence)
    assert found_in_text("x  Ana: a\n grey kitten y", ["Ana: a grey kitten"])
    assert not found_in_text("Ana: a grey kit…", ["Ana: a grey kitten"])
    block = cut_block(["- [chunk] " + "word " * 400], 100)
    assert count_chars(block) == 100


def run_workspace(file: Path, **given: object) -> dict[str, object]:
    return run_locomo(file, granularity="workspace", **given)  # type: ignore[arg-type]


def test_workspace_run_on_a_real_store(conversation_file: Path) -> None:
    report = run_workspace(conversation_file, progress=False)
    assert report["granularity"] == "workspace"
    assert report["queries"] == 3 and report["turns"] == 60 and report["conversations"] == 1
    assert report["memories"] >= 3  # the 40-turn session does not fit one chunk
    metrics = report["metrics"]
    assert metrics["found@1"] <= metrics["found@3"] <= metrics["found@5"] == 1.0
    # the kitten is deep in a long chunk: a plain cut of the top hits at 500 tokens
    # loses it, recall's excerpt of the chunk keeps it
    assert report["blocks"]["recall"] == 1.0
    assert set(report["per_category"]) == {"1", "2", "4"}


def test_cli_as_workspace_json(conversation_file: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnemex",
            "eval",
            "locomo",
            str(conversation_file),
            "--granularity",
            "workspace",
            "--mode",
            "lexical",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dataset"] == "tiny-locomo" and report["granularity"] == "workspace"
    assert report["mode"] == "lexical"
    assert {"found@1", "found@3", "found@5", "R@10"} <= set(report["metrics"])
    assert set(report["blocks"]) == {"top-k cut", "recall"}


class SlowEmbedder(FakeEmbedder):
    """The fake embedder on a loaded machine: each call takes ``DELAY`` seconds."""

    DELAY = 0.3

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(self.DELAY)
        return super().embed(texts)


class FailsOnQuestions(FakeEmbedder):
    """Embeds the workspace's chunks, fails on every question."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if any(t.rstrip().endswith("?") for t in texts):
            raise RuntimeError("no vectors for questions")
        return super().embed(texts)


def test_a_slow_embedder_does_not_change_the_numbers(
    conversation_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query embedded after ``query_timeout`` answers lexically in a search, never in an
    evaluation: a loaded machine gives the numbers of an idle one."""
    spec = Spec(mode="hybrid")
    fast = run_workspace(conversation_file, spec=spec, progress=False, embedder=FakeEmbedder())
    monkeypatch.setenv("MNEMEX_QUERY_TIMEOUT", str(SlowEmbedder.DELAY / 10))
    slow = run_workspace(conversation_file, spec=spec, progress=False, embedder=SlowEmbedder())
    assert fast["lexical_fallbacks"] == slow["lexical_fallbacks"] == 0
    assert slow["metrics"] == fast["metrics"] and slow["mode"] == "hybrid"


def test_searches_answered_lexically_are_counted(conversation_file: Path) -> None:
    spec = Spec(mode="hybrid")
    report = run_workspace(
        conversation_file, spec=spec, progress=False, embedder=FailsOnQuestions()
    )
    assert report["queries"] == 3
    # each question's search and recall's search (the searches without the floor are not
    # counted: they run the same way)
    assert report["lexical_fallbacks"] == 6
    lexical = run_workspace(conversation_file, spec=Spec(mode="lexical"), progress=False)
    assert lexical["lexical_fallbacks"] == 0  # asked for: not a fallback
