"""Write the vectors of the relevance floor's unrelated queries for each calibrated model.

    python scripts/background_vectors.py

``mnemex/data/background.txt`` holds the queries; each model the floor is calibrated for
(``mnemex.search.floor.CALIBRATED``) gets ``mnemex/data/background-<model>.npy``, its
vectors of those queries in order (float32, L2-normalized). Only the local model ships:
run this again after changing the queries (tests/search/test_background.py checks the
file against the model).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mnemex.embed.local import LocalEmbedder
from mnemex.search import background


def main() -> None:
    found = LocalEmbedder().embed(background.queries()).astype(np.float32)
    found /= np.linalg.norm(found, axis=1, keepdims=True)
    path = background.vectors_path("all-minilm-l6-v2")
    np.save(path, found, allow_pickle=False)
    print(f"wrote {path} ({found.shape[0]} queries, {found.shape[1]} dimensions)")


if __name__ == "__main__":
    main()
