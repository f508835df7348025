"""One local model per process, whatever number of stores it opens and closes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import mnemex
from mnemex.embed.local import LocalEmbedder
from tests.conftest import python_env

pytestmark = [pytest.mark.model, pytest.mark.slow]

SCRIPT = """
import gc, json, resource, sys, tempfile
import mnemex

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

folder = tempfile.mkdtemp()
stores = []
for i in range(10):
    store = mnemex.open(f"{folder}/s{i}.db", embedder="local")
    store.add_many([f"memory {j} of store {i}: deploys and invoices" for j in range(20)])
    assert store.search("deploy invoices").hits
    stores.append(store)
    if i == 0:
        one = rss()
ten = rss()
for store in stores:
    store.close()
for i in range(40):  # the embedder the store records (none is configured)
    store = mnemex.open(f"{folder}/s{i % 10}.db")
    store.search("deploy")
    store.close()
gc.collect()
print(json.dumps({"one": one, "ten": ten, "cycled": rss()}))
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
def test_stores_of_one_process_share_the_local_model(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={k: v for k, v in python_env().items() if k != "MNEMEX_EMBEDDER"}
        | {"MNEMEX_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["ten"] <= 1.3 * found["one"], found  # each store held its own copy: 5x
    assert found["cycled"] <= 1.3 * found["one"], found  # and kept it once closed


def test_stores_indexed_with_the_local_model_share_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened with no embedder configured builds one from its record, an
    embedder per store: they all run the process's one session of the model."""
    for name in ("a.db", "b.db"):
        with mnemex.open(tmp_path / name, embedder="local") as store:
            store.add("the deploy runs on Fridays")
    monkeypatch.delenv("MNEMEX_EMBEDDER")  # the default: the store's own embedder
    with mnemex.open(tmp_path / "a.db") as a, mnemex.open(tmp_path / "b.db") as b:
        for store in (a, b):
            assert store.search("when do we deploy", mode="hybrid").mode_used == "hybrid"
        assert isinstance(a.embedder, LocalEmbedder) and isinstance(b.embedder, LocalEmbedder)
        assert a.embedder is not b.embedder  # each built from its store's record
        assert a.embedder.session is not None and a.embedder.session is b.embedder.session
