"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

import mnemex
from mnemex import EmbeddingError
from mnemex.embed import embed_checked
from mnemex.embed.openai import OpenAIEmbedder


class Server:
    """An /v1/embeddings endpoint whose next answers the test can script."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: list[str] = []  # "ok", "503", "429", "401", "count", "nan", "dims", "garbage"
        self.dim = 16
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"body": body, "auth": self.headers.get("Authorization"), "path": self.path}
                )
                action = outer.script.pop(0) if outer.script else "ok"
                if action in ("503", "429", "401"):
                    self.send_response(int(action))
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                    return
                if action == "garbage":
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"<html>not json</html>")
                    return
                texts = body["input"]
                data = []
                for index, text in enumerate(texts):
                    digest = hashlib.sha256(text.encode()).digest()
                    vector = [b / 255 for b in digest[: outer.dim]]
                    if action == "nan" and index == 0:
                        vector[0] = float("nan")
                    if action == "dims" and index == 0:
                        vector = vector[:-1]
                    data.append({"object": "embedding", "index": index, "embedding": vector})
                if action == "count":
                    data = data[:-1]
                data.reverse()  # servers may answer out of order; "index" says where each goes
                payload = json.dumps({"object": "list", "data": data, "model": body["model"]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(payload.encode())

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


def make(server: Server, **kwargs: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {"model": "test-embed", "base_url": server.url, "backoff": 0.01}
    options.update(kwargs)
    return OpenAIEmbedder(**options)


def test_embeds_in_batches_in_order(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_EMBED_KEY", "sk-test")
    embedder = make(server, batch_size=3, api_key_env="TEST_EMBED_KEY")
    texts = [f"text number {i}" for i in range(7)]
    vectors = embed_checked(embedder, texts)
    assert vectors.shape == (7, 16)
    assert embedder.dim == 16 and embedder.model_id == "openai:test-embed"
    assert [len(r["body"]["input"]) for r in server.requests] == [3, 3, 1]
    assert all(
        r["auth"] == "Bearer sk-test" and r["path"] == "/v1/embeddings" for r in server.requests
    )
    expected = np.array(
        [[b / 255 for b in hashlib.sha256(t.encode()).digest()[:16]] for t in texts]
    )
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(vectors, expected, atol=1e-6)


def test_no_key_sends_no_authorization(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    embed_checked(make(server), ["local servers need no key"])
    assert server.requests[0]["auth"] is None


def test_retries_with_backoff(server: Server) -> None:
    server.script = ["503", "429", "ok"]
    vectors = embed_checked(make(server, retries=3), ["retry me"])
    assert vectors.shape == (1, 16)
    assert len(server.requests) == 3


def test_gives_up_after_retries(server: Server) -> None:
    server.script = ["503"] * 5
    with pytest.raises(EmbeddingError, match=r"HTTP 503.*after 3 attempts"):
        embed_checked(make(server, retries=2), ["never"])


def test_client_errors_are_not_retried(server: Server) -> None:
    server.script = ["401"]
    with pytest.raises(EmbeddingError, match="HTTP 401"):
        embed_checked(make(server), ["unauthorized"])
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("count", "returned 1 vectors for 2 texts"),
        ("nan", "NaN"),
        ("dims", "different dimensions"),
        ("garbage", "did not answer with JSON"),
    ],
)
def test_bad_answers(server: Server, action: str, message: str) -> None:
    server.script = [action]
    with pytest.raises(EmbeddingError, match=message):
        embed_checked(make(server, dim=16), ["one", "two"])


def test_unreachable_endpoint() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAIEmbedder(
        model="m", base_url=f"http://127.0.0.1:{port}/v1", retries=1, backoff=0.01, timeout=2
    )
    with pytest.raises(EmbeddingError, match="cannot reach"):
        embed_checked(embedder, ["anyone there?"])


def test_store_with_the_openai_embedder(server: Server, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MNEMEX_EMBEDDER", "openai")
    monkeypatch.setenv("MNEMEX_OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("MNEMEX_EMBED_MODEL", "test-embed")
    with mnemex.open(tmp_path / "openai.db") as store:
        ident = store.add("embedded over HTTP")
        assert store.stats().vectors == 1
        assert store.stats().embedder == "openai:test-embed"
        result = store.search("embedded over HTTP", mode="vector")
        assert result.mode_used == "vector" and result.hits[0].id == ident
        server.script = ["503"] * 10
        down = store.search("embedded over HTTP")
        assert down.mode_used == "lexical"
        assert "could not be embedded" in down.notes[0]
        assert [h.id for h in down.hits] == [ident]
