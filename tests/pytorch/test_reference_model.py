"""What needs PyTorch: the reference all-MiniLM-L6-v2 and the sentence-transformers provider.

Marked ``torch`` and left out of ``make test`` (its environment has no PyTorch);
``make test-torch`` runs them in ``.venv-torch``, and CI runs both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mnemex
from mnemex.embed import embed_checked
from mnemex.embed.local import LocalEmbedder
from mnemex.embed.sentence_transformers import SentenceTransformerEmbedder
from tests.reference import minilm

pytestmark = [pytest.mark.torch, pytest.mark.model]


@pytest.fixture(scope="module")
def reference() -> Any:
    return minilm.reference_model()


def test_the_stored_vectors_are_the_reference_models(reference: Any) -> None:
    texts, stored = minilm.load()
    assert texts == minilm.texts_to_store(), "texts changed: python -m tests.reference.minilm"
    fresh = embed_checked(reference, texts)
    assert np.allclose(fresh, stored, atol=1e-5), np.abs(fresh - stored).max()


def test_the_local_model_agrees_with_the_reference_on_every_text(reference: Any) -> None:
    texts = minilm.texts_for_agreement()
    assert len(texts) >= 280
    ours = embed_checked(LocalEmbedder(), texts)
    theirs = embed_checked(reference, texts)
    cosines = (ours * theirs).sum(axis=1)
    assert reference.dim == 384 and reference.model_id.startswith("st:model:")
    assert cosines.mean() >= 0.999, cosines.mean()
    assert cosines.min() >= 0.99, cosines.min()


def test_a_store_on_a_sentence_transformers_model(
    tmp_path: Path, reference: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = reference.model
    with mnemex.open(
        tmp_path / "st.db", embedder="sentence-transformers", embed_model=folder
    ) as store:
        store.add_many(
            [
                "We moved sign-in to OIDC with Okta last spring",
                "Invoice PDFs render slowly because of embedded fonts",
                "Redis evicts sessions under memory pressure",
            ]
        )
        stats = store.stats()
        assert stats.pending_vectors == 0
        result = store.search("how do users log in?", mode="vector", limit=1)
        assert result.mode_used == "vector"
        assert "OIDC" in store.get([result.hits[0].id]).memories[0].content
        hybrid = store.search("why are invoices slow to render?", limit=1)
        assert hybrid.mode_used == "hybrid"
        assert "PDF" in store.get([hybrid.hits[0].id]).memories[0].content
    monkeypatch.delenv("MNEMEX_EMBEDDER")  # auto: the embedder the store records
    with mnemex.open(tmp_path / "st.db") as again:
        assert again.search("how do users log in?", limit=1).mode_used == "hybrid"


def test_the_model_folder_names_the_model(reference: Any) -> None:
    same = SentenceTransformerEmbedder(reference.model)
    assert same.model_id == reference.model_id
    assert same.describe() == {
        "provider": "sentence-transformers",
        "model": str(Path(reference.model).resolve()),
    }
