"""With ``embed_sentences`` on, a memory longer than a window of the local model gets a
vector per sentence of its body too, each read after its first line, and is scored by the
best of all its windows. Off (the default), it gets its token windows alone.

The tests that hold on SQLite alone; those run on both engines are in
``tests/engine/test_sentence_windows.py``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.embed import SENTENCE_BASE, numbered_windows, window_numbers
from mnemex.embed.local import (
    SENTENCE_CHARS,
    SENTENCE_WINDOWS,
    WINDOW,
    LocalEmbedder,
    sentence_windows,
)
from mnemex.engine.sqlite.vectors import row_steps, window_spans
from mnemex.migration import migrate
from tests.conftest import PYTHON, python_env
from tests.engine.test_sentence_windows import (
    CAT,
    DEEP,
    FILLER,
    SENTENCE_ONLY,
    TITLE,
    best,
    committee,
    floor_read,
    mixed,
    report,
)
from tests.engine.test_windows import rows, seq_of


@pytest.fixture(autouse=True)
def sentences_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store of this module reads long texts sentence by sentence too."""
    monkeypatch.setenv("MNEMEX_EMBED_SENTENCES", "true")


@pytest.fixture(scope="module")
def model() -> LocalEmbedder:
    return LocalEmbedder()


def test_sentence_windows_read_each_sentence_after_the_first_line() -> None:
    text = "Title of it\nFirst sentence here. Second one (with a bracket)! 3 more?  Last."
    assert sentence_windows(text) == [
        "Title of it. First sentence here.",
        "Title of it. Second one (with a bracket)!",
        "Title of it. 3 more?",
        "Title of it. Last.",
    ]
    assert sentence_windows("One line. Two sentences.") == ["One line.", "Two sentences."]
    assert sentence_windows("Title\nSame. Same. Other.") == ["Title. Same.", "Title. Other."]
    many = "Title\n" + " ".join(f"Sentence number {i} is here." for i in range(200))
    pieces = sentence_windows(many)
    assert len(pieces) == SENTENCE_WINDOWS
    assert pieces[0] == "Title. Sentence number 0 is here."
    assert pieces[-1] == f"Title. Sentence number {SENTENCE_WINDOWS - 1} is here."


def test_windows_to_take_grow_until_they_hold_k_memories() -> None:
    assert row_steps(10, 1) == [10]
    assert row_steps(10, 3) == [30]
    assert row_steps(10, 10) == [40, 100]
    assert row_steps(10, 10 + SENTENCE_WINDOWS) == [40, 160, 640, 740]


@pytest.mark.model
def test_a_long_text_is_its_token_windows_then_its_sentences(model: LocalEmbedder) -> None:
    short = "Title line\nA short memory. It fits one window. So it stays whole."
    assert model.windows(short) == [short]
    text = report()
    pieces = model.windows(text)
    sentences = sentence_windows(text)
    assert len(sentences) == len(dict.fromkeys(FILLER)) + 1  # every distinct sentence
    tokens = pieces[: len(pieces) - len(sentences)]
    assert len(tokens) >= 2 and pieces[len(tokens) :] == sentences
    assert all(piece in text for piece in tokens)  # the token windows, as before
    assert tokens[0] == text[: len(tokens[0])] and text.endswith(tokens[-1])
    assert f"{TITLE}. {DEEP}" in sentences
    many = "Title\n" + " ".join(f"Sentence number {i} is here." for i in range(400))
    assert model.windows(many)[-1] == f"Title. Sentence number {SENTENCE_WINDOWS - 1} is here."


@pytest.mark.model
def test_a_text_of_one_window_is_split_past_sentence_chars(model: LocalEmbedder) -> None:
    """Long words fit many characters in one window: such a text is read sentence by
    sentence once it has more than ``SENTENCE_CHARS`` characters, as measured."""
    medium = committee()
    assert len(medium) > SENTENCE_CHARS
    assert len(model.encode([medium])[0]) - 2 <= WINDOW  # its tokens fit one window
    assert model.windows(medium) == [medium, *sentence_windows(medium)]
    shorter = medium[: SENTENCE_CHARS - 20]
    assert model.windows(shorter) == [shorter]


def token_count(model: LocalEmbedder, text: str) -> int:
    """How many tokens ``tokenizers`` finds in ``text`` (past the model's truncation too)."""
    encoding = model._load_tokenizer().encode(text, add_special_tokens=False)
    return len(encoding.ids) + sum(len(rest.ids) for rest in encoding.overflowing)


@pytest.mark.model
def test_a_short_text_of_many_tokens_gets_its_windows(model: LocalEmbedder) -> None:
    """Characters bound a text's tokens in ASCII only (each is one token at most); a
    Hangul syllable is three (its letters), so a short Korean text can need windows."""
    assert all(token_count(model, chr(c) * 3) <= 3 for c in range(128))
    korean = "한국어 문장 " * 36
    assert len(korean) <= WINDOW < token_count(model, korean)
    tokens, sentences = model.window_parts(korean)
    assert len(tokens) == 3 and sentences == sentence_windows(korean)
    assert tokens[0] == korean[: len(tokens[0])] and korean.rstrip().endswith(tokens[-1])
    english = "word " * (WINDOW // 5)
    assert model.window_parts(english) == ([english], [])


def test_a_memory_takes_as_many_rows_as_its_token_and_sentence_windows() -> None:
    """The rows a search takes per memory count windows, not window numbers."""
    wins = np.array([0, 1, SENTENCE_BASE, SENTENCE_BASE + 1, SENTENCE_BASE + 2, 0, 2])
    assert window_spans(wins) == (3, 3)
    assert window_spans(np.array([0, 0, 1])) == (2, 0)
    assert window_numbers([SENTENCE_BASE + 1, 0, SENTENCE_BASE, 1]) == [
        0,
        1,
        SENTENCE_BASE,
        SENTENCE_BASE + 1,
    ]


@pytest.mark.model
def test_check_finds_a_sentence_window_missing(make_store, model: LocalEmbedder) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=model)
    seq = seq_of(store, store.add(report()))
    assert store.check()["ok"]
    with store.session.transaction() as conn:
        conn.execute(
            "DELETE FROM embeddings WHERE seq = ? AND window = ?", (seq, SENTENCE_BASE + 1)
        )
    problems = store.check()["problems"]
    assert any("lack some of their windows" in p for p in problems)


# A question the long memory's one sentence about honey answers far better than any of
# its token windows.


@pytest.mark.model
@pytest.mark.parametrize("target", ["sqlite", "postgres"])
def test_a_migrated_store_keeps_sentence_numbers_and_the_gate(
    tmp_path: Path, model: LocalEmbedder, target: str, request: pytest.FixtureRequest
) -> None:
    source = tmp_path / "a.db"
    with mnemex.open(source, embedder=model) as store:
        store.add_many([CAT, "Shipping labels are printed at the loading dock."])
        store.add(report())
        stored = rows(store)
    tokens = model.window_parts(report())[0]
    there = tmp_path / "b.db" if target == "sqlite" else request.getfixturevalue("pg_url")
    migrate(source, there)
    with mnemex.open(there, embedder=model) as copy:
        assert rows(copy) == stored
        assert copy.check()["ok"]
        _, above, level = floor_read(copy, SENTENCE_ONLY)
        assert above + level == pytest.approx(best(model, SENTENCE_ONLY, tokens), abs=1e-4)
        again = copy.reindex()
        assert again is not None and again.embedded == 0  # numbered as its text's windows


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(*args: str, env: dict[str, str]) -> tuple[str, str]:
    """Run ``mnemex`` with its standard error on a terminal (a pseudo-terminal, where it
    draws progress bars); its standard output and error, escapes removed from the error."""
    terminal, child_end = pty.openpty()
    process = subprocess.Popen(
        [PYTHON, "-m", "mnemex", *args], stdout=subprocess.PIPE, stderr=child_end, env=env
    )
    os.close(child_end)
    drawn = []
    while True:
        try:
            chunk = os.read(terminal, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn.append(chunk)
    os.close(terminal)
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, b"".join(drawn).decode(errors="replace")
    return out.decode(), ANSI.sub("", b"".join(drawn).decode(errors="replace"))


@pytest.mark.model
def test_the_reindex_progress_reaches_each_phase_total(
    tmp_path: Path, model: LocalEmbedder
) -> None:
    """``mnemex reindex`` draws a bar for the memories it embeds, then one for those it
    looks at to give them their windows, each reaching its total; ``--json`` draws none."""
    texts = mixed()
    db = tmp_path / "progress.db"
    with mnemex.open(db, embedder=model, embed_sentences=False) as store:
        store.add_many(list(texts.values()))
    with mnemex.open(db, embedder=None) as store:
        store.add("A memory stored without a vector, for the embedding phase.")
    env = {**python_env(), "MNEMEX_EMBEDDER": "local", "COLUMNS": "120", "TERM": "xterm"}
    out, drawn = on_a_terminal("--db", str(db), "reindex", env=env)
    assert "embedded" in out
    counts: dict[str, list[tuple[int, int]]] = {}
    for name, done, total in re.findall(r"(embedding|re-windowing)\D*?(\d+)/(\d+)", drawn):
        counts.setdefault(name, []).append((int(done), int(total)))
    assert counts["embedding"][-1] == (1, 1)
    assert counts["re-windowing"][-1] == (len(texts) + 1, len(texts) + 1)
    assert all(done <= total for steps in counts.values() for done, total in steps)
    again, drawn = on_a_terminal("--db", str(db), "reindex", "--json", env=env)
    assert json.loads(again)["embedded"] == 0 and "re-windowing" not in drawn


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["deploy", "the", "Zürich", "发票", "tokenizer's", "x" * 120, "3.14", "(a)", "NUL\x00"]
        ),
        min_size=20,
        max_size=80,
    ),
    st.sampled_from([" ", "\n", "\t", "  ", "\r\n"]),
    st.booleans(),
)
def test_the_first_window_of_a_long_text_is_found_in_a_prefix(
    words: list[str], gap: str, sentences: bool
) -> None:
    """What the duplicate check embeds of a long memory (its window 0), read from a prefix
    of it, is the window that cutting the whole text numbers 0."""
    import functools

    from mnemex.embed import FIRST_WINDOW_CHARS, first_window

    phrase = gap.join(words)
    text = gap.join([phrase] * (FIRST_WINDOW_CHARS // len(phrase) + 2))
    assert len(text) > FIRST_WINDOW_CHARS
    cut = functools.partial(numbered_windows, LOCAL, sentences=sentences)
    assert first_window(cut, text) == cut(text)[0][1]


LOCAL = LocalEmbedder()
