"""LoCoMo at each granularity, foreign questions, question variants, and the paraphrase set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rapidfuzz.distance import Levenshtein

from mnemex.eval import variants
from mnemex.eval.beir import run_beir
from mnemex.eval.locomo import run_locomo, session_id, sessions_of
from mnemex.eval.paraphrase import BUNDLED, load_paraphrase, run_paraphrase
from mnemex.eval.runner import Spec
from tests.conftest import python_env


def _conversation(speakers: tuple[str, str], facts: list[str]) -> dict[str, object]:
    a, b = speakers
    sessions: dict[str, object] = {}
    for number, fact in enumerate(facts, start=1):
        sessions[f"session_{number}_date_time"] = f"1:5{number} pm on {number} May, 2023"
        sessions[f"session_{number}"] = [
            {"speaker": a, "dia_id": f"D{number}:1", "text": f"Hi {b}, how are you doing today?"},
            {"speaker": b, "dia_id": f"D{number}:2", "text": fact},
            {"speaker": a, "dia_id": f"D{number}:3", "text": "That is lovely to hear, really."},
        ]
    return {"speaker_a": a, "speaker_b": b, **sessions}


@pytest.fixture
def two_conversations(tmp_path: Path) -> Path:
    first = _conversation(
        ("Ana", "Ben"),
        ["I adopted a grey kitten named Pixel.", "My cello teacher moved to Lisbon."],
    )
    second = _conversation(
        ("Cleo", "Dario"),
        ["I planted tomatoes behind the garage.", "We sailed to Corsica in a small boat."],
    )
    samples = [
        {
            "sample_id": "conv-a",
            "conversation": first,
            "qa": [
                {"question": "What is Ben's kitten called?", "evidence": ["D1:2"], "category": 4},
                {
                    "question": "Where did Ben's cello teacher go?",
                    "evidence": ["D2:2"],
                    "category": 1,
                },
            ],
        },
        {
            "sample_id": "conv-b",
            "conversation": second,
            "qa": [
                {"question": "What did Dario plant?", "evidence": ["D1:2"], "category": 4},
                {"question": "Where did Dario sail?", "evidence": ["D2:2"], "category": 2},
            ],
        },
    ]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


def test_a_session_memory_holds_its_turns_as_speaker_lines(two_conversations: Path) -> None:
    report = run_locomo(two_conversations, granularity="session", progress=False)
    assert report["granularity"] == "session"
    assert report["memories"] == 4 and report["turns"] == 12 and report["queries"] == 4
    # one relevant session per question, found first (lexical match on the fact)
    assert report["metrics"]["found@1"] == pytest.approx(1.0)
    assert report["metrics"]["R@5"] == pytest.approx(1.0)


def test_session_ids_and_grouping(two_conversations: Path) -> None:
    from mnemex.eval.data import load_locomo

    data = load_locomo(two_conversations)
    groups = sessions_of([t for t in data.turns if t.namespace == "conv-a"])
    assert list(groups) == ["session_1", "session_2"]
    assert [t.id for t in groups["session_2"]] == ["conv-a:D2:1", "conv-a:D2:2", "conv-a:D2:3"]
    assert session_id("conv-a", "session_2") == "conv-a:S2"


def test_other_conversations_questions_are_asked_and_counted(two_conversations: Path) -> None:
    lexical = run_locomo(two_conversations, spec=Spec(mode="lexical"), progress=False)
    floor = lexical["floor"]
    assert floor["foreign_queries"] == 4  # each conversation is asked the other's two
    # a lexical search keeps every row its terms match: "Ben's kitten" finds nothing in
    # conv-b, but both conversations' questions share no content word with the other's
    assert 0.0 <= floor["foreign_answered"] <= 1.0
    assert floor["kept"] == pytest.approx(1.0)
    skipped = run_locomo(two_conversations, foreign=False, progress=False)
    assert skipped["floor"]["foreign_queries"] == 0


def test_without_floor_the_measures_are_reported_too(two_conversations: Path) -> None:
    report = run_locomo(two_conversations, spec=Spec(mode="hybrid"), progress=False)
    assert set(report["metrics"]) == set(report["metrics_without_floor"])
    for name, value in report["metrics"].items():
        assert value <= report["metrics_without_floor"][name] + 1e-9


def test_the_variants_rewrite_every_question(two_conversations: Path) -> None:
    lower = run_locomo(two_conversations, case="lower", names=True, progress=False)
    assert lower["variant"] == "lower-cased, names misspelt by one edit"


def test_foreign_datasets_are_asked_of_every_conversation(
    two_conversations: Path, tmp_path: Path
) -> None:
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        json.dumps({"_id": "d1", "text": "Photosynthesis in algae"}), encoding="utf-8"
    )
    (beir / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": f"q{i}", "text": t}) for i, t in enumerate(["algae light"])),
        encoding="utf-8",
    )
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t1\n")
    report = run_locomo(two_conversations, others=[beir], foreign=False, progress=False)
    assert report["foreign"] == {"beir": {"queries": 2, "answered": 0.0}}
    back = run_beir(beir, others=[two_conversations], progress=False)
    assert back["foreign"]["two"]["queries"] == 4


def test_cli_granularity_and_variants(two_conversations: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnemex",
            "eval",
            "locomo",
            str(two_conversations),
            "--granularity",
            "session",
            "--case",
            "sentence",
            "--mode",
            "lexical",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=python_env(),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["granularity"] == "session" and report["variant"] == "sentence-cased"
    assert report["floor"]["foreign_queries"] == 4


def test_recase() -> None:
    text = "What did Caroline do in June? And Melanie?"
    assert variants.recase(text, None) == text
    assert variants.recase(text, "lower") == text.lower()
    assert variants.recase(text, "sentence") == "What did caroline do in june? and melanie?"
    assert variants.recase("  ¿qué tal?", "sentence") == "  ¿Qué tal?"
    with pytest.raises(ValueError, match="unknown case"):
        variants.recase(text, "title")


def test_names_are_capitalized_words_that_do_not_open_a_sentence() -> None:
    text = 'When did Caroline meet Melanie? Sweden was cold. I said "John" twice.'
    found = [text[a:b] for a, b in variants.names_in(text)]
    assert found == ["Caroline", "Melanie", "John"]
    assert variants.names_in("Tim and Al went out.") == []  # opening word; too short


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=4, max_size=12))
def test_a_misspelt_name_is_one_edit_away_and_keeps_its_ends(word: str) -> None:
    name = word.capitalize()
    wrong = variants.misspell(name)
    assert Levenshtein.distance(name, wrong) == 1
    assert wrong[0] == name[0] and wrong[-1] == name[-1]
    assert variants.misspell(name) == wrong  # the same every run


def test_perturb_names_touches_only_the_names() -> None:
    text = "Did Caroline and Melanie go to the parade?"
    wrong = variants.perturb_names(text)
    assert wrong.split()[0] == "Did" and wrong.endswith("go to the parade?")
    assert wrong != text and Levenshtein.distance(text, wrong) == 2


def test_the_bundled_paraphrase_set_loads() -> None:
    data = load_paraphrase()
    assert BUNDLED.exists() and len(data.stores) >= 8
    assert len(data.questions) >= 160 and len(data.unrelated) >= 150
    for q in data.questions:
        ids = {m["id"] for m in data.stores[q.store]}
        assert q.answers <= ids


def test_paraphrase_run_on_a_small_set(tmp_path: Path) -> None:
    small = {
        "description": "two tiny stores",
        "stores": [
            {
                "name": "ops",
                "language": "en",
                "memories": [
                    {"id": "o1", "kind": "decision", "content": "We moved auth to Okta OIDC."},
                    {"id": "o2", "kind": "gotcha", "content": "Buckets live in eu-west-1 only."},
                ],
                "questions": [{"id": "q1", "text": "how does okta login work", "answers": ["o1"]}],
            },
            {
                "name": "home",
                "language": "en",
                "memories": [
                    {"id": "h1", "kind": "fact", "content": "The boiler is serviced in May."}
                ],
                "questions": [
                    {"id": "q2", "text": "when is the boiler checked", "answers": ["h1"]}
                ],
            },
        ],
        "unrelated": [{"id": "u1", "text": "write a limerick about penguins"}],
    }
    path = tmp_path / "small.json"
    path.write_text(json.dumps(small), encoding="utf-8")
    report = run_paraphrase(path, spec=Spec(mode="lexical"), progress=False)
    assert report["stores"] == 2 and report["memories"] == 3 and report["queries"] == 2
    assert report["metrics"]["found@1"] == pytest.approx(1.0)
    assert report["unrelated"] == {
        "queries": 2,
        "answered": 0.0,
        "per_store": {"ops": 0.0, "home": 0.0},
    }
    assert report["other_stores"]["queries"] == 2
    assert set(report["per_store"]) == {"ops", "home"}
