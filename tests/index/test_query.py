"""Query building: pure functions, and properties checked against real SQLite."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.index.query import (
    MAX_CJK_STOPWORD,
    Term,
    Token,
    build_terms,
    capital_letters,
    content_terms,
    expand_terms,
    idf,
    keep_rarest,
    normalized_score,
    quote,
    run_pieces,
    shape,
    strip_particle,
    weak_word,
)
from mnemex.index.retrieval import plan
from mnemex.index.stopwords import (
    ARABIC,
    CHINESE,
    ENGLISH,
    JAPANESE,
    KOREAN,
    KOREAN_PARTICLES,
    PORTUGUESE,
    SPANISH,
    STOPWORDS,
)
from mnemex.store import Store


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
    tokens = store.session.lexicon.tokenize("〆 々 Running数据库, 会话!")
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


# -- query expansion --------------------------------------------------------------


def words(text: str) -> list[Token]:
    """Tokens of lower-case, accent-free text (stems as written)."""
    return [tok(w, i) for i, w in enumerate(text.split())]


def kept(terms: list[Term]) -> list[str]:
    return [t.key for t in content_terms(terms)[0]]


def test_every_stop_word_is_in_the_tokenizers_form(store: Store) -> None:
    for word in ENGLISH | SPANISH | PORTUGUESE | ARABIC:
        assert [(t.surface, t.cjk_run) for t in store.session.lexicon.tokenize(word)] == [
            (word, False)
        ]
    for word in CHINESE | JAPANESE | KOREAN | set(KOREAN_PARTICLES):
        assert [(t.surface, t.cjk_run) for t in store.session.lexicon.tokenize(word)] == [
            (word, True)
        ]
    assert max(len(w) for w in CHINESE | JAPANESE) <= MAX_CJK_STOPWORD


def test_words_that_are_content_elsewhere_are_not_stop_words() -> None:
    # English words and abbreviations that are function words in Spanish or Portuguese.
    assert not {"son", "era", "mi", "os", "nos", "eu", "ate", "sem"} & STOPWORDS


@pytest.mark.parametrize(
    ("question", "content"),
    [
        ("what did we decide about the invoices", ["decide", "invoices"]),
        ("que decidimos con el equipo sobre las facturas", ["decidimos", "equipo", "facturas"]),
        ("quando a equipe decidiu sobre as faturas", ["equipe", "decidiu", "faturas"]),
        ("ماذا قررنا في الاجتماع مع العميل", ["قررنا", "الاجتماع", "العميل"]),
    ],
)
def test_stop_words_of_each_language(question: str, content: list[str]) -> None:
    assert kept(expand_terms(words(question), STOPWORDS)) == content


def test_one_letter_words_are_set_aside_numbers_and_two_letter_words_kept() -> None:
    terms = expand_terms(words("vitamin c dose in 2023 for 5 days db ui"), STOPWORDS)
    assert kept(terms) == ["vitamin", "dose", "2023", "5", "days", "db", "ui"]
    assert [t.key for t in terms if t.stop] == ["c", "in", "for"]
    assert weak_word("x", frozenset()) and not weak_word("7", frozenset())


@pytest.mark.parametrize(
    ("text", "letters"),
    [
        ("What did B. F. Skinner write about reinforcement?", {"b", "f"}),
        ("A study of vitamin A in T cells", {"a", "t"}),  # the article A opens the sentence
        ("Results. A dose of vitamin C", {"c"}),
        ("I think it's what I'd say", set()),  # the pronoun and contraction tails
        ("hepatitis b in lower case", set()),
        ("the ABC of DNA", set()),  # capitals inside words are words
    ],
)
def test_capital_letters_that_name_something(text: str, letters: set[str]) -> None:
    assert capital_letters(text) == letters


def test_a_term_knows_its_word(store: Store) -> None:
    lexical = plan(store.session.lexicon, "Éloïse's café", expand=True)
    assert [t.word for t in lexical.terms] == ["eloise", "cafe"]


def test_initials_and_capital_letters_are_searched(store: Store) -> None:
    lexical = plan(store.session.lexicon, "What did B. F. Skinner say about vitamin A and T cells?")
    assert [t.key for t in lexical.terms] == [
        "b",
        "f",
        "skinner",
        "sai",
        "vitamin",
        "a",
        "t",
        "cell",
    ]


def test_a_repeated_term_counts_each_time(store: Store) -> None:
    store.add_many(["Retrieval by title", "Titles of articles"])
    lexical = plan(store.session.lexicon, "retrieval of titles: titles and the title retrieval")
    assert {t.key: t.count for t in lexical.terms} == {"retriev": 2, "titl": 3}
    assert lexical.match == '"retrieval" OR "retrieval" OR "titles" OR "titles" OR "titles"'
    lexical = plan(store.session.lexicon, "retrieval retrieval", expand=False)
    assert [(t.key, t.count) for t in lexical.terms] == [("retriev", 2)]


def test_a_query_of_weak_words_keeps_them() -> None:
    assert kept(expand_terms(words("who is x"), STOPWORDS)) == ["who", "is", "x"]


def test_expansion_deduplicates_and_content_wins() -> None:
    # "does" is a stop word whose stem is the content word "doe".
    terms = expand_terms([tok("does", 0, "doe"), tok("doe", 1), tok("does", 2, "doe")], STOPWORDS)
    assert [(t.key, t.match, t.stop) for t in terms] == [("doe", '"doe"', False)]
    terms = expand_terms([run("数据", 0), run("数据库", 1)], STOPWORDS)
    assert [t.key for t in terms] == ["数 据", "据 库"]


@pytest.mark.parametrize(
    ("word", "stem"),
    [
        ("사과를", "사과"),
        ("데이터베이스는", "데이터베이스"),
        ("서울에서는", "서울"),
        ("고양이에게", "고양이"),
        ("친구랑", "친구"),
        ("회의", "회의"),  # 의 is a particle, but one syllable is too short a rest
        ("책을", "책을"),
        ("사과", "사과"),
    ],
)
def test_strip_particle(word: str, stem: str) -> None:
    assert strip_particle(word) == stem


def test_particles_are_tried_longest_first() -> None:
    assert list(KOREAN_PARTICLES) == sorted(KOREAN_PARTICLES, key=len, reverse=True)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        (
            "上海的客户要什么发票",
            [("上海", False), ("的", True), ("客户要", False), ("什么", True), ("发票", False)],
        ),
        ("为什么", [("为什么", True)]),
        (
            "明日の会議でデータベースの移行計画を説明します",
            [
                ("明日", False),
                ("の", True),
                ("会議", False),
                ("で", True),
                ("データベース", False),
                ("の", True),
                ("移行計画", False),
                ("を", True),
                ("説明", False),
                ("します", True),
            ],
        ),
        ("会議はいつですか", [("会議", False), ("はいつですか", True)]),
        ("これは何ですか", [("これは", True), ("何", True), ("ですか", True)]),
        ("おにぎり", [("おにぎり", False)]),  # hiragana not made of stop words is a word
        ("もも", [("もも", False)]),  # も + も, but a run never opens with a particle
        ("사과를", [("사과", False)]),
        ("무엇을", [("무엇", True)]),
        ("내가", [("내가", True)]),
        ("그림", [("그림", False)]),  # 그 ("that") is a word, not a piece of one
    ],
)
def test_run_pieces(text: str, pieces: list[tuple[str, bool]]) -> None:
    assert run_pieces(text, STOPWORDS) == pieces


def test_long_hiragana_runs_are_cut_in_linear_time() -> None:
    assert run_pieces("の" * 100_000, STOPWORDS) == [("の" * 100_000, False)]
    assert run_pieces("本" + "の" * 100_000, STOPWORDS) == [("本", False), ("の" * 100_000, True)]


def test_cjk_questions_keep_their_content_phrases() -> None:
    terms = expand_terms([run("上海的客户要什么发票", 0)], STOPWORDS)
    assert kept(terms) == ["上 海", "客 户", "户 要", "发 票"]
    terms = expand_terms([run("사과를", 0), run("누가", 1), run("먹었어", 2)], STOPWORDS)
    assert kept(terms) == ["사 과", "먹 었", "었 어"]


def test_punctuation_makes_no_token(store: Store) -> None:
    assert store.session.lexicon.tokenize("¿¡?!… -- _ · 、。「」") == []


def test_without_expansion_terms_are_as_before(store: Store) -> None:
    text = "¿Qué es el 数据库? 사과를 a x 2023"
    off = plan(store.session.lexicon, text, expand=False)
    assert [t.key for t in off.terms] == [
        "que",
        "es",
        "el",
        "数 据",
        "据 库",
        "사 과",
        "과 를",
        "x",
        "2023",
    ]
    assert [t.key for t in off.dropped] == ["a"]
    assert {*off.terms, *off.dropped} == set(
        build_terms(store.session.lexicon.tokenize(text), ENGLISH)
    )
    on = plan(store.session.lexicon, text)
    assert [t.key for t in on.terms] == ["数 据", "据 库", "사 과", "2023"]
    assert [t.key for t in on.dropped] == ["que", "es", "el", "a", "x"]


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
@example(word="I", before="", after="MEMORY", data=None).via(
    "found by hypothesis: a weak word beside a content word is set aside"
)
def test_a_word_in_a_memory_is_always_found(
    word: str, before: str, after: str, data: st.DataObject | None
) -> None:
    # Only words FTS5 can index at all (it treats some code points as separators).
    tokens = _STORE.session.lexicon.tokenize(word)
    assume(tokens)
    if all(weak_word(t.surface, STOPWORDS) for t in tokens):
        # A weak word ("I", "the") is searched only when the query has nothing else.
        before = after = ""
    filler = data.draw(st.sampled_from(["notes about", "remember that", "", "x"])) if data else ""
    with tempfile.TemporaryDirectory() as tmp, mnemex.open(Path(tmp) / "w.db") as store:
        store.add_many(["completely unrelated text", "another memory entirely"])
        ident = store.add(f"{filler} {word} end")
        hits = store.search(f"{before} {word} {after}", limit=50, threshold=False).hits
        assert hits, f"no hits for {word!r}"
        assert ident in {h.id for h in hits}
