"""With ``embed_sentences`` on, a memory longer than a window of the local model gets a
vector per sentence of its body too, each read after its first line, and is scored by the
best of all its windows. Off (the default), it gets its token windows alone."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from mnemex.engine.embedding import REWINDOWING
from mnemex.engine.sqlite.vectors import row_steps, window_spans
from mnemex.migration import migrate
from mnemex.store import Store
from tests.conftest import PYTHON, python_env
from tests.index.test_windows import cosines, on_postgres, rows, seq_of
from tests.pg_fixtures import both_engines

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TITLE = "Annual report of the regional water authority"
FILLER = [
    "The treatment plant processed more water than in any earlier year.",
    "Three pumping stations were renovated and their motors replaced.",
    "Leaks in the old cast iron mains fell by a fifth after the repairs.",
    "The board approved a new tariff for industrial customers in March.",
    "Staff training covered chlorine handling and emergency shutdowns.",
    "Samples from every district met the drinking water standard.",
    "A new telemetry system reports the level of each storage tank.",
    "Maintenance crews cleared the intake screens after the spring floods.",
    "The authority signed a ten year contract for sludge disposal.",
    "Customer complaints about taste and odour dropped sharply.",
    "Two reservoirs were drained for inspection of their dams.",
    "Energy use per cubic metre pumped went down by six percent.",
]
DEEP = (
    "A volunteer beekeeper reported that the hives placed near the reservoir produced "
    "twice as much honey as the year before."
)
QUERY = "how much honey did the beehives by the reservoir make?"


@pytest.fixture(autouse=True)
def sentences_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store of this module reads long texts sentence by sentence too."""
    monkeypatch.setenv("MNEMEX_EMBED_SENTENCES", "true")


def report() -> str:
    """A long memory (a title line, then many sentences) with one sentence, deep in its
    body, that no other sentence is about."""
    body = [*FILLER, *FILLER[:6], DEEP, *FILLER[6:], *FILLER[:4]]
    return TITLE + "\n" + " ".join(body)


@pytest.fixture(scope="module")
def model() -> LocalEmbedder:
    return LocalEmbedder()


def token_windows(model: LocalEmbedder, text: str) -> int:
    """How many of the text's windows are token windows (the rest are its sentences)."""
    return len(model.window_parts(text)[0])


def numbers(model: LocalEmbedder, text: str) -> list[int]:
    """The window numbers a memory of ``text`` is stored with: its token windows 0, 1, ...,
    its sentence windows SENTENCE_BASE, SENTENCE_BASE + 1, ..."""
    tokens, sentences = model.window_parts(text)
    return [*range(len(tokens)), *range(SENTENCE_BASE, SENTENCE_BASE + len(sentences))]


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


def committee() -> str:
    """A text of long words: one token window, more than ``SENTENCE_CHARS`` characters."""
    words = [
        "international",
        "administration",
        "responsibilities",
        "understanding",
        "environmental",
    ]
    sentences = [f"The {w} committee reviewed {v} reports." for w in words for v in words]
    return "Committee minutes\n" + " ".join(sentences)


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


def drop_sentences(store: Store, seq: int, keep: int) -> None:
    """Write the memory as the scheme before sentences did: its token windows alone."""
    window = "window_no" if on_postgres(store) else "window"
    mark = "%s" if on_postgres(store) else "?"
    with store.session.transaction() as conn:
        conn.execute(
            f"DELETE FROM embeddings WHERE seq = {mark} AND {window} >= {mark}", (seq, keep)
        )
    store.session.after_write()


def add_window(store: Store, seq: int) -> None:
    """Give a memory one window more than its text has (as a scheme with more would)."""
    if on_postgres(store):
        sql = """INSERT INTO embeddings (seq, namespace, model, content_hash, window_no, vector)
                 SELECT seq, namespace, model, content_hash, 1, vector FROM embeddings
                 WHERE seq = %s AND window_no = 0"""
    else:
        sql = """INSERT INTO embeddings (seq, model, window, dim, content_hash, vector)
                 SELECT seq, model, 1, dim, content_hash, vector FROM embeddings
                 WHERE seq = ? AND window = 0"""
    with store.session.transaction() as conn:
        conn.execute(sql, (seq,))
    store.session.after_write()


def others() -> list[str]:
    return [
        "Bees need flowers within a few kilometres of their hive to make honey.",
        "The honey harvest at the farm market was sold out by noon.",
        "The reservoir's water level rose after three weeks of rain.",
        "Beekeepers in the valley met to compare the yields of their hives.",
    ]


@pytest.mark.model
@both_engines
def test_a_sentence_deep_in_a_long_memory_finds_it(make_store, model: LocalEmbedder) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=model, relevance_floor=False)
    store.add_many(others())
    long_id = store.add(report())
    seq = seq_of(store, long_id)
    tokens = token_windows(model, report())
    assert [w for _, w in rows(store, seq)] == numbers(model, report())
    now = cosines(store, QUERY)
    ranked = [h.id for h in store.search(QUERY, mode="vector").hits]
    drop_sentences(store, seq, tokens)  # the same memory as token windows alone
    before = cosines(store, QUERY)
    ranked_before = [h.id for h in store.search(QUERY, mode="vector").hits]
    assert now[long_id] > before[long_id] + 0.1
    assert ranked[0] == long_id
    assert ranked_before.index(long_id) > 0  # the short memories about honey won before


@pytest.mark.model
@both_engines
def test_reindex_gives_old_memories_their_sentences_once(make_store, model: LocalEmbedder) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=model)
    short_ids = store.add_many(others())
    long_id = store.add(report())
    seq, short = seq_of(store, long_id), seq_of(store, short_ids[0])
    full = rows(store)
    tokens = token_windows(model, report())
    drop_sentences(store, seq, tokens)
    add_window(store, short)
    assert len(rows(store, seq)) == tokens and len(rows(store, short)) == 2
    done = store.reindex()
    assert done is not None and done.embedded > 0
    assert rows(store) == full  # the long memory's sentences back, the short one's one
    assert store.check()["ok"]
    assert cosines(store, QUERY)[long_id] > 0.5
    again = store.reindex()
    assert again is not None and again.embedded == 0  # nothing left to re-window
    assert rows(store) == full


@pytest.mark.model
@both_engines
def test_duplicates_of_a_long_memory_compare_its_first_window(make_store, model) -> None:  # type: ignore[no-untyped-def]
    """Sentence windows do not make a sentence of a long memory its duplicate: the check
    compares first windows, as before."""
    store = make_store(embedder=model, dedup_text=1.0)  # the cosine decides alone
    long_id = store.add(report())
    deep = f"{TITLE}. {DEEP}"
    assert cosines(store, deep)[long_id] > 0.99  # its best window is that sentence
    added = store.remember(deep)
    assert not added.deduplicated and added.id != long_id
    again = store.remember(report().replace("twice as much", "two times as much"))
    assert again.deduplicated and again.id == long_id  # a whole repeat still merges


class Counting:
    """The local model, counting the texts it embeds (the store's cut is the model's)."""

    def __init__(self, model: LocalEmbedder) -> None:
        self.model, self.embedded = model, 0
        self.model_id, self.dim = model.model_id, model.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.embedded += len(texts)
        self.texts.extend(texts)
        return self.model.embed(texts)

    def windows(self, text: str) -> list[str]:
        return self.model.windows(text)

    def window_parts(self, text: str, *, sentences: bool = True) -> tuple[list[str], list[str]]:
        return self.model.window_parts(text, sentences=sentences)


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
@both_engines
def test_sentence_windows_keep_their_numbers_when_reused(make_store, model: LocalEmbedder) -> None:  # type: ignore[no-untyped-def]
    """A text stored again (another namespace) takes the stored vectors of the same text,
    numbers and all: nothing is embedded again."""
    counting = Counting(model)
    store = make_store(embedder=counting)
    first = seq_of(store, store.add(report()))
    embedded = counting.embedded
    second = seq_of(store, store.add(report(), namespace="elsewhere"))
    assert counting.embedded == embedded  # reused by content hash
    assert [w for _, w in rows(store, first)] == numbers(model, report())
    assert [w for _, w in rows(store, second)] == numbers(model, report())
    assert store.check()["ok"]


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


def number_sentences_as_tokens(store: Store, seq: int, tokens: int) -> None:
    """Write the memory as 5a38f69 did: its sentence windows numbered after its token
    windows (tokens, tokens + 1, ...)."""
    window = "window_no" if on_postgres(store) else "window"
    mark = "%s" if on_postgres(store) else "?"
    with store.session.transaction() as conn:
        conn.execute(
            f"UPDATE embeddings SET {window} = {window} - {mark} + {mark} "
            f"WHERE seq = {mark} AND {window} >= {mark}",
            (SENTENCE_BASE, tokens, seq, SENTENCE_BASE),
        )
    store.session.after_write()


@pytest.mark.model
@both_engines
def test_reindex_numbers_sentences_stored_as_token_windows(
    make_store, model: LocalEmbedder
) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=model)
    store.add_many(others())
    seq = seq_of(store, store.add(report()))
    full = rows(store)
    number_sentences_as_tokens(store, seq, token_windows(model, report()))
    assert [w for _, w in rows(store, seq)] == list(range(len(model.windows(report()))))
    done = store.reindex()
    assert done is not None and done.embedded > 0
    assert rows(store) == full
    assert store.check()["ok"]


# A question the long memory's one sentence about honey answers far better than any of
# its token windows.
SENTENCE_ONLY = "how much honey did the hives make"
CAT = "The cat slept on the warm kitchen windowsill all afternoon."


def best(model: LocalEmbedder, query: str, pieces: list[str]) -> float:
    vectors = model.embed([query, *pieces])
    return float((vectors[1:] @ vectors[0]).max())


def floor_read(store: Store, query: str) -> tuple[float, float, float]:
    """The best hit's cosine as ranked, and what the floor read of it: its height above the
    store's level, and the level."""
    hit = store.search(query, explain=True).hits[0]
    assert hit.explain is not None
    stage = next(s for s in hit.explain["stages"] if s["stage"] == "floor")
    return hit.explain["vector"]["cosine"], stage["above"], stage["level"]


@pytest.mark.model
@both_engines
def test_the_floor_reads_token_windows(make_store, model: LocalEmbedder) -> None:  # type: ignore[no-untyped-def]
    """The relevance floor reads each memory's best token window (its cosine before
    sentence windows: a sentence window lifts a foreign query's cosine as much as an
    in-domain one's), the ranking its best window."""
    tokens, sentences = model.window_parts(report())
    assert best(model, SENTENCE_ONLY, sentences) > best(model, SENTENCE_ONLY, tokens) + 0.2
    store = make_store(embedder=model)
    store.add(report())
    store.add(CAT)
    cosine, above, level = floor_read(store, SENTENCE_ONLY)
    assert cosine == pytest.approx(best(model, SENTENCE_ONLY, tokens + sentences), abs=1e-4)
    assert above + level == pytest.approx(best(model, SENTENCE_ONLY, tokens), abs=1e-4)


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


@pytest.mark.model
@both_engines
def test_sentences_follow_the_setting(make_store, model: LocalEmbedder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Off (the default), a long memory gets its token windows alone; a reindex with the
    setting turned on gives it its sentences, and one with it off takes them away."""
    monkeypatch.delenv("MNEMEX_EMBED_SENTENCES")
    store = make_store("setting.db", embedder=model)
    long_id = store.add(report())
    seq = seq_of(store, long_id)
    tokens = token_windows(model, report())
    assert [w for _, w in rows(store, seq)] == list(range(tokens))
    store.close()
    on = make_store("setting.db", embedder=model, embed_sentences=True)
    assert on.reindex() is not None
    assert [w for _, w in rows(on, seq)] == numbers(model, report())
    on.close()
    off = make_store("setting.db", embedder=model)
    done = off.reindex()
    assert done is not None and done.embedded > 0  # written anew, without sentences
    assert [w for _, w in rows(off, seq)] == list(range(tokens))
    assert off.check()["ok"]


def mixed() -> dict[str, str]:
    """Memories of each kind a reindex tells apart: short ones (ASCII or not), one of one
    token window past ``SENTENCE_CHARS``, long ones (ASCII or not)."""
    return {
        **{f"short {n}": text for n, text in enumerate(others())},
        "short, not ASCII": "Café notes: the espresso machine in the café was repaired.",
        "medium": committee(),
        "long": report(),
        "long, not ASCII": report().replace("regional water", "Zürich water"),
    }


SENTENCED = ("medium", "long", "long, not ASCII")  # the memories embed_sentences changes


@pytest.mark.model
@both_engines
def test_reindex_re_windows_exactly_the_memories_the_setting_changes(
    make_store, model: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Nothing changed, a reindex embeds nothing (it looks at every memory); with
    ``embed_sentences`` turned on, then off, it embeds anew the long memories alone,
    each in its windows."""
    monkeypatch.delenv("MNEMEX_EMBED_SENTENCES")
    texts, counting = mixed(), Counting(model)
    store = make_store("flip.db", embedder=counting)
    store.add_many(list(texts.values()))
    stored, counting.texts = rows(store), []
    seen: list[tuple[str, int, int]] = []
    same = store.reindex(progress=lambda *step: seen.append(step))
    assert same is not None and same.embedded == 0 and counting.texts == []
    assert rows(store) == stored
    assert seen == [
        ("embedding", 0, 0),
        (REWINDOWING, 0, len(texts)),
        (REWINDOWING, len(texts), len(texts)),
    ]
    store.close()
    for sentences in (True, False):
        again = make_store("flip.db", embedder=counting, embed_sentences=sentences)
        counting.texts = []
        seen.clear()
        done = again.reindex(progress=lambda *step: seen.append(step))
        assert done is not None and done.embedded > 0
        windows = [numbered_windows(model, texts[name], sentences=sentences) for name in SENTENCED]
        assert set(counting.texts) == {piece for cut in windows for _, piece in cut}
        assert seen[-1] == (REWINDOWING, len(texts), len(texts))
        assert all(count <= total for _, count, total in seen)
        counting.texts = []
        nothing = again.reindex()
        assert nothing is not None and nothing.embedded == 0 and counting.texts == []
        assert again.check()["ok"]
        again.close()


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
