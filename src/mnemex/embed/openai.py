"""Any OpenAI-compatible ``/v1/embeddings`` endpoint: OpenAI, Ollama, LM Studio, vLLM, TEI.

Standard library HTTP only. Texts are sent in batches; each request has a
timeout and is retried with exponential backoff on connection errors, 429 and
5xx responses. The API key is read from an environment variable (none is
sent when it is unset, as local servers expect).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mnemex.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np

RETRIES = 3
BACKOFF = 0.5  # seconds, doubled after each failed attempt
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class OpenAIEmbedder:
    lazy_dim = True  # the dimension is learned from the first answer

    def __init__(
        self,
        *,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 64,
        timeout: float = 30.0,
        retries: int = RETRIES,
        backoff: float = BACKOFF,
        dim: int | None = None,
    ) -> None:
        self.model = model
        self.url = base_url.rstrip("/") + "/embeddings"
        self.api_key_env = api_key_env
        self.batch_size = batch_size
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._dim = dim

    @property
    def model_id(self) -> str:
        return f"openai:{self.model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._request(["dimension probe"])[0].shape[0])
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        rows: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            rows.extend(self._request(list(texts[start : start + self.batch_size])))
        matrix = np.vstack(rows).astype(np.float32) if rows else np.zeros((0, 0), np.float32)
        if self._dim is None and len(matrix):
            self._dim = int(matrix.shape[1])
        return matrix

    def _request(self, batch: list[str]) -> list[np.ndarray]:
        import numpy as np

        body = json.dumps({"model": self.model, "input": batch}).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        delay = self.backoff
        last = ""
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    payload = json.loads(response.read().decode("utf-8"))
                break
            except urllib.error.HTTPError as exc:
                detail = exc.read(500).decode("utf-8", errors="replace").strip()
                last = f"HTTP {exc.code} from {self.url}: {detail or exc.reason}"
                if exc.code not in _RETRY_STATUS:
                    raise EmbeddingError(last) from None
            except OSError as exc:  # URLError, timeouts, refused or reset connections
                reason = getattr(exc, "reason", exc)
                last = f"cannot reach {self.url}: {reason}"
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise EmbeddingError(f"{self.url} did not answer with JSON") from None
            if attempt < self.retries:
                time.sleep(delay)
                delay *= 2
        else:
            raise EmbeddingError(f"{last} (after {self.retries + 1} attempts)")
        return self._parse(payload, len(batch), np)

    def _parse(self, payload: Any, expected: int, np: Any) -> list[np.ndarray]:
        try:
            items = sorted(payload["data"], key=lambda d: d.get("index", 0))
            vectors = [np.asarray(item["embedding"], dtype=np.float32) for item in items]
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"{self.url} answered without embeddings ({exc})") from None
        if len(vectors) != expected:
            raise EmbeddingError(f"{self.url} returned {len(vectors)} vectors for {expected} texts")
        if len({v.shape for v in vectors}) > 1 or vectors[0].ndim != 1:
            raise EmbeddingError(f"{self.url} returned vectors of different dimensions")
        return vectors
