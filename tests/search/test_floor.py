"""The relevance floor: its rule over each arm's evidence, what the model reads, what a query
names, and raw-expression membership."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemex.search.floor import (
    CALIBRATED,
    Evidence,
    Floor,
    floor_for,
    frequency,
    lift,
    model_words,
    readable,
    relevant_hit,
    relevant_query,
    words,
)
from mnemex.store import Store
from tests.pg_fixtures import both_engines

FLOOR = CALIBRATED["all-minilm-l6-v2"]


def never() -> float:
    raise AssertionError("the query's lift was asked although it decides nothing")


def test_floor_is_calibrated_per_model() -> None:
    assert floor_for("all-MiniLM-L6-v2-int8:8199be6f") is FLOOR
    assert floor_for("sentence-transformers/all-MiniLM-L6-v2") is FLOOR
    assert floor_for("text-embedding-3-small") is None and floor_for(None) is None


def test_a_cosine_well_above_the_background_answers_alone() -> None:
    assert relevant_query(FLOOR, [Evidence(FLOOR.above, FLOOR.above, 0.0)], never)
    assert not relevant_query(
        FLOOR, [Evidence(FLOOR.above - 0.01, FLOOR.above - 0.01, 0.0)], lambda: -math.inf
    )
    assert not relevant_query(FLOOR, [], never)


@pytest.mark.parametrize("text", [0.3, 0.45, 0.6, 0.9])
def test_both_arms_vouch_together(text: float) -> None:
    """A memory holding more of the query needs less of the vector arm."""
    assert relevant_query(FLOOR, [Evidence(FLOOR.agree - text, FLOOR.agree - text, text)], never)
    missing = Evidence(FLOOR.agree - text - 0.01, FLOOR.agree - text - 0.01, text)
    assert not relevant_query(FLOOR, [missing], lambda: -math.inf)


def test_the_arms_vouch_for_the_same_memory() -> None:
    apart = [
        Evidence(FLOOR.above - 0.01, FLOOR.above - 0.01, 0.0),
        Evidence(-0.3, -0.3, FLOOR.agree),
    ]
    assert not relevant_query(FLOOR, apart, lambda: -math.inf)


def test_a_query_naming_what_the_store_is_about_needs_less_of_the_vector_arm() -> None:
    named = [Evidence(FLOOR.named_above, FLOOR.named_above, 0.0)]
    asked: list[int] = []

    def characteristic() -> float:
        asked.append(1)
        return FLOOR.characteristic

    assert relevant_query(FLOOR, named, characteristic) and asked == [1]
    assert not relevant_query(FLOOR, named, lambda: FLOOR.characteristic - 0.1)
    # below named_above, naming the store does not help
    assert not relevant_query(
        FLOOR, [Evidence(FLOOR.named_above - 0.01, FLOOR.named_above - 0.01, 0.0)], never
    )


def test_text_the_model_cannot_read_is_judged_by_its_text_score() -> None:
    """No cosine (the model cannot read the query or the memory, or the memory has no
    vector yet): the lexical arm decides, however high or low a cosine would be."""
    assert relevant_query(FLOOR, [Evidence(None, None, FLOOR.unread_text)], never)
    assert not relevant_query(FLOOR, [Evidence(None, None, FLOOR.unread_text - 0.01)], never)
    assert relevant_hit(FLOOR, Evidence(None, None, FLOOR.hit_text))
    assert not relevant_hit(FLOOR, Evidence(None, None, FLOOR.hit_text - 0.01))


@pytest.mark.parametrize(
    ("beyond", "text", "kept"),
    [
        (0.0, 0.0, True),
        (-0.01, 0.15, True),
        (-0.01, 0.14, False),
        (None, 0.2, True),
        (None, 0.0, False),
    ],
)
def test_a_hit_stays_when_an_arm_finds_it_relevant(
    beyond: float | None, text: float, kept: bool
) -> None:
    """A hit is read against what unrelated queries give one memory, not against the
    best memory an unrelated query finds (above: the level, here far out of reach)."""
    assert relevant_hit(FLOOR, Evidence(-1.0 if beyond is not None else None, beyond, text)) is kept


def test_the_model_reads_its_own_words_only() -> None:
    vocabulary, _ = model_words()
    assert readable("How do users sign in now?", vocabulary)
    assert readable("Why is the parse_invoice_pdf job slow?", vocabulary)  # one word of six
    assert readable("", vocabulary) and readable("2024 42", vocabulary)
    assert not readable("用户现在怎么登录小程序？还要短信吗", vocabulary)
    assert not readable("엘리베이터가 밤 12시부터 보안 모드", vocabulary)
    assert not readable("Как приготовить борщ?", vocabulary)
    assert not readable("OIDC cutover", vocabulary)  # jargon: the cosine says little
    assert words("Éloïse's 发票 café") == ["eloise", "s", "发", "票", "cafe"]


@given(st.text(max_size=80))
def test_what_the_model_reads_does_not_depend_on_case(text: str) -> None:
    vocabulary, _ = model_words()
    assert readable(text, vocabulary) == readable(text.lower(), vocabulary)
    assert readable(text, vocabulary) == readable(text.upper(), vocabulary)


def test_word_frequency_follows_the_vocabulary_rank() -> None:
    vocabulary, first = model_words()
    the, caroline = frequency("the", vocabulary, first), frequency("caroline", vocabulary, first)
    assert the == pytest.approx(0.1) and 0 < caroline < the / 1000
    assert frequency("okta", vocabulary, first) <= caroline  # not a whole word of it
    assert frequency("##s", vocabulary, first) < caroline


def test_lift_finds_what_the_store_is_about() -> None:
    vocabulary, first = model_words()
    # "caroline" in half of 600 chat turns of 25 tokens: far more than English predicts;
    # "time" in a tenth: about what it predicts; "2023" left out; "andrew" not held.
    terms = [("caroline", 300), ("time", 60), ("2023", 500), ("andrew", 0)]
    high = lift(terms, 600, 25.0, vocabulary, first)
    assert high == pytest.approx(lift([("caroline", 300)], 600, 25.0, vocabulary, first))
    assert high >= FLOOR.characteristic
    assert lift([("time", 60)], 600, 25.0, vocabulary, first) < 1.0
    assert lift([("andrew", 0), ("2023", 9)], 600, 25.0, vocabulary, first) == -math.inf
    assert lift(terms, 0, 25.0, vocabulary, first) == -math.inf


def test_a_floor_needs_every_cut_off() -> None:
    with pytest.raises(TypeError):
        Floor(model="x", above=0.2)  # type: ignore[call-arg]


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


def _words_char_by_char(text: str) -> list[str]:
    """words() as first written, case-folded: every word through NFD, combining marks dropped."""
    import re
    import unicodedata

    ideograph = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
    out: list[str] = []
    for word in re.findall(r"\w+", text.casefold()):
        out.extend(ideograph.findall(word))
        for piece in ideograph.split(word):
            plain = "".join(
                c for c in unicodedata.normalize("NFD", piece) if unicodedata.category(c) != "Mn"
            )
            if plain:
                out.append(plain)
    return out


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60) | st.text(max_size=60))
def test_words_of_ascii_text_take_the_short_way_to_the_same_words(text: str) -> None:
    assert words(text) == _words_char_by_char(text)


def test_text_that_lower_case_makes_ascii_has_the_same_words() -> None:
    text = "\u212a is the Kelvin sign, \u0130 a capital dotted I"
    assert (
        words(text)
        == _words_char_by_char(text)
        == ["k", "is", "the", "kelvin", "sign", "i", "a", "capital", "dotted", "i"]
    )
