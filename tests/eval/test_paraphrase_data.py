"""The paraphrase dev set (mnemex/eval/paraphrase.json): its shape and the promises it makes.

The set is data, not code: these tests keep its invariants true when it is edited (unique
ids, answers that exist, store sizes, counts, and reworded English questions that do not
repeat their answer's words).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from importlib.resources import files
from typing import Any

import pytest

# The English function words the search drops from queries. The module has no per-language
# mapping: STOPWORDS is the union of every language's list, ENGLISH is the English one.
from mnemex.index.stopwords import ENGLISH

KINDS = {"decision", "gotcha", "fact", "preference", "todo", "observation", "note", "procedure"}
LANGS = {"en", "zh", "ja", "ko", "de", "es", "fr", "ru"}
MIXED_LANGS = {"ja", "ko", "de", "es", "fr", "ru"}

# English questions allowed to share more than one content word with an answer, each with
# the reason (a deliberately named identifier). At most 10% of the English questions.
ALLOW_SHARED: dict[str, str] = {}


def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (files("mnemex.eval") / "paraphrase.json").read_text(encoding="utf-8")
    )
    return data


DATA = _load()
STORES: list[dict[str, Any]] = DATA["stores"]


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if w not in ENGLISH and len(w) > 2}


def _question_lang(store: dict[str, Any], question: dict[str, Any]) -> str:
    return str(question.get("lang", store["language"]))


def _english_questions() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (store, q)
        for store in STORES
        for q in store["questions"]
        if _question_lang(store, q) == "en"
    ]


def test_top_level_shape() -> None:
    assert set(DATA) == {"description", "stores", "unrelated"}
    assert "Apache-2.0" in DATA["description"]
    assert len(STORES) >= 8
    for store in STORES:
        assert set(store) == {"name", "language", "memories", "questions"}
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", store["name"])
        assert store["language"] in LANGS | {"mixed"}


def test_non_ascii_is_written_literally() -> None:
    raw = (files("mnemex.eval") / "paraphrase.json").read_text(encoding="utf-8")
    assert "\\u" not in raw
    assert "发票" in raw


def test_ids_are_unique() -> None:
    names = [s["name"] for s in STORES]
    memories = [m["id"] for s in STORES for m in s["memories"]]
    questions = [q["id"] for s in STORES for q in s["questions"]]
    unrelated = [u["id"] for u in DATA["unrelated"]]
    for ids in (names, memories, questions, unrelated):
        assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert not set(memories) & set(questions)


def test_memories_are_well_formed() -> None:
    for store in STORES:
        for m in store["memories"]:
            assert set(m) <= {"id", "kind", "content", "tags", "lang"}, m["id"]
            assert m["kind"] in KINDS, m["id"]
            assert isinstance(m["content"], str) and m["content"].strip(), m["id"]
            assert isinstance(m["tags"], list), m["id"]
            assert all(isinstance(t, str) and t for t in m["tags"]), m["id"]
            assert m.get("lang", store["language"]) in LANGS, m["id"]


def test_store_sizes() -> None:
    sizes = [len(s["memories"]) for s in STORES]
    assert all(10 <= n <= 200 for n in sizes), sizes
    assert min(sizes) <= 15 and max(sizes) >= 150  # small to large, not all one size


def test_every_answer_exists_in_its_store() -> None:
    for store in STORES:
        ids = {m["id"] for m in store["memories"]}
        for q in store["questions"]:
            assert set(q) <= {"id", "text", "answers", "lang"}, q["id"]
            assert q["text"].strip(), q["id"]
            assert q["answers"], q["id"]
            assert len(q["answers"]) == len(set(q["answers"])), q["id"]
            assert set(q["answers"]) <= ids, (q["id"], set(q["answers"]) - ids)


def test_counts() -> None:
    assert sum(len(s["questions"]) for s in STORES) >= 160
    assert all(len(s["questions"]) >= 12 for s in STORES)
    assert len(DATA["unrelated"]) >= 150
    for u in DATA["unrelated"]:
        assert set(u) == {"id", "text"} and u["text"].strip()


def test_languages() -> None:
    assert any(s["language"] == "zh" and 12 <= len(s["memories"]) <= 25 for s in STORES)
    mixed = [s for s in STORES if s["language"] == "mixed"]
    assert mixed
    for store in mixed:
        # In a mixed store every memory and question says its language.
        assert all("lang" in m for m in store["memories"])
        assert all("lang" in q for q in store["questions"])
        per_lang = Counter(m["lang"] for m in store["memories"])
        assert all(per_lang[lang] >= 4 for lang in MIXED_LANGS), per_lang
    cjk = re.compile(r"[\u3400-\u9fff]")
    english_with_cjk = [
        m
        for s in STORES
        if s["language"] == "en"
        for m in s["memories"]
        if cjk.search(m["content"])
    ]
    assert english_with_cjk  # an English store with a Chinese-speaking colleague's memories


@pytest.mark.parametrize(
    ("store", "question"),
    _english_questions(),
    ids=[q["id"] for _, q in _english_questions()],
)
def test_english_question_is_a_paraphrase(store: dict[str, Any], question: dict[str, Any]) -> None:
    memories = {m["id"]: m for m in store["memories"]}
    words = _content_words(question["text"])
    for answer in question["answers"]:
        shared = words & _content_words(memories[answer]["content"])
        if question["id"] not in ALLOW_SHARED:
            assert len(shared) <= 1, (question["id"], answer, sorted(shared))


def test_allow_list_is_small() -> None:
    english = {q["id"] for _, q in _english_questions()}
    assert set(ALLOW_SHARED) <= english
    assert len(ALLOW_SHARED) <= len(english) // 10


def test_unrelated_prompts_name_no_identifier_of_any_store() -> None:
    # Whether a prompt is unrelated was checked by hand against every store (shared
    # ordinary words are too common to test mechanically); this catches the plain leak of
    # a store's code identifiers (snake_case names) into the prompts.
    identifiers = {
        word
        for s in STORES
        for m in s["memories"]
        for word in re.findall(r"\w+", m["content"].lower())
        if "_" in word.strip("_")
    }
    for u in DATA["unrelated"]:
        assert not set(re.findall(r"\w+", u["text"].lower())) & identifiers, u["id"]
