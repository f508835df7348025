"""Recall: the best memories for a task in a token budget, as a markdown block."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.search.recall import (
    HEADER,
    MIN_EXCERPT_TOKENS,
    count_chars,
    cut_to_fit,
    excerpt,
    format_age,
    frame_tokens,
    pack,
    render,
)
from mnemex.store import Store
from tests.pg_fixtures import both_engines

NOW = datetime(2026, 6, 1, tzinfo=UTC)
LINE = re.compile(r"^- \[[a-z_]+\] .+ \(confidence: [0-9.]+, age: \d+(m|h|d|mo|y)\)$")


@pytest.mark.parametrize(
    ("days", "text"),
    [
        (0, "0m"),
        (0.5 / 24, "30m"),
        (5 / 24, "5h"),
        (3.2, "3d"),
        (59, "59d"),
        (120, "3mo"),
        (800, "2y"),
    ],
)
def test_format_age(days: float, text: str) -> None:
    assert format_age(days) == text


def test_chars_counter_is_len_over_four_rounded_up() -> None:
    assert [count_chars("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


# The counter as first written, every text through both classes: the shortcut for text
# without their characters (most text, which then needs no compiled pattern) must agree.
_WIDE = re.compile(
    "[\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f]"
)
_HANGUL = re.compile("[\uac00-\ud7a3]")


def _reference_count(text: str) -> int:
    wide, hangul = len(_WIDE.findall(text)), len(_HANGUL.findall(text))
    return -(-(len(text) - wide - hangul) // 4) + wide + 2 * hangul


_SCRIPTS = st.text(
    st.sampled_from("ab é’…\u2e7f\u2e80中かー한\uac00\ud7a3\uff01\U00020000\U0003134f")
)


@given(_SCRIPTS)
def test_chars_counter_equals_the_pattern_count(text: str) -> None:
    assert count_chars(text) == _reference_count(text)


@given(_SCRIPTS, st.integers(1, 12))
def test_cut_to_fit_cuts_at_a_space_or_after_a_wide_character(text: str, budget: int) -> None:
    line = "- [fact] " + text
    head = len("- [fact] ")
    ends = [
        i
        for i in range(head + 1, len(line) + 1)
        if i == len(line)
        or line[i] == " "
        or _WIDE.match(line, i - 1)
        or _HANGUL.match(line, i - 1)
    ]
    cut = cut_to_fit(line, budget, count_chars)
    at_words = {line[:i].rstrip() + "…" for i in ends}
    if cut is None or cut in at_words:
        return
    # not even the first word fits: a cut inside it, and none at a word would do
    inside = {line[:i].rstrip() + "…" for i in range(head + 1, ends[0])}
    assert cut in inside and all(count_chars(render([w])) > budget for w in at_words)


def test_pack_skips_what_does_not_fit_and_keeps_going() -> None:
    lines = ["- [fact] " + "long " * 200, "- [fact] short one", "- [fact] short two"]
    packed = pack(lines, budget=40, max_items=5)
    assert packed.chosen == (1, 2)
    assert packed.markdown == render(lines[1:])
    assert packed.markdown.startswith(HEADER)
    assert packed.tokens == count_chars(packed.markdown) <= 40
    assert packed.considered == 3 and packed.cut is None


def test_pack_stops_at_max_items() -> None:
    packed = pack([f"- [fact] memory {i}" for i in range(9)], budget=500, max_items=3)
    assert packed.chosen == (0, 1, 2) and packed.considered == 3


def test_only_when_nothing_fits_is_the_best_cut_at_a_word() -> None:
    lines = ["- [fact] " + " ".join(f"word{i}" for i in range(100))]
    packed = pack(lines, budget=30, max_items=5)
    assert packed.cut == 0 and packed.tokens <= 30
    (line,) = packed.lines
    assert line.endswith("…")
    assert all(re.fullmatch(r"word\d+", w) for w in line[len("- [fact] ") : -1].split())
    assert pack(lines, budget=5, max_items=5).markdown == ""  # not even the header fits
    assert cut_to_fit("- [fact] x", 1, count_chars) is None


LOG = "\n".join(
    [f"- Ana: filler line {i} about the weekend and the weather" for i in range(20)]
    + ["- Ben: my cello teacher moved to Lisbon last spring"]
    + [f"- Ana: more filler {i} on work and the weather" for i in range(20)]
)


def _fits(tokens: int) -> Callable[[str], bool]:
    return lambda text: count_chars(text) <= tokens


def test_excerpt_keeps_the_lines_around_the_best_match() -> None:
    part = excerpt(LOG, "Where did Ben's cello teacher move?", _fits(60))
    assert part is not None and count_chars(part) <= 60
    assert "- Ben: my cello teacher moved to Lisbon last spring" in part
    assert part.startswith("… ") and part.endswith(" …")
    # the line after the match comes before the line before it
    assert "filler line 19" not in part or "more filler 0" in part
    # a word on every line counts little next to a word on one
    assert "Lisbon" in (excerpt(LOG, "Ana weather Lisbon", _fits(30)) or "")


def test_excerpt_without_a_match_is_the_start_and_a_too_long_line_is_cut() -> None:
    part = excerpt(LOG, "quantum chromodynamics", _fits(40))
    assert part is not None and part.startswith("- Ana: filler line 0") and part.endswith(" …")
    assert excerpt(LOG, "anything", _fits(400 * 100)) == " ".join(LOG.split())
    long = "word " * 300 + "Lisbon"
    cut = excerpt(long, "Lisbon", _fits(20))
    assert cut is not None and cut.endswith("…") and count_chars(cut) <= 20
    assert excerpt(long, "Lisbon", _fits(1)) is None
    assert excerpt("  \n ", "Lisbon", _fits(100)) is None


def test_pack_trims_what_does_not_fit_when_room_is_left() -> None:
    lines = ["- [fact] short one", "- [chunk] " + "long " * 400, "- [fact] short two"]
    asked: list[int] = []

    def trim(index: int, fits: Callable[[str], bool]) -> str | None:
        asked.append(index)
        words = lines[index].split(" ")
        kept = max(n for n in range(len(words)) if fits(" ".join(words[:n]) + "…"))
        return " ".join(words[:kept]) + "…"

    packed = pack(lines, budget=120, max_items=5, trim=trim)
    assert asked == [1] and packed.chosen == (0, 1) and packed.excerpts == (1,)
    assert packed.lines[1].endswith("…") and packed.tokens == count_chars(packed.markdown) <= 120
    # too little room left: skipped as before
    room = count_chars(render(lines[:1])) + MIN_EXCERPT_TOKENS - 1
    small = pack(lines, budget=room, max_items=5, trim=trim)
    assert small.chosen == (0, 2) and small.excerpts == () and asked == [1]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(
        st.text(st.characters(codec="utf-8"), min_size=0, max_size=400).map(
            lambda t: "- [fact] " + t
        ),
        max_size=12,
    ),
    budget=st.integers(1, 700),
    max_items=st.integers(1, 8),
)
def test_the_budget_is_never_exceeded(lines: list[str], budget: int, max_items: int) -> None:
    packed = pack(lines, budget, max_items)
    assert count_chars(packed.markdown) <= budget
    assert packed.tokens == (count_chars(packed.markdown) if packed.lines else 0)
    assert len(packed.chosen) <= max_items
    assert list(packed.chosen) == sorted(packed.chosen)  # best first, as ranked
    for index, line in zip(packed.chosen, packed.lines, strict=True):
        assert line == lines[index] or (packed.cut == index and line.endswith("…"))


@pytest.fixture
def sample(store: Store) -> Store:
    store.add_many(
        [
            {
                "content": "We chose PostgreSQL for the billing service because of JSONB",
                "kind": "decision",
                "confidence": 0.9,
                "created_at": NOW - timedelta(days=3),
            },
            {
                "content": "Billing runs nightly at 02:00 UTC and emails invoices",
                "kind": "fact",
                "created_at": NOW - timedelta(days=40),
            },
            {
                "content": "Maria prefers small pull requests",
                "kind": "preference",
                "created_at": NOW - timedelta(days=1),
            },
            {
                "content": "billing " + "details " * 600,
                "kind": "observation",
                "created_at": NOW - timedelta(hours=5),
            },
        ]
    )
    return store


@both_engines
def test_recall_renders_the_block(sample: Store) -> None:
    result = sample.recall("how does billing work?", now=NOW)
    assert result.markdown.startswith("## Relevant Memories\n\n")
    lines = result.markdown.splitlines()[2:]
    assert lines and all(LINE.match(line) for line in lines), lines
    assert "- [decision] We chose PostgreSQL for the billing service because of JSONB " in (
        result.markdown
    )
    assert "(confidence: 0.9, age: 3d)" in result.markdown
    assert result.tokens <= 500 and result.tokens == count_chars(result.markdown)
    # the 600-word memory does not fit 500 tokens: its excerpt fills the room left
    assert result.skipped == 0
    assert [m.kind for m in result.memories if m.cut] == ["observation"]
    (long,) = [m.line for m in result.memories if m.cut]
    assert long.startswith("- [observation] billing details") and "… (confidence" in long
    assert [m.line for m in result.memories] == lines
    data = result.to_dict()
    assert data["ids"] == [m.id for m in result.memories]
    json.dumps(data)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@both_engines
@given(budget=st.integers(1, 600), most=st.integers(1, 6))
def test_recall_never_exceeds_the_budget(sample: Store, budget: int, most: int) -> None:
    result = sample.recall("billing invoices postgres", budget, most, now=NOW)
    assert count_chars(result.markdown) <= budget
    assert len(result.memories) <= most


@both_engines
def test_recall_with_a_custom_counter_and_wordpiece(sample: Store) -> None:
    words = sample.recall("billing", 60, token_counter=lambda text: len(text.split()), now=NOW)
    assert len(words.markdown.split()) <= 60 and words.token_counter == "<lambda>"
    pytest.importorskip("tokenizers")
    wordpiece = sample.recall("billing", 80, token_counter="wordpiece", now=NOW)
    assert wordpiece.token_counter == "wordpiece" and 0 < wordpiece.tokens <= 80


@both_engines
def test_recall_bad_input(sample: Store) -> None:
    for kwargs in ({"budget_tokens": 0}, {"max_memories": 0}, {"token_counter": "gpt"}):
        with pytest.raises(InvalidInput):
            sample.recall("billing", **kwargs)  # type: ignore[arg-type]
    assert sample.recall("").memories == ()
    assert sample.recall('"zebra* NEAR(').markdown == ""  # FTS5 syntax is plain text


@both_engines
def test_recall_fits_a_cut_memory_into_any_budget_above_the_frame(store: Store) -> None:
    store.add("Reconciliation of the nightly invoices runs at 02:00 UTC", kind="observation")
    frame = frame_tokens("observation")
    assert frame == count_chars("## Relevant Memories\n\n- [observation] …\n") == 10
    whole = store.recall("invoice reconciliation").tokens
    for budget in range(frame + 1, whole + 2):
        result = store.recall("invoice reconciliation", budget)
        assert len(result.memories) == 1 and result.tokens <= budget, (budget, result)
        assert result.memories[0].cut is (budget < whole)
    small = store.recall("invoice reconciliation", frame)
    assert small.memories == () and small.skipped == 1
    assert f"takes {frame}; give {frame + 1} or more" in small.notes[-1]


def test_recall_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mnemex.cli import cli

    db = str(tmp_path / "r.db")
    runner = CliRunner()
    runner.invoke(cli, ["--db", db, "add", "Invoices are emailed at 02:00", "--kind", "fact"])
    out = runner.invoke(cli, ["--db", db, "recall", "when are invoices emailed?"])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("## Relevant Memories\n\n- [fact] Invoices are emailed at 02:00")
    data = json.loads(
        runner.invoke(cli, ["--db", db, "recall", "invoices", "-b", "30", "--json"]).stdout
    )
    assert data["tokens"] <= 30 and data["budget_tokens"] == 30
    empty = runner.invoke(cli, ["--db", db, "recall", "zebra"])
    assert empty.exit_code == 0 and empty.stdout == ""


CJK = {
    "zh": "我们选择了PostgreSQL作为计费数据库，因为它支持事务和复杂查询。部署在每周五进行，"
    "测试环境每周日刷新。用户现在通过公司的统一身份认证登录。发票生成器已经迁移到后台任务中运行。",
    "ja": "請求書のPDFレンダラーはバックグラウンドワーカーに移動しました。ステージング環境の"
    "データベースは毎週日曜日に更新されます。ユーザーは会社のOIDCプロバイダー経由でサインインします。",
    "ko": "우리는 결제 데이터베이스로 PostgreSQL을 선택했습니다. 트랜잭션을 지원하기 때문입니다. "
    "스테이징 데이터베이스는 매주 일요일에 새로 고쳐집니다. 사용자는 회사 OIDC 공급자를 통해 로그인합니다.",
}


@pytest.mark.parametrize("language", sorted(CJK))
def test_chars_counter_is_close_to_wordpiece_for_cjk(language: str) -> None:
    pytest.importorskip("tokenizers")
    from mnemex.search.recall import count_wordpiece

    text = CJK[language]
    assert 0.9 <= count_chars(text) / count_wordpiece(text) <= 1.15


@both_engines
@pytest.mark.parametrize("language", sorted(CJK))
def test_recall_budget_holds_for_cjk(make_store, language: str) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("tokenizers")
    from mnemex.search.recall import count_wordpiece

    store = make_store(f"{language}.db")
    sentences = [s for s in re.split(r"(?<=[。.])\s*", CJK[language]) if s]
    for sentence in sentences:
        store.remember(sentence, kind="fact")
    query = {"zh": "数据库", "ja": "データベース", "ko": "데이터베이스는"}[language]
    # The block's English frame is punctuation-heavy, where len / 4 undercounts WordPiece
    # in every language alike: the check is on what the CJK text costs.
    frame = render(["- [fact]  (confidence: 0.8, age: 0m)"])
    slack = max(0, count_wordpiece(frame) - count_chars(frame))
    for budget in (20, 40, 80):
        result = store.recall(query, budget, 5, now=NOW)
        assert result.memories, (language, budget)
        assert count_wordpiece(result.markdown) <= budget * 1.15 + slack, result.markdown


def test_a_cjk_memory_is_cut_between_characters() -> None:
    line = "- [fact] 发票生成器已经迁移到后台任务中运行以减少请求延迟 (confidence: 0.8, age: 3d)"
    cut = cut_to_fit(line, 45, len)  # a character a token: the sentence is too long
    assert cut is not None and cut.startswith("- [fact] 发票") and cut.endswith("…")
    assert len(render([cut])) == 45
