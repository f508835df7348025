"""Query building: pure functions, and properties checked against real SQLite."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.search.query import (
    Term,
    Token,
    build_terms,
    content_terms,
    idf,
    keep_rarest,
    normalized_score,
    quote,
    shape,
)
from mnemex.search.stopwords import STOPWORDS


def tok(surface: str, position: int, stem: str | None = None) -> Token:
    return Token(surface=surface, stem=stem or surface, position=position)


def test_quote_escapes_double_quotes() -> None:
    assert quote('say "hi"') == '"say ""hi"""'


def test_words_become_quoted_terms_deduplicated_by_stem() -> None:
    terms = build_terms(
        [tok("running", 0, "run"), tok("the", 1), tok("runs", 2, "run"), tok("tests", 3, "test")],
        STOPWORDS,
    )
    assert [(t.key, t.match, t.stop) for t in terms] == [
        ("run", '"running"', False),
        ("the", '"the"', True),
        ("test", '"tests"', False),
    ]


def run(text: str, position: int) -> Token:
    return Token(text, text, position, cjk_run=True)


def test_cjk_runs_become_adjacent_pairs() -> None:
    tokens = [run("数据库", 0), tok("sql", 1), run("会", 2)]
    terms = build_terms(tokens, frozenset())
    assert [(t.key, t.match, t.phrase) for t in terms] == [
        ("数 据", '"数 据"', True),
        ("据 库", '"据 库"', True),
        ("sql", '"sql"', False),
        ("会", '"会"', False),
    ]


def test_cjk_runs_split_on_gaps() -> None:
    terms = build_terms([run("数", 0), run("据", 1)], frozenset())
    assert [t.key for t in terms] == ["数", "据"]


def test_tokenizer_keeps_cjk_runs_apart(store) -> None:  # type: ignore[no-untyped-def]
    tokens = store._lexicon.tokenize("〆 々 Running数据库, 会话!")
    assert [(t.surface, t.stem, t.cjk_run) for t in tokens] == [
        ("〆", "〆", True),
        ("々", "々", True),
        ("running", "run", False),
        ("数据库", "数据库", True),
        ("会话", "会话", True),
    ]


def test_stop_words_dropped_unless_nothing_else() -> None:
    the = Term("the", '"the"', False, True)
    fox = Term("fox", '"fox"', False, False)
    assert content_terms([the, fox]) == ([fox], [the])
    assert content_terms([the]) == ([the], [])


def test_idf_matches_fts5() -> None:
    assert idf(1, 1000) > idf(10, 1000) > idf(100, 1000)
    assert idf(900, 1000) == 1e-6  # FTS5 clamps non-positive IDF


def test_keep_rarest() -> None:
    terms = [Term(str(i), f'"{i}"', False, False) for i in range(5)]
    assert keep_rarest(terms, [50, 1, 40, 2, 30], 3) == [1, 3, 4]
    assert keep_rarest(terms, [50, 1, 40, 2, 30], 10) == [0, 1, 2, 3, 4]


def test_shape() -> None:
    assert shape([10, 20, 30], budget=0, pool=10) == ([0, 1, 2], [])  # exact
    assert shape([10, 20, 30], budget=100, pool=10) == ([0, 1, 2], [])  # fits
    essential, rest = shape([5000, 30, 40, 9000], budget=100, pool=10)
    assert essential == [1, 2] and rest == [0, 3]
    # Rare terms too few for the pool: keep adding.
    essential, rest = shape([3, 5000, 9000, 20000], budget=100, pool=50)
    assert essential == [0, 1] and rest == [2, 3]
    # Not worth it when the essential rows are most of the work.
    assert shape([600, 700, 800], budget=100, pool=1000) == ([0, 1, 2], [])
    assert shape([900, 1000], budget=100, pool=10) == ([0], [1])


@given(st.floats(0.001, 1e6), st.floats(0.001, 1e6))
def test_normalized_score_bounds_and_order(a: float, b: float) -> None:
    norm = 10.0
    sa, sb = normalized_score(a, norm), normalized_score(b, norm)
    assert 0.0 < sa <= 1.0
    if a < b:
        assert sa <= sb


# -- properties on a real store ---------------------------------------------------

_WORD = st.text(
    alphabet=st.characters(categories=("Lu", "Ll", "Lo", "Nd"), max_codepoint=0x2FFFF),
    min_size=1,
    max_size=12,
)
_ANY = st.text(
    alphabet=st.characters(codec=None, categories=None, exclude_categories=()),
    max_size=60,
)
_SYNTAX = st.text(alphabet="\"()*:^-+{}[]/\\.,;!?'`~@#$%&|<>= \t\nANDORNOTNEAR", max_size=30)

_STORE_DIR = tempfile.TemporaryDirectory(prefix="mnemex-prop-")
_STORE = mnemex.open(Path(_STORE_DIR.name) / "prop.db")
_STORE.add_many(
    [
        "The quick brown fox jumps over the lazy dog",
        "Deploys go through fly.io with blue/green releases",
        "我们昨天决定使用数据库来存储用户的会话",
        "사과를 먹었다",
        "La reunión con el equipo de diseño fue productiva",
        "NEAR AND OR NOT are FTS5 operators",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_ANY, _SYNTAX, st.lists(st.one_of(_WORD, _SYNTAX)).map(" ".join)))
def test_sanitizer_never_raises(query: str) -> None:
    result = _STORE.search(query)
    assert all(0.0 <= h.score <= 1.0 for h in result.hits)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(word=_WORD, before=st.one_of(_SYNTAX, _ANY), after=st.one_of(_SYNTAX, _ANY), data=st.data())
@example(word="〆", before="", after="々", data=None).via(
    "found by hypothesis: CJK runs split by a space"
)
def test_a_word_in_a_memory_is_always_found(
    word: str, before: str, after: str, data: st.DataObject | None
) -> None:
    # Only words FTS5 can index at all (it treats some code points as separators).
    assume(_STORE._lexicon.tokenize(word))
    filler = data.draw(st.sampled_from(["notes about", "remember that", "", "x"])) if data else ""
    with tempfile.TemporaryDirectory() as tmp, mnemex.open(Path(tmp) / "w.db") as store:
        store.add_many(["completely unrelated text", "another memory entirely"])
        ident = store.add(f"{filler} {word} end")
        hits = store.search(f"{before} {word} {after}", limit=50).hits
        assert hits, f"no hits for {word!r}"
        assert ident in {h.id for h in hits}
