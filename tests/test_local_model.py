"""The real local model (int8 ONNX all-MiniLM-L6-v2), checked against the reference model's
vectors stored in tests/reference (no PyTorch: tests/pytorch runs the model itself).

Marked ``model``: these load real models and take a few seconds; CI runs them.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mnemex
from mnemex import EmbeddingError, MissingExtra
from mnemex.embed import embed_checked, local_available
from mnemex.embed.local import LocalEmbedder
from tests.reference import minilm

pytestmark = pytest.mark.model

SAMPLE = Path(str(importlib.resources.files("mnemex") / "data" / "sample_memories.jsonl"))


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    if not local_available():
        pytest.fail("the embed extra is not installed: pip install -e '.[embed]'")
    return LocalEmbedder()


def test_agrees_with_the_reference_vectors(local: LocalEmbedder) -> None:
    """The vectors the PyTorch model gives the stored texts (tests/reference/minilm.py wrote
    them; tests/pytorch checks them against the model itself)."""
    texts, theirs = minilm.load()
    assert len(texts) >= 60 and len(set(texts)) == len(texts)
    ours = embed_checked(local, texts)
    cosines = (ours * theirs).sum(axis=1)
    assert local.dim == theirs.shape[1] == 384
    assert np.allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-5)
    assert cosines.mean() >= 0.999, cosines.mean()
    assert cosines.min() >= 0.99, cosines.min()


def test_vectors_are_unit_length_and_deterministic(local: LocalEmbedder) -> None:
    texts = ["same text", "another text", "same text"]
    a = embed_checked(local, texts)
    b = embed_checked(local, list(reversed(texts)))
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.allclose(a[0], a[2], atol=1e-6)
    assert np.allclose(a, b[::-1], atol=1e-5)  # batching and order do not change vectors


def test_semantic_search_on_the_sample(tmp_path: Path, local: LocalEmbedder) -> None:
    with mnemex.open(tmp_path / "sample.db", embedder=local) as store:
        from mnemex.transfer import import_jsonl

        report = import_jsonl(store, SAMPLE.read_bytes().splitlines(), strict=True)
        assert (report.imported, report.relations) == (80, 8)
        assert store.stats().pending_vectors == 0
        # No word of the query is in the memories that answer it.
        result = store.search("how do users sign in now?", mode="vector", limit=5)
        assert result.mode_used == "vector"
        assert any("OIDC" in store.get(h.id).memories[0].content for h in result.hits)
        hybrid = store.search("why were invoice PDFs slow?", explain=True)
        assert hybrid.mode_used == "hybrid"
        assert hybrid.hits[0].explain and hybrid.hits[0].explain["vector"] is not None


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingExtra, match=r"pip install 'mnemex\[embed\]'"):
        LocalEmbedder().load()


def test_wrong_model_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    monkeypatch.setenv("MNEMEX_LOCAL_MODEL", str(fake))
    with pytest.raises(EmbeddingError, match="SHA-256 differs"):
        LocalEmbedder().load()
    monkeypatch.setenv("MNEMEX_LOCAL_MODEL", os.fspath(tmp_path / "absent.onnx"))
    with pytest.raises(EmbeddingError, match="does not exist"):
        LocalEmbedder().load()


def test_model_checksum_is_cached_by_size_mtime_and_inode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from mnemex.embed import local

    model = tmp_path / "model.onnx"
    model.write_bytes(b"model bytes")
    monkeypatch.setattr(local, "MODEL_SHA256", hashlib.sha256(b"model bytes").hexdigest())
    cache = tmp_path / "home" / "model.sha256.json"
    assert local.checked(model, cache) and cache.exists()
    stat = model.stat()
    with open(model, "r+b") as stream:  # same size, same mtime, same inode: not hashed again
        stream.write(b"MODEL")
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert local.checked(model, cache)
    assert not local.checked(model)  # without the cache it is hashed: the bytes differ
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert not local.checked(model, cache)  # touched: hashed again, and refused
    cache.write_text("not json")
    model.write_bytes(b"model bytes")
    assert local.checked(model, cache)  # a broken cache is rewritten
    assert json.loads(cache.read_text())[1] == len(b"model bytes")


def hook_queries() -> list[str]:
    """Prompts as a hook embeds them: ASCII and not, short and long."""
    return [t for t in minilm.texts_for_agreement() if len(t) > 3][::3]


def test_folded_model_gives_the_vectors_of_the_model_run_unoptimized(tmp_path: Path) -> None:
    """A hook process loads the folded model; its vectors are those of the int8 file run
    without optimizations, bit for bit, and within 1e-6 cosine of the optimized session."""
    texts = hook_queries()
    unoptimized = LocalEmbedder(optimize=False)  # no saved_cache: the file itself
    optimized = LocalEmbedder()
    before = np.concatenate([embed_checked(unoptimized, [t]) for t in texts])
    reference = embed_checked(optimized, texts)
    cache = tmp_path / "models"
    first = LocalEmbedder(optimize=False, saved_cache=cache)  # folds and saves
    folded = np.concatenate([embed_checked(first, [t]) for t in texts])
    (folder,) = cache.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == [
        "model.onnx",
        "model.onnx.data",
        "stamp.json",
    ]
    inode = (folder / "model.onnx.data").stat().st_ino
    second = LocalEmbedder(optimize=False, saved_cache=cache)  # loads what was saved
    loaded = np.concatenate([embed_checked(second, [t]) for t in texts])
    assert (folder / "model.onnx.data").stat().st_ino == inode  # not folded again
    assert np.array_equal(folded, before)
    assert np.array_equal(loaded, before)
    assert ((loaded * reference).sum(axis=1) >= 1 - 1e-6).all()


def test_saved_optimized_model_gives_the_vectors_of_the_optimized_session(
    tmp_path: Path,
) -> None:
    """A process that embeds many texts loads the optimized model saved in the data folder
    (once, beside the folded one, neither removing the other); its vectors are those of
    the session optimized as it loads, bit for bit, for short texts and for windows."""
    texts = [*hook_queries(), "长" * 300 + "文本。" * 40, " ".join(["retry policy"] * 200)]
    reference = embed_checked(LocalEmbedder(), texts)
    cache = tmp_path / "models"
    embed_checked(LocalEmbedder(optimize=False, saved_cache=cache), texts[:1])  # folded
    first = embed_checked(LocalEmbedder(saved_cache=cache), texts)  # optimizes and saves
    (folded, optimized) = sorted(cache.iterdir())
    assert optimized.name == f"{folded.name}-optimized"
    assert sorted(p.name for p in optimized.iterdir()) == [
        "model.onnx",
        "model.onnx.data",
        "stamp.json",
    ]
    inode = (optimized / "model.onnx.data").stat().st_ino
    from mnemex.embed import local

    local._SHARED.clear()  # a new process: the session is read from the folder
    again = embed_checked(LocalEmbedder(saved_cache=cache), texts)
    assert (optimized / "model.onnx.data").stat().st_ino == inode  # not saved again
    assert np.array_equal(first, reference) and np.array_equal(again, reference)
    embed_checked(LocalEmbedder(optimize=False, saved_cache=cache), texts[:1])
    assert sorted(cache.iterdir()) == [folded, optimized]
    (optimized / "model.onnx").write_bytes(b"not a model")  # damaged: saved again
    local._SHARED.clear()
    assert np.array_equal(embed_checked(LocalEmbedder(saved_cache=cache), texts), reference)
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would go")
    local._SHARED.clear()
    unwritable = LocalEmbedder(saved_cache=blocked / "models")
    assert np.array_equal(embed_checked(unwritable, texts), reference)  # optimized in memory


def test_damaged_or_unwritable_folded_model(tmp_path: Path) -> None:
    text = ["where do we keep the retry policy?"]
    expected = embed_checked(LocalEmbedder(optimize=False), text)
    cache = tmp_path / "models"
    embed_checked(LocalEmbedder(optimize=False, saved_cache=cache), text)
    (folder,) = cache.iterdir()
    weights = folder / "model.onnx.data"
    size = weights.stat().st_size
    with open(weights, "r+b") as stream:  # cut short: the stamp no longer matches
        stream.truncate(size // 2)
    again = embed_checked(LocalEmbedder(optimize=False, saved_cache=cache), text)
    assert np.array_equal(again, expected) and weights.stat().st_size == size  # folded again
    (folder / "model.onnx").write_bytes(b"not a model")  # damaged, and the stamp lies about it
    stamp = json.loads((folder / "stamp.json").read_text())
    stamp["sizes"]["model.onnx"] = len(b"not a model")
    (folder / "stamp.json").write_text(json.dumps(stamp))
    again = embed_checked(LocalEmbedder(optimize=False, saved_cache=cache), text)
    assert np.array_equal(again, expected)
    assert (folder / "model.onnx").stat().st_size > len(b"not a model")  # folded again
    stale = cache / f".{folder.name}.1.tmp"  # abandoned by a process stopped while folding
    stale.mkdir()
    os.utime(stale, (0, 0))
    recent = cache / f".{folder.name}.2.tmp"  # another process folding right now
    recent.mkdir()
    embed_checked(LocalEmbedder(optimize=False, saved_cache=cache), text)  # loads the folder
    assert not stale.exists() and recent.exists()
    recent.rmdir()
    stale.mkdir()
    os.utime(stale, (0, 0))
    other = cache / "all-MiniLM-L6-v2-int8-8199be6f-ort0.0.1"  # another ONNX Runtime's
    other.mkdir()
    import shutil

    shutil.rmtree(folder)
    embed_checked(LocalEmbedder(optimize=False, saved_cache=cache), text)
    assert [p.name for p in cache.iterdir()] == [folder.name]
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would go")
    unwritable = LocalEmbedder(optimize=False, saved_cache=blocked / "models")
    assert np.array_equal(embed_checked(unwritable, text), expected)  # runs the file as before


def test_a_command_from_a_shell_folds_the_model_for_the_next(tmp_path: Path) -> None:
    """`mnemex search` loads the model unfolded when the data folder has no folded copy, and
    leaves the folding to a background process as it exits: the next command finds it."""
    import subprocess
    import time

    from mnemex.embed import fold
    from mnemex.embed.local import FOLDED_STAMP
    from tests.conftest import python_env

    home = tmp_path / "home"
    env = {**python_env(), "MNEMEX_HOME": str(home), "MNEMEX_EMBEDDER": "local"}
    db = str(tmp_path / "m.db")
    for args in (["add", "Deploys go through Fly.io"], ["search", "where do we deploy?"]):
        done = subprocess.run(
            [sys.executable, "-m", "mnemex", "--db", db, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    models = home / "models"
    deadline = time.monotonic() + 120
    while not list(models.glob(f"*/{FOLDED_STAMP}")) and time.monotonic() < deadline:
        time.sleep(0.2)
    [stamp] = list(models.glob(f"*/{FOLDED_STAMP}"))
    assert not stamp.parent.name.endswith("-optimized")
    unfolded = LocalEmbedder(optimize=False)
    unfolded.load()
    assert not fold.needed(unfolded, models)  # the next command loads the folded copy
    folded = LocalEmbedder(optimize=False, saved_cache=models)
    assert np.array_equal(folded.embed(["fly.io"]), unfolded.embed(["fly.io"]))


def test_a_fold_in_progress_or_done_is_not_started_again(tmp_path: Path) -> None:
    from mnemex.embed import fold
    from mnemex.embed.local import FOLDED_STALE_SECONDS, MODEL_NAME

    embedder = LocalEmbedder(optimize=False)
    models = tmp_path / "models"
    assert not fold.needed(embedder, models)  # the model was not loaded: nothing to save
    embedder.load()
    assert fold.needed(embedder, models)  # no folder yet
    models.mkdir()
    (models / f"{MODEL_NAME}-x-ort1-optimized").mkdir()  # the server's copy, not a folded one
    assert fold.needed(embedder, models)
    writing = models / f".{MODEL_NAME}-x.123.tmp"
    writing.mkdir()
    assert not fold.needed(embedder, models)
    old = time.time() - FOLDED_STALE_SECONDS - 1
    os.utime(writing, (old, old))  # abandoned
    assert fold.needed(embedder, models)
    (models / f"{MODEL_NAME}-x-ort1").mkdir()
    assert not fold.needed(embedder, models)
    assert not fold.needed(LocalEmbedder(optimize=False, saved_cache=models), models)


def test_no_fold_is_started_where_the_data_folder_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data folder this user cannot write (root writes anywhere, so access is refused here
    by the check itself): the process would only fail, after every command."""
    from mnemex.embed import fold

    embedder = LocalEmbedder(optimize=False)
    embedder.load()
    models = tmp_path / "home" / "models"
    assert fold.needed(embedder, models)
    monkeypatch.setattr(fold.os, "access", lambda path, mode: False)
    assert not fold.needed(embedder, models)
    models.mkdir(parents=True)
    assert not fold.needed(embedder, models)
