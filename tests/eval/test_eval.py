"""The evaluation harness on tiny datasets built here (the real ones are not shipped)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ir_measures  # noqa: F401  (the eval extra: make test installs it)
import pytest
from click.testing import CliRunner

from mnemex.cli import cli
from mnemex.eval.beir import run_beir
from mnemex.eval.data import load_locomo, parse_session_time
from mnemex.eval.locomo import run_locomo
from mnemex.eval.metrics import latency, per_query, ranked_run
from tests.conftest import python_env


@pytest.fixture
def beir_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    topics = [
        "volcano eruption lava",
        "penguin colony antarctica",
        "quantum entanglement photons",
        "sourdough bread starter",
        "glacier retreat climate",
        "honeybee pollination crops",
    ]
    corpus = [
        {"_id": f"d{i}", "title": t.split()[0].title(), "text": f"A study of {t} and more."}
        for i, t in enumerate(topics)
    ]
    corpus += [
        {"_id": f"n{i}", "title": "", "text": f"Filler document number {i} about nothing."}
        for i in range(30)
    ]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in corpus), encoding="utf-8")
    queries = [
        {"_id": f"q{i}", "text": f"what about {t.split()[1]}?"} for i, t in enumerate(topics)
    ]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries), encoding="utf-8")
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in range(len(topics))]
    (root / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def test_beir_perfect_retrieval(beir_dir: Path) -> None:
    report = run_beir(beir_dir, progress=False)
    assert report["memories"] == 36 and report["queries"] == 6
    assert report["metrics"]["nDCG@10"] == pytest.approx(1.0)
    assert report["metrics"]["RR@10"] == pytest.approx(1.0)
    assert report["latency_ms"]["p50"] > 0
    assert report["lexical_fallbacks"] == 0


def test_beir_cli_json(beir_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["eval", "beir", str(beir_dir), "--json", "--budget", "0"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report["metrics"]) == {"nDCG@10", "R@10", "R@100", "RR@10"}
    assert "lexical_budget=0" in report["lexical"]


@pytest.mark.postgres
def test_beir_cli_keeps_its_store_in_postgres(beir_dir: Path, pg_url: str, tmp_path: Path) -> None:
    """``--keep-db URL`` builds the store in that database (not a file named like the URL),
    and a second run reuses it."""
    import mnemex

    command = [sys.executable, "-m", "mnemex", "eval", "beir", str(beir_dir), "--json"]
    command += ["--keep-db", pg_url, "--mode", "lexical"]
    env = {**python_env(), "MNEMEX_HOME": str(tmp_path / "home"), "MNEMEX_EMBEDDER": "none"}
    for _ in range(2):
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["memories"] == 36
        assert report["metrics"]["nDCG@10"] == pytest.approx(1.0)
    assert not list(tmp_path.glob("postgres*"))
    with mnemex.open(pg_url) as store:
        assert store.count(namespace=mnemex.ALL) == 36


def test_unanswered_queries_count_as_zero() -> None:
    qrels = {"a": {"x": 1}, "b": {"y": 1}}
    scores = per_query(qrels, {"a": ranked_run(["x"])}, ["nDCG@10", "R@10"])
    assert scores == {"a": {"nDCG@10": 1.0, "R@10": 1.0}, "b": {"nDCG@10": 0.0, "R@10": 0.0}}


def test_ranked_run_keeps_order() -> None:
    run = ranked_run(["z", "a", "m"])
    assert sorted(run, key=lambda d: -run[d]) == ["z", "a", "m"]


def test_latency_percentiles() -> None:
    lat = latency([float(i) for i in range(1, 101)])
    assert lat["p50"] == 50.5 and lat["p95"] == 95.0


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    conversation = {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a grey kitten named Pixel."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started learning the cello."},
        ],
        "session_2_date_time": "10:04 am on 19 June, 2023",
        "session_2": [
            {
                "speaker": "Ana",
                "dia_id": "D2:1",
                "text": "Pixel knocked over my coffee today.",
                "blip_caption": "a cat on a table",
            },
            {"speaker": "Ben", "dia_id": "D2:2", "text": "My cello teacher moved to Lisbon."},
        ],
    }
    qa = [
        {
            "question": "What is the name of Ana's kitten?",
            "answer": "Pixel",
            "evidence": ["D1:1"],
            "category": 4,
        },
        {
            "question": "Where did Ben's cello teacher move?",
            "answer": "Lisbon",
            "evidence": ["D1:2; D2:2", "D9:9"],
            "category": 1,
        },
        {"question": "Unanswerable adversarial question", "evidence": ["D1:1"], "category": 5},
        {"question": "No evidence at all", "answer": "-", "evidence": ["D7:7"], "category": 2},
    ]
    path = tmp_path / "tiny-locomo.json"
    path.write_text(
        json.dumps([{"sample_id": "conv-x", "conversation": conversation, "qa": qa}]),
        encoding="utf-8",
    )
    return path


def test_locomo_loader(locomo_file: Path) -> None:
    data = load_locomo(locomo_file)
    assert len(data.turns) == 4
    assert data.turns[2].content.endswith("[shares an image: a cat on a table]")
    assert data.turns[2].created_at.isoformat().startswith("2023-06-19T10:04")
    assert [q.evidence for q in data.questions] == [
        ("conv-x:D1:1",),
        ("conv-x:D1:2", "conv-x:D2:2"),
    ]
    assert data.dropped_evidence == 2 and data.unanswerable == 1
    assert parse_session_time("10:04 am on 19 June, 2023").hour == 10


def test_locomo_run(locomo_file: Path) -> None:
    report = run_locomo(locomo_file, progress=False)
    assert report["queries"] == 2 and report["lexical_fallbacks"] == 0
    assert report["metrics"]["R@5"] == pytest.approx(1.0)
    assert set(report["per_category"]) == {"1", "4"}
    assert report["per_category"]["4"]["R@10"] == pytest.approx(1.0)


def test_locomo_evidence_in_every_form(tmp_path: Path) -> None:
    """``D30:05``, space-, comma- and semicolon-separated lists all name their turns."""
    turns = [{"speaker": "A", "dia_id": f"D1:{i}", "text": f"turn {i}"} for i in range(1, 7)]
    forms = ["D1:05", "D1:1 D1:2", "D1:3,D1:4", "D1:6; D1:1", "d1:2", "D1 : 3"]
    sample = {
        "sample_id": "c",
        "conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": turns},
        "qa": [
            {"question": f"q{i}", "evidence": [form], "category": 4} for i, form in enumerate(forms)
        ],
    }
    path = tmp_path / "forms.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    data = load_locomo(path)
    assert [q.evidence for q in data.questions] == [
        ("c:D1:5",),
        ("c:D1:1", "c:D1:2"),
        ("c:D1:3", "c:D1:4"),
        ("c:D1:6", "c:D1:1"),
        ("c:D1:2",),
        ("c:D1:3",),
    ]
    assert data.dropped_evidence == 0 and data.unanswerable == 0


def test_locomo_per_conversation_shared_store_equals_separate_stores(
    locomo_file: Path, tmp_path: Path
) -> None:
    """Two conversations, one namespace each in one store or a store each: the same
    numbers, overall and per conversation, from the CLI."""
    sample = json.loads(locomo_file.read_text(encoding="utf-8"))[0]
    other = json.loads(json.dumps(sample))
    other["sample_id"] = "conv-y"
    for turn in other["conversation"]["session_1"]:
        turn["text"] += " The kitten and the cello again, in another conversation."
    path = tmp_path / "two.json"
    path.write_text(json.dumps([sample, other]), encoding="utf-8")
    reports = []
    for extra in ([], ["--separate"]):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mnemex",
                "eval",
                "locomo",
                str(path),
                "--mode",
                "lexical",
                "--json",
                *extra,
            ],
            capture_output=True,
            text=True,
            check=True,
            env=python_env(),
            timeout=120,
        )
        reports.append(json.loads(done.stdout))
    shared, separate = reports
    assert set(shared["per_conversation"]) == {"conv-x", "conv-y"}
    assert shared["per_conversation"]["conv-x"]["questions"] == 2
    assert shared["per_conversation"] == separate["per_conversation"]
    assert shared["metrics"] == separate["metrics"]
    assert separate["stores"] == "one per conversation"


def test_embed_cache_embeds_each_text_once_per_model(tmp_path: Path) -> None:
    import numpy as np

    from mnemex.eval.embed_cache import CachedEmbedder
    from tests.conftest import FakeEmbedder

    texts = ["penguin colony", "glacier retreat", "penguin colony", "sourdough starter"]
    inner = FakeEmbedder()
    cached = CachedEmbedder(inner, tmp_path / "cache")
    first = cached.embed(texts)
    assert inner.texts == 3  # the repeated text is embedded once
    assert np.array_equal(first, inner.embed(texts))
    inner.texts = 0
    again = CachedEmbedder(FakeEmbedder(), tmp_path / "cache")  # a later run
    second = again.embed([*texts, "honeybee pollination"])
    assert again.inner.texts == 1 and again.hits == 4 and again.misses == 1  # type: ignore[attr-defined]
    assert np.array_equal(second[:4], first)
    assert second.dtype == np.float32 and second.shape == (5, 64)
    cached.close()
    again.close()

    class OtherModel(FakeEmbedder):
        model_id = "fake:other"

    other = CachedEmbedder(OtherModel(), tmp_path / "cache")
    other.embed(texts)
    assert other.inner.texts == 3  # type: ignore[attr-defined]  # vectors are per model
    other.close()


def test_embed_cache_unusable_folder_is_one_clear_error(tmp_path: Path) -> None:
    from mnemex.errors import InvalidInput
    from mnemex.eval.embed_cache import CachedEmbedder
    from tests.conftest import FakeEmbedder

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InvalidInput, match="embedding cache"):
        CachedEmbedder(FakeEmbedder(), blocker)


def test_lexical_fallbacks_counts_lexical_answers_only_when_vectors_were_asked() -> None:
    from mnemex.eval.runner import lexical_fallbacks

    assert lexical_fallbacks(["hybrid", "lexical", "lexical", "hybrid"], "hybrid") == 2
    assert lexical_fallbacks(["lexical", "vector"], "vector") == 1
    assert lexical_fallbacks(["lexical", "lexical"], "lexical") == 0
