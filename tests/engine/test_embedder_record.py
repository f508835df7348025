"""A store records the embedder it was indexed with and keeps using it.

Through the CLI in real processes (against a real HTTP endpoint on
127.0.0.1), and through the Python API with the fake embedder.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import mnemex
from mnemex.embed import Unavailable
from mnemex.embed.sentence_transformers import SentenceTransformerEmbedder
from tests.conftest import FakeEmbedder
from tests.test_openai import Server, cli


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


def recorded(db: Path) -> dict[str, object]:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    return json.loads(row[0]) if row else {}


def stats(home: Path) -> dict[str, object]:
    done, _ = cli(home, "stats", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_store_keeps_its_embedder_without_the_variables(server: Server, tmp_path: Path) -> None:
    openai = {
        "MNEMEX_EMBEDDER": "openai",
        "MNEMEX_OPENAI_BASE_URL": server.url,
        "MNEMEX_EMBED_MODEL": "test-embed",
    }
    local = {"MNEMEX_EMBEDDER": "local"}  # the embedder the store starts with
    assert cli(tmp_path, "add", "the staging database is refreshed on sunday", **local)[0]
    assert recorded(tmp_path / "memories.db")["provider"] == "local"
    done, _ = cli(tmp_path, "reindex", "--prune", **openai)
    assert done.returncode == 0, done.stderr
    record = recorded(tmp_path / "memories.db")
    assert record == {
        "provider": "openai",
        "model": "test-embed",
        "model_id": "openai:test-embed",
        "dim": 16,
        "base_url": server.url,
        "api_key_env": "OPENAI_API_KEY",
        "dimensions": 0,
    }
    before = len(server.requests)
    # No variables: the store's embedder is used, not the local model.
    added, _ = cli(tmp_path, "add", "billing webhooks retry three times")
    assert added.returncode == 0 and added.stderr == ""
    found, _ = cli(tmp_path, "search", "webhooks retry", "--json")
    assert json.loads(found.stdout)["mode_used"] == "hybrid"
    assert len(server.requests) == before + 2  # the new memory and the query
    info = stats(tmp_path)
    assert info["embedder"] == "openai:test-embed"
    assert (info["vectors"], info["pending_vectors"], info["other_models"]) == (2, 0, {})


def test_another_embedder_is_used_only_after_reindex(server: Server, tmp_path: Path) -> None:
    first = {"MNEMEX_EMBEDDER": "openai", "MNEMEX_OPENAI_BASE_URL": server.url}
    assert cli(tmp_path, "add", "deploys happen on friday", MNEMEX_EMBED_MODEL="a", **first)[0]
    other = {**first, "MNEMEX_EMBED_MODEL": "b"}
    found, _ = cli(tmp_path, "search", "deploys", "--json", **other)
    result = json.loads(found.stdout)
    assert result["mode_used"] == "lexical"
    assert any(
        "indexed with openai:a, not openai:b" in note and "mnemex reindex" in note
        for note in result["notes"]
    )
    added, _ = cli(tmp_path, "add", "rollbacks take ten minutes", **other)
    assert added.stderr.count("\n") == 1 and "mnemex reindex" in added.stderr
    assert stats(tmp_path)["embedder"] == "openai:a"  # nothing switched
    assert {r["body"]["model"] for r in server.requests} == {"a"}
    done, _ = cli(tmp_path, "reindex", **other)
    assert done.returncode == 0, done.stderr
    assert recorded(tmp_path / "memories.db")["model_id"] == "openai:b"
    info = stats(tmp_path)  # no variables: now b
    assert (info["embedder"], info["vectors"], info["pending_vectors"]) == ("openai:b", 2, 0)


def test_a_record_never_holds_a_secret(server: Server, tmp_path: Path) -> None:
    url = server.url.replace("http://", "http://user:pa55word@") + "?api_key=k3y"
    env = {
        "MNEMEX_EMBEDDER": "openai",
        "MNEMEX_OPENAI_BASE_URL": url,
        "MNEMEX_OPENAI_API_KEY_ENV": "MY_EMBED_KEY",
        "MY_EMBED_KEY": "sk-s3cret",
    }
    done, _ = cli(tmp_path, "add", "a memory", **env)
    assert done.returncode == 0 and done.stderr.startswith("created store at ")
    assert done.stderr.count("\n") == 1
    assert server.requests[-1]["auth"] == "Bearer sk-s3cret"
    text = json.dumps(recorded(tmp_path / "memories.db"))
    assert "MY_EMBED_KEY" in text and server.url in text
    for secret in ("pa55word", "user", "k3y", "sk-s3cret"):
        assert secret not in text


def test_a_recorded_embedder_that_cannot_be_used_says_why(tmp_path: Path) -> None:
    """The store was indexed with OpenAI's API; this shell has no key."""
    db = tmp_path / "memories.db"
    with mnemex.open(db, embedder=None) as store:
        store.add("the staging database is refreshed on sunday")
    record = {
        "provider": "openai",
        "model": "text-embedding-3-small",
        "model_id": "openai:text-embedding-3-small",
        "dim": 1536,
        "base_url": "https://api.openai.com/v1",
        "api_key_env": "MNEMEX_TEST_NO_SUCH_KEY",
        "dimensions": 0,
    }
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO meta VALUES ('embedder', ?)", (json.dumps(record),))
    found, _ = cli(tmp_path, "search", "staging database")
    assert found.returncode == 0 and "staging database" in found.stdout
    assert found.stderr.count("\n") == 1
    assert "MNEMEX_TEST_NO_SUCH_KEY is not set" in found.stderr and "lexical" in found.stderr
    added, _ = cli(tmp_path, "add", "another memory")
    assert added.returncode == 0
    assert added.stderr.startswith("warning: ") and "MNEMEX_TEST_NO_SUCH_KEY" in added.stderr
    assert stats(tmp_path)["embedder"] == "openai:text-embedding-3-small"


def test_the_api_records_and_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMEX_EMBEDDER")  # nothing configured
    path = tmp_path / "api.db"
    with mnemex.open(path, embedder=FakeEmbedder()) as store:
        store.add("billing webhooks retry three times")
    assert recorded(path) == {"provider": "custom", "model_id": "fake:bow-64", "dim": 64}
    with mnemex.open(path) as store:  # mnemex cannot build the fake: it says so
        assert isinstance(store.embedder, Unavailable)
        result = store.search("webhooks")
        assert result.mode_used == "lexical" and result.hits
        assert any("mnemex.open(embedder=...)" in note for note in result.notes)
    with mnemex.open(path, embedder=FakeEmbedder()) as store:
        assert store.search("webhooks").mode_used == "hybrid"
    with mnemex.open(path, embedder="none") as store:  # lexical on purpose: no note
        result = store.search("webhooks")
        assert result.mode_used == "lexical" and result.notes == ()


def test_a_store_from_before_records_its_model(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with mnemex.open(path, embedder=FakeEmbedder()) as store:
        store.add("billing webhooks retry three times")
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM meta WHERE key = 'embedder'")
    with mnemex.open(path, embedder="auto") as store:
        assert store.embedder is not None and store.embedder.model_id == "fake:bow-64"
        assert "cannot load by itself" in store.search("webhooks").notes[0]
    with mnemex.open(path, embedder=FakeEmbedder()) as store:
        store.add("a second memory")
    assert recorded(path)["model_id"] == "fake:bow-64"


def model_folder(root: Path, weights: bytes = b"\x00weights") -> Path:
    folder = root / "all-MiniLM-L6-v2"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 384}')
    (folder / "modules.json").write_text('[{"idx": 1, "path": "1_Pooling"}]')
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("a model card")
    return folder


def test_a_model_folder_is_known_by_name_and_content(tmp_path: Path) -> None:
    here = model_folder(tmp_path / "here")
    there = tmp_path / "elsewhere" / "copy" / "all-MiniLM-L6-v2"
    shutil.copytree(here, there)
    (there / "README.md").write_text("another model card")  # not part of the model
    ident = SentenceTransformerEmbedder(str(here)).model_id
    assert ident == SentenceTransformerEmbedder(str(there)).model_id
    assert ident.startswith("st:all-MiniLM-L6-v2:") and str(tmp_path) not in ident
    (there / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert SentenceTransformerEmbedder(str(there)).model_id != ident
    changed = model_folder(tmp_path / "changed", weights=b"\x01weights")
    assert SentenceTransformerEmbedder(str(changed)).model_id != ident
    assert SentenceTransformerEmbedder("some/hub-model").model_id == "st:some/hub-model"
