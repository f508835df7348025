"""The FTS5 index stays equal to the memories table under any sequence of writes."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

import mnemex

_TEXT = st.text(
    alphabet=st.sampled_from(list("abcdefghij klmnop 数据库会话사과를 éü-.,")),
    min_size=1,
    max_size=40,
).filter(lambda s: s.strip())
_TAGS = st.lists(st.sampled_from(["ops", "db", "数据", "ui", "x"]), max_size=3)


class FtsSync(RuleBasedStateMachine):
    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.store = mnemex.open(Path(self.tmp.name) / "sync.db")
        self.model: dict[str, tuple[str, str]] = {}  # id -> (namespace, content)

    @rule(target=ids, content=_TEXT, tags=_TAGS, ns=st.sampled_from(["a", "b"]))
    def add(self, content: str, tags: list[str], ns: str) -> str:
        ident = self.store.add(content, tags=tags, namespace=ns)
        self.model[ident] = (ns, content.strip())
        return ident

    @rule(target=ids, contents=st.lists(_TEXT, min_size=1, max_size=5))
    def add_many(self, contents: list[str]) -> str:
        new = self.store.add_many(contents, namespace="a")
        for ident, content in zip(new, contents, strict=True):
            self.model[ident] = ("a", content.strip())
        return new[0]

    @rule(ident=ids, content=_TEXT, tags=_TAGS)
    def update(self, ident: str, content: str, tags: list[str]) -> None:
        if ident not in self.model:
            return
        ns, _ = self.model[ident]
        self.store.update(ident, content=content, tags=tags, namespace=ns)
        self.model[ident] = (ns, content.strip())

    @rule(ident=ids, confidence=st.floats(0, 1))
    def update_confidence(self, ident: str, confidence: float) -> None:
        if ident in self.model:
            self.store.update(ident, confidence=confidence, namespace=self.model[ident][0])

    @rule(ident=ids)
    def forget(self, ident: str) -> None:
        ns = self.model.get(ident, ("a", ""))[0]
        result = self.store.forget([ident], namespace=ns)
        assert (ident in result.forgotten) == (ident in self.model)
        self.model.pop(ident, None)

    @invariant()
    def rows_match_model(self) -> None:
        assert self.store.count(namespace=mnemex.ALL) == len(self.model)

    def teardown(self) -> None:
        report = self.store.check()
        assert report["ok"], report["problems"]
        conn = self.store.session.conn
        fts_docs = conn.execute(
            "SELECT count(*) FROM (SELECT DISTINCT rowid FROM memories_fts WHERE memories_fts MATCH ?)",
            ('"a" OR "b" OR "c" OR "d" OR "e" OR "f" OR "g" OR "h" OR "i" OR "j" OR "数" OR "사"',),
        ).fetchone()[0]
        assert fts_docs <= len(self.model)
        self.store.close()
        self.tmp.cleanup()


FtsSync.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFtsSync = FtsSync.TestCase


def test_check_detects_a_ghost_row(store) -> None:  # type: ignore[no-untyped-def]
    store.add_many(["alpha beta", "gamma delta"])
    assert store.check()["ok"]
    # Bypass the triggers the way a buggy writer would: drop the row behind FTS5's back.
    raw = sqlite3.connect(store.path)
    raw.execute("DROP TRIGGER memories_after_delete")
    raw.execute("DELETE FROM memories WHERE content = 'alpha beta'")
    raw.commit()
    raw.close()
    report = store.check()
    assert not report["ok"]
    assert any("ghost" in p or "postings" in p for p in report["problems"])


def test_search_finds_every_memory_by_its_content(store) -> None:  # type: ignore[no-untyped-def]
    ids = store.add_many([f"unique{i}token shared" for i in range(200)])
    for i in (0, 57, 199):
        assert [h.id for h in store.search(f"unique{i}token").hits] == [ids[i]]


def test_reindex_rebuilds_an_index_that_differs_and_leaves_a_sound_one(store) -> None:  # type: ignore[no-untyped-def]
    store.add_many(["alpha beta", "gamma delta"])
    watcher = sqlite3.connect(store.path)  # its data_version moves when another connection commits
    before = watcher.execute("PRAGMA data_version").fetchone()[0]
    store.reindex(force=True)  # the index holds what a rebuild would: nothing written
    assert watcher.execute("PRAGMA data_version").fetchone()[0] == before
    watcher.close()
    raw = sqlite3.connect(store.path)  # a row the index does not know, behind the triggers
    raw.execute("DROP TRIGGER memories_after_update_text")
    raw.execute("UPDATE memories SET content = 'epsilon zeta' WHERE content = 'alpha beta'")
    raw.commit()
    raw.close()
    assert not store.check()["ok"]
    store.reindex(force=True)
    assert store.check()["ok"]
    assert len(store.search("epsilon").hits) == 1
