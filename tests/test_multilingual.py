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
