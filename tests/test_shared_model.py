"""One local model per process, whatever number of stores it opens and closes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
for i in range(40):
    store = mnemex.open(f"{folder}/s{i % 10}.db", embedder="local")
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
        env=python_env() | {"MNEMEX_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["ten"] <= 1.3 * found["one"], found  # each store held its own copy: 5x
    assert found["cycled"] <= 1.3 * found["one"], found  # and kept it once closed
