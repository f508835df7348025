"""The plain-Python WordPiece tokenizer gives the ids `tokenizers` gives, or leaves the text to it."""

from __future__ import annotations

import functools
import json
import random
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mnemex.embed import wordpiece
from mnemex.embed.local import MAX_TOKENS, TOKENIZER
from tests.reference.minilm import texts_for_agreement


@functools.cache
def tokenizers_library() -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    return tokenizer


@pytest.fixture
def reference() -> Any:
    return tokenizers_library()


@pytest.fixture(scope="module")
def vocab() -> dict[str, int]:
    return wordpiece.load_vocab()


def same_ids(text: str, reference: Any, vocab: dict[str, int]) -> bool:
    ours = wordpiece.encode(text, vocab, MAX_TOKENS)
    return ours is None or ours == reference.encode(text).ids


def test_vocab_is_the_one_of_tokenizer_json(vocab: dict[str, int]) -> None:
    model = json.loads(TOKENIZER.read_text(encoding="utf-8"))["model"]
    assert model["type"] == "WordPiece" and model["continuing_subword_prefix"] == wordpiece.PREFIX
    assert model["max_input_chars_per_word"] == wordpiece.MAX_WORD_CHARS
    assert vocab == model["vocab"]


def test_every_ascii_character_in_context(reference: Any, vocab: dict[str, int]) -> None:
    for code in range(128):
        c = chr(code)
        for text in (c, f"a{c}b", f"A{c}B", f" {c} ", f"1{c}2", f"ab{c}{c}", f"x{c}"):
            assert wordpiece.encode(text, vocab, MAX_TOKENS) is not None
            assert same_ids(text, reference, vocab), repr(text)


def test_words_of_the_vocabulary_glued_and_split(reference: Any, vocab: dict[str, int]) -> None:
    rng = random.Random(7)
    words = list(vocab)
    for _ in range(3000):
        glue = rng.choice(["", " ", "-", "'", "  \t"])
        text = glue.join(rng.choice(words).removeprefix("##") for _ in range(rng.randint(1, 12)))
        assert same_ids(text + rng.choice(["", "?", "...", "!"]), reference, vocab), text


def test_long_words_and_truncation(reference: Any, vocab: dict[str, int]) -> None:
    for text in ("a" * 100, "a" * 101, "x " * 253, "x " * 254, "x " * 255, "word " * 300):
        ids = wordpiece.encode(text, vocab, MAX_TOKENS)
        assert ids is not None and ids == reference.encode(text).ids
    assert len(wordpiece.encode("word " * 300, vocab, MAX_TOKENS) or []) == MAX_TOKENS


def test_other_text_is_left_to_tokenizers(reference: Any, vocab: dict[str, int]) -> None:
    for text in ("café", "数据库", "emoji 🧠", "keep [SEP] out", "[MASK]", "a\u00a0b"):
        assert wordpiece.encode(text, vocab, MAX_TOKENS) is None
    texts = texts_for_agreement()
    left = [t for t in texts if wordpiece.encode(t, vocab, MAX_TOKENS) is None]
    assert 0 < len(left) < len(texts) // 4  # most are ASCII, and tokenized here
    assert all(same_ids(t, reference, vocab) for t in texts)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
@example("[UNK]").via("found by hypothesis: a special token is left to tokenizers")
def test_any_ascii_text(text: str) -> None:
    vocab = wordpiece.load_vocab()
    encoded = wordpiece.encode(text, vocab, MAX_TOKENS)
    # Text that spells a special token is left to `tokenizers`, as documented.
    assert (encoded is None) == any(token in text for token in wordpiece.SPECIAL)
    assert same_ids(text, tokenizers_library(), vocab)


def reference_offsets(text: str) -> list[tuple[int, int]]:
    """Each token's (start, end) as ``tokenizers`` gives them, past its truncation too."""
    encoding = tokenizers_library().encode(text, add_special_tokens=False)
    offsets = list(encoding.offsets)
    for rest in encoding.overflowing:
        offsets.extend(rest.offsets)
    return offsets


def same_spans(text: str, pieces: wordpiece.Pieces) -> bool:
    tokens = wordpiece.Tokens(text, pieces)
    return [tokens.span(i) for i in range(len(tokens))] == reference_offsets(text)


def pieces_of(vocab: dict[str, int]) -> wordpiece.Pieces:
    return wordpiece.Pieces(vocab, reference_offsets)


def test_tokens_are_where_tokenizers_finds_them(vocab: dict[str, int]) -> None:
    pieces = pieces_of(vocab)
    rng = random.Random(11)
    words = list(vocab)
    for _ in range(300):
        glue = rng.choice(["", " ", "-", "'", "  \t", "\n", " é ", "\u00a0", "\x0b"])
        text = glue.join(rng.choice(words).removeprefix("##") for _ in range(rng.randint(1, 400)))
        assert same_spans(text.upper() if rng.random() < 0.2 else text, pieces), text
    for text in ("a" * 100 + " b", "a" * 101 + " b", "x " * 300, "word " * 600, "  ", ""):
        assert same_spans(text, pieces), text
    for text in ("数据库 " * 100 + "数据库" * 200, "한국어 문장 " * 60, "e\u0301 \u0301x [UNK]y"):
        assert same_spans(text, pieces), text
    texts = texts_for_agreement()
    assert 0 < sum(not wordpiece.plain(t) for t in texts) < len(texts) // 2
    assert all(same_spans(t, pieces) for t in texts)


def test_plain_text_is_ascii_without_controls_or_special_tokens() -> None:
    assert wordpiece.plain("Plain text, with\ttabs\r\nand (punctuation)!")
    for text in ("café", "a\u00a0b", "keep [CLS] out", "bell\x07", "form\x0cfeed", "del\x7f"):
        assert not wordpiece.plain(text), repr(text)


def test_pieces_start_over_past_their_bound(
    vocab: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wordpiece, "PIECES_KEPT", 3)
    pieces = pieces_of(vocab)
    text = "unbelievable tokenization of many distinct words in one longer text " * 5
    assert same_spans(text, pieces)
    assert len(pieces) <= 3


PRINTABLE = [chr(c) for c in range(32, 127)] + ["\t", "\n", "\r"]
SEPARATE = st.sampled_from([" ", "\t", "\n", "\r", "  ", "[UNK]", "[SEP]", "the", "token"])


@functools.cache
def shared_pieces() -> wordpiece.Pieces:
    return pieces_of(wordpiece.load_vocab())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(alphabet=PRINTABLE, max_size=8), SEPARATE), max_size=200))
def test_any_ascii_text_has_its_tokens_where_tokenizers_finds_them(parts: list[str]) -> None:
    assert same_spans("".join(parts), shared_pieces())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=6), SEPARATE), max_size=120))
def test_any_text_has_its_tokens_where_tokenizers_finds_them(parts: list[str]) -> None:
    assert same_spans("".join(parts), shared_pieces())


# Characters that start a token of their own, and others, with no space between them: a
# segment read in parts (a part is PART_CHARS characters, here 3, or a few more).
GLUED = st.sampled_from(
    ["数", "据", "。", "、", "「", "」", "[UNK]", "]", "[", "!", "a", "é", "\u0301", "$"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=4), GLUED), max_size=80))
def test_a_long_segment_read_in_parts_has_its_tokens_where_tokenizers_finds_them(
    parts: list[str],
) -> None:
    pieces = shared_pieces()
    before = wordpiece.PART_CHARS
    wordpiece.PART_CHARS = 3  # monkeypatch is function-scoped, hypothesis runs many examples
    try:
        assert same_spans("".join(parts), pieces)
    finally:
        wordpiece.PART_CHARS = before


def test_a_text_without_spaces_is_read_a_part_at_a_time(vocab: dict[str, int]) -> None:
    """A megabyte of Chinese is one segment: it is read in parts, and the places kept stay
    bounded (about SPANS_KEPT of them), not a place per token of the text."""
    rng = random.Random(5)
    text = "".join(
        "".join(chr(0x4E00 + rng.randrange(3000)) for _ in range(rng.randint(8, 30))) + "。"
        for _ in range(20_000)
    )
    read: list[int] = []

    def counted(segment: str) -> list[tuple[int, int]]:
        read.append(len(segment))
        return reference_offsets(segment)

    pieces = wordpiece.Pieces(vocab, counted)
    tokens = wordpiece.Tokens(text, pieces)
    assert len(tokens) == len(text)  # an ideograph or a full stop: a token each
    assert max(read) < 2 * wordpiece.PART_CHARS
    assert sum(len(spans) for spans in pieces.values()) <= wordpiece.SPANS_KEPT + max(read)
    for token in (0, 1, len(text) // 2, len(text) - 1):
        assert tokens.span(token) == (token, token + 1)
