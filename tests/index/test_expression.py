"""FTS5's query language, parsed (mnemex.index.expression): the tree, and agreement with
FTS5 on what is an expression at all."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidQuery
from mnemex.index.expression import COLUMNS, Leaf, Node, Piece, parse, strings
from mnemex.storage import TOKENIZER


def test_not_binds_tightest_then_and_then_or() -> None:
    a, b, c, d = (Leaf(((Piece(w),),)) for w in "abcd")
    assert parse("a OR b AND c NOT d") == Node("OR", (a, Node("AND", (b, Node("NOT", (c, d))))))
    assert parse("a NOT b NOT c") == Node("NOT", (Node("NOT", (a, b)), c))
    # Phrases side by side are ANDed before any operator.
    assert parse("a b NOT c") == Node("NOT", (Node("AND", (a, b), implicit=True), c))
    assert parse("(a OR b) AND c") == Node("AND", (Node("OR", (a, b)), c))


def test_phrases_near_groups_prefixes_and_columns() -> None:
    assert parse('"one two" + three*') == Leaf(((Piece("one two"), Piece("three", prefix=True)),))
    assert parse('"say ""hi"""') == Leaf(((Piece('say "hi"'),),))
    assert parse("NEAR(a b, 3)") == Leaf(((Piece("a"),), (Piece("b"),)), near=True)
    assert parse("near") == Leaf(((Piece("near"),),))  # NEAR only before "("
    assert parse("^a") == Leaf(((Piece("a"),),), initial=True)
    assert parse("tags: a") == Leaf(((Piece("a"),),), columns=frozenset({"tags"}))
    assert parse("-tags: a") == Leaf(((Piece("a"),),), columns=frozenset({"content"}))
    assert parse("{Content TAGS}: a") == Leaf(((Piece("a"),),))
    nested = parse("content: (a OR tags: b)")
    assert isinstance(nested, Node)
    assert [leaf.columns for leaf in nested.children if isinstance(leaf, Leaf)] == [
        frozenset({"content"}),
        frozenset(),
    ]
    assert strings(parse('a AND "b c" + d* NOT NEAR(e f)')) == ["a", "b c", "d", "e", "f"]
    assert parse("a and b") == Node(
        "AND", tuple(Leaf(((Piece(w),),)) for w in ("a", "and", "b")), implicit=True
    )
    assert frozenset({"content", "tags"}) == COLUMNS


@pytest.mark.parametrize(
    "expression", ["a OR", "NOT a", "(a", "a)", "a (b)", '"open', "a.b", "nope: a", ""]
)
def test_what_fts5_refuses_is_refused(expression: str) -> None:
    with pytest.raises(InvalidQuery):
        parse(expression)


_FTS5 = sqlite3.connect(":memory:")
_FTS5.execute(f"CREATE VIRTUAL TABLE t USING fts5(content, tags, tokenize='{TOKENIZER}')")


def _fts5_accepts(expression: str) -> bool:
    try:
        _FTS5.execute("SELECT rowid FROM t WHERE t MATCH ?", (expression,)).fetchall()
    except sqlite3.OperationalError:
        return False
    return True


_pieces = st.sampled_from(
    [
        *("a", "b", "NEAR", "AND", "OR", "NOT", "tags", "content", "é", "東", '"x y"', '""'),
        *'()*+^:-{},"',
        *(" ", " ", " ", ", 3", "5"),
    ]
)


_word = st.sampled_from(["a", "b*", '"x y"', "é", "東", "a + b", "^a"])
_leaf = (
    _word
    | st.lists(_word, min_size=1, max_size=3).map(lambda ws: f"NEAR({' '.join(ws)}, 2)")
    | st.tuples(st.sampled_from(["tags", "-content", "{tags content}"]), _word).map(": ".join)
)
_valid = st.recursive(
    _leaf,
    lambda inner: (
        st.tuples(inner, st.sampled_from([" AND ", " OR ", " NOT ", " "]), inner).map("".join)
        | inner.map(lambda e: f"({e})")
        | inner.map(lambda e: f"tags: ({e})")
    ),
    max_leaves=6,
)
# Valid expressions, the same with a character or word put in somewhere, and soup.
_noisy = st.tuples(_valid, st.integers(0, 60), _pieces).map(
    lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]
)


@settings(max_examples=3000, deadline=None)
@given(_valid | _noisy | st.lists(_pieces, max_size=12).map("".join))
def test_the_parser_accepts_exactly_what_fts5_accepts(expression: str) -> None:
    if expression.startswith("*"):
        return  # FTS5's special queries, answered apart
    try:
        parse(expression)
        parsed = True
    except InvalidQuery:
        parsed = False
    assert parsed == _fts5_accepts(expression)
