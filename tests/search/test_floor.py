"""The relevance floor and raw-expression membership."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnemex.index.fts import plan
from mnemex.search.floor import (
    Floor,
    floor_for,
    names_held,
    names_nothing,
    relevant_hit,
    relevant_query,
    writes_as_name,
)
from mnemex.search.pipeline import NOTHING_RELEVANT
from mnemex.store import Store
from tests.conftest import FakeEmbedder
from tests.pg_fixtures import both_engines

FLOOR = Floor(query_cosine=0.4, agree_cosine=0.3, agree_text=0.3, hit_cosine=0.2, hit_text=0.15)


def test_floor_is_calibrated_per_model() -> None:
    assert floor_for("all-MiniLM-L6-v2-int8:8199be6f") is not None
    assert floor_for("sentence-transformers/all-MiniLM-L6-v2") is not None
    assert floor_for("text-embedding-3-small") is None and floor_for(None) is None


def test_a_query_is_answered_when_one_arm_is_sure_or_both_agree() -> None:
    assert relevant_query(FLOOR, [1, 2], {}, {1: 0.1, 2: 0.45})  # the vector arm is sure
    assert relevant_query(FLOOR, [1], {1: 0.35}, {1: 0.31})  # both arms agree
    assert not relevant_query(FLOOR, [1], {1: 0.9}, {1: 0.25})  # words alone are not enough
    assert not relevant_query(FLOOR, [1, 2], {1: 0.2}, {1: 0.35, 2: 0.1})
    assert not relevant_query(FLOOR, [], {}, {})


def test_the_gate_reads_token_windows_of_the_candidates_it_would_let_through() -> None:
    asked: list[list[int]] = []

    def tokens(found: dict[int, float]) -> Callable[[list[int]], dict[int, float]]:
        def token_cosines(seqs: list[int]) -> dict[int, float]:
            asked.append(seqs)
            return {s: c for s, c in found.items() if s in seqs}

        return token_cosines

    cosines = {1: 0.1, 2: 0.45, 3: 0.5}
    # 2 and 3 pass on their best windows, a sentence's; their token windows do not.
    assert not relevant_query(FLOOR, [1, 2, 3], {}, cosines, tokens({2: 0.2, 3: 0.35}))
    assert asked == [[2, 3]]  # only the candidates the best windows let through
    # 3 has no sentence windows: its best window is a token window.
    assert relevant_query(FLOOR, [1, 2, 3], {}, cosines, tokens({2: 0.2}))
    # Both arms still vouch on the token window's cosine.
    assert relevant_query(FLOOR, [2], {2: 0.35}, {2: 0.45}, tokens({2: 0.31}))
    asked.clear()
    assert not relevant_query(FLOOR, [1], {}, cosines, tokens({}))
    assert asked == []  # nothing passes: nothing asked


def test_a_chunk_passes_on_either_arm_alone_when_the_query_names_what_the_store_holds() -> None:
    asked: list[list[int]] = []

    def chunks(of: set[int]) -> Callable[[list[int]], list[int]]:
        def pick(seqs: list[int]) -> list[int]:
            asked.append(seqs)
            return [s for s in seqs if s in of]

        return pick

    text, cosines = {1: 0.45, 3: 0.1}, {1: 0.1, 2: 0.32, 3: 0.2}
    assert not relevant_query(FLOOR, [1, 2, 3], text, cosines)  # no chunks: the gate as is
    assert relevant_query(FLOOR, [1, 2, 3], text, cosines, chunks=chunks({1}))  # text alone
    assert relevant_query(FLOOR, [1, 2, 3], text, cosines, chunks=chunks({2}))  # cosine alone
    assert asked == [[1, 2], [1, 2]]  # asked only about what either arm lets through
    assert not relevant_query(FLOOR, [1, 2, 3], text, cosines, chunks=chunks({3}))
    # A chunk passing on its best window's cosine is read on its best token window's.
    assert not relevant_query(FLOOR, [2], {}, cosines, lambda seqs: {2: 0.25}, chunks({2}))
    assert relevant_query(FLOOR, [2], {}, cosines, lambda seqs: {2: 0.31}, chunks({2}))
    asked.clear()
    assert relevant_query(FLOOR, [2, 4], {}, {4: 0.5}, chunks=chunks({2}))  # the gate passes
    assert asked == []


def test_a_query_names_a_word_the_store_holds_when_its_term_has_rows(store: Store) -> None:
    store.add("Caroline went to the pride parade in June")
    lexical = plan(store.session.lexicon, "When did Caroline or Gina see the parade?")
    assert names_held(lexical, "When did Caroline or Gina see the parade?")
    lexical = plan(store.session.lexicon, "When did Gina see the Caroline parade?")
    assert names_held(lexical, "When did Gina see the Caroline parade?")
    for query in ("When did Gina see the parade?", "when did caroline see the parade?"):
        assert not names_held(plan(store.session.lexicon, query), query)
    assert not names_held(plan(store.session.lexicon, "Caroline"), "Caroline")  # opens it


def test_a_memory_writes_a_word_of_the_query_as_a_name(store: Store) -> None:
    store.add("- Caroline: we went to the parade\n- Melanie: Pride was in June")
    lexical = plan(store.session.lexicon, "when did caroline see the parade?")
    assert writes_as_name(lexical, "- Caroline: we went to the parade")
    assert writes_as_name(lexical, "We met caroline and then Caroline left.")
    assert writes_as_name(lexical, "- caroline: we went to the Parade")
    assert not writes_as_name(lexical, "- caroline: we went to the parade")
    assert not writes_as_name(lexical, "Caroline went to the parade")  # opens the text
    assert not writes_as_name(lexical, "Parade day. Caroline came.")  # opens a sentence
    assert names_nothing("when did caroline see the parade?") and names_nothing("что 42")
    assert names_nothing("When did caroline see the parade? Was it in june?")  # openings
    assert not names_nothing("when did Caroline see the parade?")
    assert not names_nothing("what is NATO")


@pytest.mark.parametrize(
    ("text", "cosine", "kept"),
    [
        (None, 0.25, True),
        (0.2, None, True),
        (0.1, 0.1, False),
        (None, -0.3, False),
        (None, None, False),
    ],
)
def test_a_hit_stays_when_an_arm_finds_it_relevant(
    text: float | None, cosine: float | None, kept: bool
) -> None:
    assert relevant_hit(FLOOR, text, cosine) is kept


@both_engines
def test_raw_expression_decides_membership_in_hybrid(vector_store: Store) -> None:
    vector_store.add_many(
        [
            "Stripe webhooks retry for three days",
            "Billing webhooks from Stripe must be idempotent",
            "Invoices are numbered per tenant",
            "The payment provider sends events we must deduplicate",
        ]
    )
    plain = vector_store.search("billing webhooks", 10)
    assert plain.mode_used == "hybrid" and len(plain.hits) > 1
    raw = vector_store.search('"billing" AND "webhooks"', 10, raw=True)
    assert raw.mode_used == "lexical"  # a raw expression is the lexical arm's, in every mode
    assert [h.snippet for h in raw.hits] and all(
        "billing" in h.snippet.lower() and "webhooks" in h.snippet.lower() for h in raw.hits
    )
    assert len(raw.hits) == 1


def test_a_search_that_finds_nothing_says_so(store: Store) -> None:
    store.add("Invoices are numbered per tenant")
    result = store.search("kubernetes autoscaling")
    assert result.hits == () and result.notes


class WordsEmbedder(FakeEmbedder):
    """The fake vectors in 256 dimensions (few collisions, so a text's cosine to a question
    is about the words they share), under the name of the model with a calibrated floor."""

    model_id = "fake:all-minilm-l6-v2"
    dim = 256


TOPICS = (
    "Caroline: I went to the pride parade on Sunday with friends.",
    "Melanie: The kids loved our camping trip in the mountains.",
    "Caroline: I started counseling classes at the community college.",
    "Melanie: I finished a painting of a lake at sunrise.",
    "Caroline: My adoption interview went really well.",
    "Melanie: We adopted a puppy named Oscar last month.",
)
SMALL_TALK = (
    "Wonderful news, congratulations!",
    "Thanks, honestly grateful.",
    "Weather here stays rainy, gloomy, chilly.",
    "Busy weeks, deadlines everywhere.",
    "Coffee soon? Maybe Thursday morning.",
    "Sounds lovely, absolutely.",
    "Grandma sends hugs.",
    "Tell her hello back.",
    "Traffic downtown was terrible yesterday.",
    "Bought fresh tomatoes, basil, mozzarella.",
)


def day_notes(folder: Path) -> list[str]:
    """A chat written as an agent's day notes: a file a day, one topic among small talk,
    each file one chunk of several lines; the files' text."""
    written = []
    for month, topic in enumerate(TOPICS, 1):
        day = f"2023-{month:02d}-10"
        text = f"# {day}\n\n" + "\n".join(f"- {line}" for line in (topic, *SMALL_TALK)) + "\n"
        path = folder / "memory" / f"{day}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (time.time() - 3600, time.time() - 3600))
        written.append(text)
    return written


def arms_of(store: Store, query: str, **where: Any) -> tuple[float, float]:
    """The best candidate's text score and cosine, with the floor off."""
    hit = store.search(query, 1, threshold=False, explain=True, **where).hits[0]
    assert hit.explain is not None
    return hit.explain["lexical"]["score"], hit.explain["vector"]["cosine"]


@both_engines
def test_a_chunk_of_several_lines_answers_a_question_naming_what_the_store_holds(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = make_store("ws.db", embedder=WordsEmbedder())
    texts = day_notes(tmp_path / "agent")
    store.sync(tmp_path / "agent")
    asked = "When did Caroline go to the pride parade?"
    text, cosine = arms_of(store, asked)
    assert cosine < FLOOR.agree_cosine <= text  # the gate of a single memory refuses it
    hits = store.search(asked).hits
    assert [h.location.path for h in hits if h.location] == ["memory/2023-01-10.md"]
    # Written without a capital, or with one only where the sentence opens: the chunk
    # writes "caroline" as a name.
    for typed in (asked.lower(), "When did caroline go to the pride parade?"):
        hits = store.search(typed).hits
        assert [h.location.path for h in hits if h.location] == ["memory/2023-01-10.md"]
    # Naming nothing, no word of it a name in the chunk: the gate of a single memory.
    refused = store.search("When did the speaker go to the pride parade?")
    assert refused.hits == () and NOTHING_RELEVANT in refused.notes
    # Naming someone the store never heard of: its text alone would pass the chunk.
    foreign = "Why did Gina skip the pride parade with friends?"
    text, cosine = arms_of(store, foreign)
    assert cosine < FLOOR.agree_cosine <= text
    assert store.search(foreign).hits == ()
    for typed in (foreign.lower(), "Why did gina skip the pride parade with friends?"):
        refused = store.search(typed)  # no word of it is a name in the chunk
        assert refused.hits == () and NOTHING_RELEVANT in refused.notes
    # The same text as a memory of its own, not a chunk: the gate of a single memory.
    store.add_many(texts, namespace="notes")
    assert arms_of(store, asked, namespace="notes")[1] < FLOOR.agree_cosine
    assert store.search(asked, namespace="notes").hits == ()
