"""Memories in Chinese, Japanese, Korean, Spanish and others are found in their language."""

from __future__ import annotations

import pytest

from mnemex.store import Store

MEMORIES = {
    "zh": "我们昨天决定使用PostgreSQL数据库来存储用户的会话信息",
    "zh2": "上海客户需要增值税专用发票，开票信息每月核对一次",
    "ja": "明日の会議でデータベースの移行計画を説明します",
    "ko": "배포 전에 데이터베이스 마이그레이션을 반드시 확인해야 합니다",
    "ko2": "사과를 먹었다",
    "es": "La reunión con el equipo de diseño fue muy productiva; acordamos usar colores más claros",
    "es2": "Tomás migró la facturación a la nueva versión de la API de Stripe",
    "pt": "A equipe de vendas apresenta o relatório trimestral na sexta-feira",
    "de": "Die Rechnungen werden nachts um zwei Uhr erzeugt",
    "ru": "Счета формируются каждую ночь",
    "ar": "يتم إنشاء الفواتير كل ليلة",
    "en": "The invoice PDFs render slowly because of embedded fonts",
}


@pytest.fixture
def polyglot(store: Store) -> tuple[Store, dict[str, str]]:
    ids = dict(zip(MEMORIES, store.add_many(list(MEMORIES.values())), strict=True))
    return store, ids


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("数据", "zh"),  # two characters inside a longer run
        ("数据库", "zh"),
        ("会话", "zh"),
        ("发票", "zh2"),  # "invoice"
        ("增值税发票", "zh2"),
        ("上海的客户要什么发票？", "zh2"),
        ("データベース", "ja"),
        ("移行", "ja"),
        ("会議", "ja"),
        ("데이터베이스", "ko"),
        ("마이그레이션", "ko"),
        ("사과", "ko2"),  # a noun with its particle attached in the memory
        ("사과가", "ko2"),  # and another particle in the query
        ("reunión de diseño", "es"),
        ("reunion diseno", "es"),  # without accents
        ("facturación Stripe", "es2"),
        ("Rechnungen", "de"),
        ("Счета", "ru"),
        ("الفواتير", "ar"),
        ("invoice fonts", "en"),
    ],
)
def test_found_in_its_language(
    polyglot: tuple[Store, dict[str, str]], query: str, expected: str
) -> None:
    store, ids = polyglot
    hits = store.search(query).hits
    assert hits, query
    assert hits[0].id == ids[expected], (query, [h.snippet for h in hits])


def test_cjk_snippet_is_the_original_text(polyglot: tuple[Store, dict[str, str]]) -> None:
    store, ids = polyglot
    (hit, *_) = store.search("数据").hits
    assert hit.snippet == "我们昨天决定使用PostgreSQL**数据**库来存储用户的会话信息"
    assert "\u200b" not in hit.snippet
    full = store.get(ids["zh"]).memories[0].content
    assert full == MEMORIES["zh"]


def test_single_cjk_character(polyglot: tuple[Store, dict[str, str]]) -> None:
    store, ids = polyglot
    assert ids["zh2"] in {h.id for h in store.search("票").hits}


def test_cjk_tags(store: Store) -> None:
    ident = store.add("quarterly invoice check", tags=["发票"])
    assert [h.id for h in store.search("发票").hits] == [ident]
    assert [e.id for e in store.timeline(tags=["发票"])] == [ident]


# Memories made of function words only: a question shares nothing else with them.
FUNCTION_WORDS = {
    "ko": "누가, 언제, 어디서, 무엇을, 왜 하나요?",
    "zh": "这是什么？那是谁的？我们的在哪里？",
    "ja": "それはいつですか、何ですか",
    "es": "¿Con quién fue? Fue con ella, la de siempre, con la que fue",
    "pt": "O que é isso? Quando e onde foi?",
    "ar": "متى كان ذلك؟ ماذا في هذا؟",
}


@pytest.fixture
def noisy(store: Store) -> tuple[Store, dict[str, str], set[str]]:
    ids = dict(zip(MEMORIES, store.add_many(list(MEMORIES.values())), strict=True))
    return store, ids, set(store.add_many(list(FUNCTION_WORDS.values())))


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # Korean: particles stripped, question words set aside
        ("데이터베이스를 언제 확인해야 하나요?", "ko"),
        ("마이그레이션은 무엇을 확인해야 합니까?", "ko"),
        ("누가 사과를 먹었어?", "ko2"),
        # Chinese: runs cut at function words
        ("我们用什么数据库来存储会话？", "zh"),
        ("上海的客户要什么样的发票？", "zh2"),
        # Japanese: particles and auxiliaries cut out of the run
        ("明日の会議では何を説明しますか", "ja"),
        ("データベースの移行はいつですか", "ja"),
        # Spanish, Portuguese, Arabic: stop words set aside
        ("¿Con quién fue la reunión de diseño?", "es"),
        ("¿Qué versión de la API usa la facturación?", "es2"),
        ("Quando a equipe de vendas apresenta o relatório?", "pt"),
        ("متى يتم إنشاء الفواتير؟", "ar"),
    ],
)
def test_questions_find_their_memory_not_their_function_words(
    noisy: tuple[Store, dict[str, str], set[str]], question: str, expected: str
) -> None:
    store, ids, function_words = noisy
    result = store.search(question, mode="lexical")
    assert result.mode_used == "lexical"
    found = [h.id for h in result.hits]
    assert found and found[0] == ids[expected], (question, [h.snippet for h in result.hits])
    assert not function_words & set(found), (question, [h.snippet for h in result.hits])


@pytest.mark.parametrize(
    ("question", "expected"),
    [("con la de", "es"), ("的", "zh"), ("の", "ja"), ("كل", "ar")],
)
def test_a_question_of_stop_words_still_finds_memories(
    polyglot: tuple[Store, dict[str, str]], question: str, expected: str
) -> None:
    store, ids = polyglot
    assert ids[expected] in {h.id for h in store.search(question, mode="lexical").hits}


def test_stop_words_come_back_when_content_words_match_nothing(
    polyglot: tuple[Store, dict[str, str]],
) -> None:
    store, ids = polyglot
    hits = store.search("¿zzyzx con el equipo?", mode="lexical").hits
    assert hits and hits[0].id == ids["es"]


def test_query_expansion_can_be_switched_off(make_store) -> None:  # type: ignore[no-untyped-def]
    """With expansion, Spanish stop words are set aside; without it only English ones are."""
    texts = ["para para para nada", "La reunión del presupuesto es el lunes"]
    on = make_store("on.db")
    off = make_store("off.db", query_expansion=False)
    for store in (on, off):
        store.add_many(texts)
    query = "¿para cuándo es la reunión?"
    assert [h.snippet for h in on.search(query).hits] == [
        "La **reunión** del presupuesto es el lunes"
    ]
    assert len(off.search(query).hits) == 2
    assert len(on.search(query, expand=False).hits) == 2
    assert len(off.search(query, expand=True).hits) == 1
