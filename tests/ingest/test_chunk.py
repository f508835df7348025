"""Markdown chunking: boundaries, overlap, fences, headings, and properties over any text."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.ingest.chunk import CHARS_PER_TOKEN, Chunk, chunk_markdown

BUDGET = 400 * CHARS_PER_TOKEN
CARRY = 80 * CHARS_PER_TOKEN


def words(n: int, seed: int = 0) -> str:
    vocab = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()
    return " ".join(vocab[(i * 7 + seed) % len(vocab)] for i in range(n))


def lines_of(text: str, chunk: Chunk) -> str:
    return "\n".join(text.split("\n")[chunk.start_line - 1 : chunk.end_line])


def test_short_text_is_one_chunk() -> None:
    text = "# Notes\n\nOne short paragraph.\n"
    assert chunk_markdown(text) == [Chunk(text, 1, 3, ("Notes",), 0)]
    assert chunk_markdown("") == []
    assert chunk_markdown("\n \n\n") == []


def test_long_prose_is_cut_within_budget_with_overlap() -> None:
    text = "\n\n".join(words(60, seed=i) + "." for i in range(40)) + "\n"
    chunks = chunk_markdown(text)
    assert len(chunks) > 5
    for previous, chunk in itertools.pairwise(chunks):
        assert len(chunk.text) <= BUDGET
        assert 0 < chunk.overlap <= CARRY
        assert previous.text.endswith(chunk.text[: chunk.overlap])
        assert 2 * chunk.overlap >= CARRY  # whole lines give at least half the overlap
        assert chunk.start_line <= previous.end_line  # the overlap repeats lines
    # chunks end at paragraph boundaries, not mid-paragraph
    assert all(c.text.endswith("\n\n") for c in chunks[:-1])


def test_a_line_longer_than_a_chunk_is_cut_at_sentences_then_spaces() -> None:
    sentences = " ".join(f"Sentence number {i} says {words(12, i)}." for i in range(60))
    chunks = chunk_markdown(sentences + "\n")
    assert len(chunks) > 2
    assert {(c.start_line, c.end_line) for c in chunks} == {(1, 1)}
    for chunk in chunks[:-1]:
        assert chunk.text.rstrip().endswith(".")  # cut after a sentence
        assert len(chunk.text) <= BUDGET
    unbroken = "x" * (3 * BUDGET)
    assert "".join(c.text[c.overlap :] for c in chunk_markdown(unbroken)) == unbroken


def test_chunks_prefer_heading_boundaries() -> None:
    sections = [f"## Section {i}\n\n{words(90, i)}.\n\n{words(40, i + 1)}.\n" for i in range(8)]
    text = "# Title\n\n" + "\n".join(sections)
    chunks = chunk_markdown(text)
    for chunk in chunks[1:]:
        assert chunk.text.startswith("## Section"), chunk.text[:40]
        assert chunk.overlap == 0  # a new section needs no overlap
        assert chunk.heading[0] == "Title" and chunk.heading[1].startswith("Section")


def test_heading_path_follows_levels() -> None:
    text = (
        "# A\n\n"
        + f"{words(350)}.\n\n"
        + "## B\n\n### C\n\n"
        + f"{words(350, 1)}.\n\n"
        + "## D\n\n"
        + f"{words(350, 2)}.\n"
    )
    headings = [c.heading for c in chunk_markdown(text)]
    assert headings[0] == ("A",)
    assert ("A", "B") in headings  # the chunk starting at "## B" (C comes after its line)
    assert headings[-1] == ("A", "D")


def test_a_heading_is_not_left_at_the_end_of_a_chunk() -> None:
    text = f"{words(330)}.\n\n## Next\n{words(300, 3)}.\n"
    for chunk in chunk_markdown(text):
        assert not chunk.text.rstrip().endswith("## Next")


def test_fenced_code_blocks_are_not_split() -> None:
    fence = (
        "```python\n"
        + "".join(f"value_{i} = compute({i})  # step {i}\n" for i in range(30))
        + "```\n"
    )
    assert BUDGET // 2 < len(fence) < BUDGET
    for lead in (0, 100, 200, 300, 350):
        text = f"{words(lead)}.\n\n{fence}\n{words(200, 5)}.\n"
        holding = [c for c in chunk_markdown(text) if "value_" in c.text]
        assert any(fence in c.text for c in holding), lead
        for chunk in holding:  # any chunk with a line of the fence has all of it
            assert fence in chunk.text, (lead, chunk.text[:80])


def test_a_fence_bigger_than_a_chunk_is_cut_at_lines() -> None:
    fence = "~~~\n" + "".join(f"row {i} {words(8, i)}\n" for i in range(120)) + "~~~\n"
    chunks = chunk_markdown(f"Intro.\n\n{fence}")
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk.text) <= BUDGET
        assert chunk.text.endswith("\n")  # whole lines
    for chunk in chunks[1:]:
        assert chunk.overlap == 0  # overlap never starts inside a fence
    assert "".join(c.text[c.overlap :] for c in chunks) == f"Intro.\n\n{fence}"


def test_line_ranges_are_exact() -> None:
    text = "\n\n\n# T\n\n" + "\n".join(f"- item {i} {words(20, i)}" for i in range(80)) + "\n"
    chunks = chunk_markdown(text)
    assert chunks[0].start_line == 4
    for chunk in chunks:
        assert chunk.text.strip() in lines_of(text, chunk)
        assert lines_of(text, chunk).strip().endswith(chunk.text.strip()[-30:])


def test_chunk_sizes_are_parameters() -> None:
    text = "\n\n".join(words(30, i) + "." for i in range(50))
    small = chunk_markdown(text, tokens=100, overlap=20)
    assert all(len(c.text) <= 400 and c.overlap <= 80 for c in small)
    assert len(small) > len(chunk_markdown(text))
    assert all(c.overlap == 0 for c in chunk_markdown(text, tokens=100, overlap=0))


# -- properties -----------------------------------------------------------------------

_WORD = st.sampled_from("the memory agent deploy token billing cache 数据 sesión ok".split())
_PROSE = st.lists(_WORD, min_size=1, max_size=120).map(" ".join)
_BLOCK = st.one_of(
    _PROSE,
    st.builds(lambda n, t: "#" * n + " " + t, st.integers(1, 6), _PROSE),
    st.lists(_PROSE, min_size=1, max_size=6).map(lambda items: "\n".join(f"- {i}" for i in items)),
    st.builds(
        lambda mark, lines: f"{mark}\n" + "\n".join(lines) + f"\n{mark}",
        st.sampled_from(["```", "~~~", "````"]),
        st.lists(_PROSE, max_size=40),
    ),
    st.lists(_WORD, min_size=200, max_size=700).map(" ".join),  # a long line
    st.just(""),
)
_DOC = st.lists(_BLOCK, max_size=30).map(lambda blocks: "\n\n".join(blocks) + "\n")
_SIZES = st.sampled_from([(400, 80), (100, 20), (64, 0), (200, 100)])


def _start(text: str) -> int:
    match = re.match(r"(?:[ \t]*\n)*", text)
    return match.end() if match else 0


@settings(max_examples=150, deadline=None)
@given(_DOC, _SIZES)
def test_nothing_is_lost_or_repeated_beyond_the_overlap(text: str, sizes: tuple[int, int]) -> None:
    chunks = chunk_markdown(text, *sizes)
    assert "".join(c.text[c.overlap :] for c in chunks) == text[_start(text) :]
    for previous, chunk in itertools.pairwise(chunks):
        assert previous.text.endswith(chunk.text[: chunk.overlap])


@settings(max_examples=150, deadline=None)
@given(_DOC, _SIZES)
def test_every_line_is_covered_and_chunks_fit(text: str, sizes: tuple[int, int]) -> None:
    tokens, overlap = sizes
    chunks = chunk_markdown(text, tokens, overlap)
    covered: set[int] = set()
    for chunk in chunks:
        assert len(chunk.text) <= tokens * CHARS_PER_TOKEN
        assert chunk.overlap <= overlap * CHARS_PER_TOKEN
        assert 1 <= chunk.start_line <= chunk.end_line
        assert chunk.text.strip() in lines_of(text, chunk)
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            assert number in covered, (number, line[:40])


@settings(max_examples=100, deadline=None)
@given(_DOC, _DOC)
def test_appending_changes_only_the_last_chunk(text: str, more: str) -> None:
    if text.count("```") % 2 or text.count("~~~") % 2:
        return  # an unclosed fence would swallow what follows
    before = chunk_markdown(text)
    after = chunk_markdown(text + "\n" + more)
    assert chunk_markdown(text) == before  # deterministic
    assert after[: max(0, len(before) - 1)] == before[:-1]
