"""Spelling tolerance: a query word no memory holds, read as the store's word it misspells."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from mnemex.search.floor import model_holds, model_words
from mnemex.search.spelling import Correction, allowed_edits, nearest, worth_correcting
from mnemex.store import Store
from tests.conftest import python_env
from tests.pg_fixtures import both_engines


def test_the_vocabulary_file_holds_what_the_table_holds() -> None:
    """A new process asks the file whether the model holds a word; a process that built the
    table asks the table: the same answer for every token and for words it lacks."""
    words = ["carolinn", "jhn", "ohn", "joh", "the\nand", "", "[unk]", "##", "\ud800", 7]
    check = f"""
import json, sys
from mnemex.embed.wordpiece import load_vocab, vocabulary_loaded
from mnemex.search.floor import model_holds
searched = model_holds()
assert not vocabulary_loaded() and not isinstance(searched, dict)
table = load_vocab()
words = [*table, *{words!r}]
print(json.dumps([w in searched for w in words] == [w in table for w in words]))
"""
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, env=python_env()
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is True
    vocabulary, _ = model_words()
    assert model_holds() is vocabulary


def test_only_an_unknown_word_no_memory_holds_is_worth_correcting() -> None:
    vocabulary, _ = model_words()
    assert worth_correcting("carolinn", 0, vocabulary)
    assert not worth_correcting("carolinn", 3, vocabulary)  # the store holds it as written
    assert not worth_correcting("andrew", 0, vocabulary)  # a word: someone else, maybe
    assert worth_correcting("jhn", 0, vocabulary)  # "john" with a letter dropped
    assert not worth_correcting("jn", 0, vocabulary)  # too short to tell
    assert not worth_correcting("covid19", 0, vocabulary)


def test_the_nearest_held_term_within_its_edits_wins() -> None:
    held = [("carolin", 40), ("carol", 3), ("melani", 38), ("karolin", 90)]
    assert nearest("carolinn", held) == Correction("carolinn", "carolin", 1, 40)
    assert nearest("mellani", held) == Correction("mellani", "melani", 1, 38)
    assert nearest("arolin", held) is None  # the first letter is kept
    assert nearest("carolinnnn", held) is None  # three edits
    # a swap of two letters is one edit; ties go to the term more memories hold
    assert nearest("caorlin", [("carolin", 5), ("caorlix", 9)]) == Correction(
        "caorlin", "caorlix", 1, 9
    )
    assert nearest("carolinn", [("carolinn", 4)]) is None  # itself: nothing to correct
    # a short word is read as a longer one it misses, never as a word as short as itself
    assert nearest("jhn", [("john", 7), ("jan", 9)]) == Correction("jhn", "john", 1, 7)
    assert nearest("jhn", [("jan", 9)]) is None


@pytest.mark.parametrize(
    ("a", "b", "edits"),
    [("nete", "nate", 1), ("carolinn", "carolin", 1), ("chenodeosycholic", "chenodeoxycholic", 2)],
)
def test_long_words_may_be_two_edits_away(a: str, b: str, edits: int) -> None:
    assert allowed_edits(a, b) == edits


CHAT = [
    "Caroline: I researched adoption agencies last week.",
    "Melanie: I painted a sunrise over the lake.",
    "Caroline: the pride parade was amazing.",
    "Melanie: my kids loved the camping trip.",
    "Jon: I lost my job at the bank.",
]


@both_engines
def test_a_misspelt_name_finds_the_memories_of_the_name(store: Store) -> None:
    store.add_many(CHAT)
    found = store.search("what did carolinn research?")
    assert found.hits and "Caroline" in found.hits[0].snippet
    assert any("'carolinn' as 'caroline'" in note for note in found.notes)
    melanie = store.search("When did Mellanie paint the sunrise?")
    assert "sunrise" in melanie.hits[0].snippet
    # a real name the store does not know stays what it is
    andrew = store.search("what did andrew research?")
    assert not any(note.startswith("read ") for note in andrew.notes)
    assert store.search("anything about carolinn?", expand=False).hits == ()


def test_a_namespace_counts_its_rows_only_for_the_terms_near_the_misspelling(
    store: Store,
) -> None:
    """In a store of several namespaces a term's rows in the namespace searched cost a query
    each: they are counted for the terms the misspelling is near, not for every term
    starting with its letter."""
    words = "chapter cabinet capital cottage central channel climate collect courage crystal"
    store.add_many([*CHAT, f"Caroline also kept notes on {words}."], namespace="chat")
    store.add("a memory of another project", namespace="elsewhere")
    conn = store.session.conn
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        found = store.search("what did carolinn research?", namespace="chat", mode="lexical")
    finally:
        conn.set_trace_callback(None)
    assert any("'carolinn' as 'caroline'" in note for note in found.notes)
    counted = [s for s in statements if "count(DISTINCT v.doc)" in s]
    assert counted and all("v.term = 'carolin" in s for s in counted), counted


def test_a_misspelling_checked_first_leaves_the_next_search_as_it_was(
    make_store: Callable[..., Store],
) -> None:
    """A candidate's rows are read by its index term exactly: FTS5 would stem the term again
    ("hous" reads the rows of "hou"), find none, and leave them, in the namespace's cache,
    for the rows of the word the term is the stem of ("house")."""
    notes = ["The house insurance renews in May.", "Call the plumber about the house boiler."]
    first = make_store()
    first.add_many([*notes, "The car insurance is with another company."], namespace="home")
    first.add("a note of another project", namespace="work")
    misspelt = first.search("who insures the housr?", namespace="home", mode="lexical")
    assert any("'housr' as 'house'" in note for note in misspelt.notes), misspelt.notes
    after = first.search("house", namespace="home", mode="lexical")
    fresh = make_store().search("house", namespace="home", mode="lexical")
    assert [h.id for h in after.hits] == [h.id for h in fresh.hits]
    assert len(after.hits) == 2


@both_engines
def test_a_word_whose_stem_stems_again_is_corrected(store: Store) -> None:
    """ "house" is indexed as "hous", which stems to "hou": "housr" is still read as it."""
    store.add_many(["The house insurance renews in May.", "The car needs new tyres."])
    found = store.search("who insures the housr?", mode="lexical")
    assert any("'housr' as 'house'" in note for note in found.notes), found.notes
    assert "house" in found.hits[0].snippet


SESSIONS = [
    "John: I started collecting vintage stamps.\nMaria: Nice! Any favourites?",
    "John: We won the game on Friday.\nMaria: Congrats on the win!",
    "Maria: The shelter needs volunteers.\nJohn: Count me in for Saturday.",
]


@both_engines
def test_a_name_every_memory_holds_is_still_read_through_a_dropped_letter(store: Store) -> None:
    """A speaker's name in every session says little to the lexical arm, but the query
    means it: "Jhn" (three letters, a letter dropped) is read as "John"."""
    store.add_many(SESSIONS)
    found = store.search("What does Jhn collect?", mode="lexical")
    assert any("'jhn' as 'john'" in note for note in found.notes)
    assert found.hits and "stamps" in found.hits[0].snippet


@both_engines
def test_spelling_can_be_turned_off(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store("plain.db", spelling=False)
    store.add_many(CHAT)
    assert store.search("anything about carolinn?").hits == ()
