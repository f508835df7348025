"""The relevance floor with the real local model, on both engines: questions in other
words, text the model cannot read, long memories, memories still without a vector, and
letter case."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemex.store import Store
from tests.pg_fixtures import both_engines

pytestmark = pytest.mark.model

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "mnemex" / "data" / "sample_memories.jsonl"

PROJECT = {
    "broker": "Decision: events between services now go through NATS JetStream; the RabbitMQ "
    "cluster was retired in March after the outage review.",
    "region": "Gotcha: the invoices bucket lives in eu-central-1. Uploads signed for us-east-1 "
    "come back with a 301 PermanentRedirect.",
    "owner": "Priya owns billing and the Stripe integration; ask her before changing how "
    "invoice numbers are generated.",
    "release": "Release process: tag main, CI builds the image, then promote staging to "
    "production with the deploy button in Argo.",
    "pdf": "Invoice PDFs rendered slowly because every page embedded the full font files; "
    "subsetting the fonts cut rendering from 9 s to 0.8 s.",
    "auth": "Switched sign-in from passwords to OIDC through Okta; password logins were "
    "turned off on 2 June.",
    "cache": "Redis evicts session keys under memory pressure; sessions moved to PostgreSQL.",
    "review": "Maria prefers pull requests under 300 changed lines, split into stacked PRs.",
    "backups": "Nightly database backups go to a separate account and are restored into a "
    "scratch instance every Sunday to prove they work.",
    "flaky": "The end-to-end suite is flaky on Mondays because the staging seed job runs at "
    "the same time; rerun it after 10:00.",
    "tz": "All timestamps are stored in UTC; the dashboard converts to the viewer's zone.",
    "oncall": "On-call rotates weekly on Tuesdays; the handover note lives in the ops channel.",
}

REWORDED = [
    ("which message bus do services talk over these days?", "broker"),
    ("why would uploading a bill to storage fail from the american region?", "region"),
    ("who should I check with before touching payment code?", "owner"),
    ("how do people log in now?", "auth"),
    ("why were the generated documents so slow to produce?", "pdf"),
]

UNRELATED = [
    "write a haiku about autumn leaves",
    "what is the capital of Peru?",
    "give me a recipe for banana bread",
    "explain how photosynthesis works",
    "suggest names for a golden retriever puppy",
]


@pytest.fixture
def local_store(make_store: Callable[..., Store]) -> Callable[..., Store]:
    def make(name: str = "local.db") -> Store:
        return make_store(name, embedder="local", dedup=False)

    return make


@both_engines
def test_a_question_in_other_words_finds_its_memory(local_store: Callable[..., Store]) -> None:
    store = local_store()
    ids = dict(zip(PROJECT, store.add_many(list(PROJECT.values())), strict=True))
    for question, key in REWORDED:
        found = [h.id for h in store.search(question, 3).hits]
        assert ids[key] in found, question
    for prompt in UNRELATED:
        assert store.search(prompt).hits == (), prompt


def test_only_an_explained_search_records_what_the_floor_read(
    local_store: Callable[..., Store],
) -> None:
    """The floor's trace is made for explain alone: a search without it keeps and ranks
    exactly the same memories, with the same floor decision."""
    store = local_store()
    store.add_many(list(PROJECT.values()))
    for question, _ in [*REWORDED, *((u, None) for u in UNRELATED)]:
        plain, explained = store.search(question), store.search(question, explain=True)
        assert [(h.id, h.score) for h in plain.hits] == [(h.id, h.score) for h in explained.hits]
        assert plain.floor == explained.floor and plain.notes == explained.notes
        assert all(h.explain is None for h in plain.hits)
        for hit in explained.hits:
            assert [s["stage"] for s in hit.explain["stages"]][:2] == ["floor", "threshold"]


@both_engines
def test_text_the_model_cannot_read_is_found_by_its_words(
    local_store: Callable[..., Store],
) -> None:
    """The demo's examples: a Chinese memory found by a two-character query, a word found
    inside a longer run of characters, an English question naming an identifier."""
    store = local_store()
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    store.add_many([item for item in map(json.loads, lines) if "content" in item])
    assert {"demo-031", "demo-058"} <= {h.id for h in store.search("发票", 5).hits}
    chinese = store.add("我们的报表服务使用数据库连接池，高峰时连接数不够")
    assert chinese in [h.id for h in store.search("数据", 5).hits]
    assert store.search("OIDC cutover", 3).hits  # jargon: the lexical arm decides
    assert store.search("今天天气怎么样？").hits == ()  # nothing of it is held


@both_engines
def test_a_long_memory_answers_a_question_about_one_of_its_lines(
    local_store: Callable[..., Store],
) -> None:
    store = local_store()
    lines = [
        "Ana: Morning! How was the weekend?",
        "Ben: Quiet. We repainted the hallway and fixed the squeaky door.",
        "Ana: Nice. Did you hear back about the apartment in Porto?",
        "Ben: Yes! We signed the lease yesterday, we move on the first of May.",
        *[
            f"Ana: Then we talked about the weather again, item {i}, nothing new."
            for i in range(40)
        ],
        "Ben: Also my sister adopted a three-legged cat called Biscuit.",
    ]
    session = store.add("\n".join(lines))
    store.add_many(["Ben: The train was late again.", "Ana: I started a pottery class."])
    assert session in [
        h.id for h in store.search("What is the name of the cat Ben's sister adopted?", 3).hits
    ]
    assert session in [h.id for h in store.search("when does Ben move into the new flat?", 3).hits]


@both_engines
def test_a_memory_without_a_vector_yet_is_judged_by_its_words(
    local_store: Callable[..., Store],
) -> None:
    """A capture stores memories before their vectors: the next prompt finds them by
    their words rather than not at all."""
    store = local_store()
    store.add_many(list(PROJECT.values()))
    fresh = store.add("The staging database password rotates every Friday at noon.", embed=False)
    assert store.stats().pending_vectors == 1
    assert fresh in [
        h.id for h in store.search("when does the staging database password rotate?").hits
    ]
    assert store.search("write a haiku about autumn leaves").hits == ()


WORDS = st.sampled_from(
    sorted(
        {w for text in PROJECT.values() for w in text.replace(";", " ").replace(",", " ").split()}
        | {"Kubernetes", "Andrew", "Tokyo", "Banana", "Release", "OIDC", "Maria", "Sunday"}
    )
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(WORDS, min_size=1, max_size=8))
def test_letter_case_changes_no_floor_decision(
    cased_and_lower: tuple[Store, Store], words: list[str]
) -> None:
    """Every memory and every query lower-cased: the same decision, the same hits (the
    model and the lexical arm are case-blind, and so is every rule of the floor). Words of
    one letter are left out: the lexical arm reads a lone capital as a name ("vitamin A")."""
    query = " ".join(w for w in words if len(w.strip(".:'")) > 1) or "release"
    cased, lower = cased_and_lower
    one = [h.id for h in cased.search(query, 5).hits]
    two = [h.id for h in lower.search(query.lower(), 5).hits]
    assert one == two, query


@pytest.fixture(scope="module")
def cased_and_lower(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Store]:
    import mnemex

    folder = tmp_path_factory.mktemp("case")
    stores = []
    for name, texts in (
        ("cased", PROJECT.values()),
        ("lower", [t.lower() for t in PROJECT.values()]),
    ):
        store = mnemex.open(folder / f"{name}.db", embedder="local", dedup=False)
        store.add_many(
            [{"id": key, "content": text} for key, text in zip(PROJECT, texts, strict=True)]
        )
        stores.append(store)
    return stores[0], stores[1]
