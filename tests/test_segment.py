"""CJK segmentation (mnemex.text.segment): a long text segmented a part at a time is the
text segmented whole, in bounded memory."""

from __future__ import annotations

import random
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex import text
from mnemex.text import SEGMENT_MARK, cjk_pattern, segment, unsegment

PIECES = st.sampled_from(["数据", "库", "한국어", "カタカナ", "ひらがな", " ", "a", "。", "é"])


def whole(value: str) -> str:
    return cjk_pattern("([CJK])").sub(SEGMENT_MARK + r"\1" + SEGMENT_MARK, value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(PIECES, st.text(max_size=5)), min_size=1, max_size=60))
def test_a_text_segmented_in_parts_is_the_text_segmented_whole(parts: list[str]) -> None:
    value = "".join(parts)
    before = text.SEGMENT_CHARS
    text.SEGMENT_CHARS = 3  # monkeypatch is function-scoped, hypothesis runs many examples
    try:
        got = segment(value)
    finally:
        text.SEGMENT_CHARS = before
    if got is None:
        assert not cjk_pattern("[CJK]").search(value)
    else:
        assert got == whole(value)
        assert unsegment(got) == value.replace(SEGMENT_MARK, "")


def test_a_megabyte_of_chinese_is_segmented_in_bounded_memory() -> None:
    rng = random.Random(7)
    value = "".join(chr(0x4E00 + rng.randrange(3000)) for _ in range(1_000_000))
    tracemalloc.start()
    try:
        got = segment(value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got is not None and len(got) == 3 * len(value)
    # The result is 6 MB (two bytes a character); whole, the substitution peaked near 100 MB.
    assert peak < 30_000_000, peak
