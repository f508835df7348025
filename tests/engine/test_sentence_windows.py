"""With ``embed_sentences`` on, a memory longer than a window of the local model gets a
vector per sentence of its body too, each read after its first line, and is scored by the
best of all its windows. Off (the default), it gets its token windows alone.

The tests here run on both engines; the SQLite-only ones are in
``tests/engine/sqlite/test_sentence_windows.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from mnemex.embed import SENTENCE_BASE, numbered_windows
from mnemex.embed.local import (
    LocalEmbedder,
)
from mnemex.engine.embedding import REWINDOWING
from mnemex.store import Store
from tests.engine.test_windows import cosines, on_postgres, rows, seq_of
from tests.pg_fixtures import both_engines

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
