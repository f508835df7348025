"""Shared helpers of the benchmarks: realistic texts, the machine, RESULTS.md sections.

The benchmark data (BEIR SciFact, LoCoMo) is not shipped: point ``--data`` (or
``MNEMEX_BENCH_DATA``) at a folder holding ``beir/scifact`` and
``locomo/locomo10-dev.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HISTORY = "\n# History\n"  # what RESULTS.md holds after its current numbers
DEFAULT_DATA = Path(os.environ.get("MNEMEX_BENCH_DATA", ROOT.parent / "shared" / "data"))

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")


def data_dir(path: str | None) -> Path:
    folder = Path(path) if path else DEFAULT_DATA
    if not (folder / "beir" / "scifact" / "corpus.jsonl.gz").exists():
        sys.exit(
            f"benchmark data not found under {folder}: pass --data DIR (a folder with "
            "beir/scifact/ and locomo/locomo10-dev.json) or set MNEMEX_BENCH_DATA"
        )
    return folder


def scifact_docs(folder: Path) -> list[dict[str, str]]:
    """SciFact's abstracts: the ``_id``, ``title`` and ``text`` of each."""
    with gzip.open(folder / "beir" / "scifact" / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def scifact_claims(folder: Path) -> dict[str, str]:
    """SciFact's claims (its queries) by id, in the file's order."""
    with open(folder / "beir" / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        return {claim["_id"]: claim["text"] for claim in map(json.loads, f)}


def scifact_sentences(folder: Path) -> list[str]:
    out: list[str] = []
    for doc in scifact_docs(folder):
        out.extend(s.strip() for s in _SENTENCE.split(doc["text"]) if len(s.strip()) > 30)
    return out


def locomo_turns(folder: Path) -> list[str]:
    samples = json.loads((folder / "locomo" / "locomo10-dev.json").read_text(encoding="utf-8"))
    out = []
    for sample in samples:
        conv = sample["conversation"]
        n = 1
        while f"session_{n}" in conv:
            out.extend(f"{t['speaker']}: {t['text']}" for t in conv[f"session_{n}"])
            n += 1
    return out


def memories(folder: Path, count: int) -> list[str]:
    """``count`` distinct, realistic memory texts: single sentences and dialogue turns,
    then windows of two and three consecutive sentences, then (for a million) a
    sentence followed by a dialogue turn."""
    sentences = scifact_sentences(folder)
    turns = locomo_turns(folder)
    pool = dict.fromkeys(turns + sentences)
    for width in (2, 3):
        for start in range(len(sentences) - width + 1):
            if len(pool) >= count:
                break
            pool.setdefault(" ".join(sentences[start : start + width]))
    step = 0
    while len(pool) < count and step < len(turns):
        for i, sentence in enumerate(sentences):
            if len(pool) >= count:
                break
            pool.setdefault(f"{sentence} {turns[(i * 7919 + step) % len(turns)]}")
        step += 1
    texts = list(pool)[:count]
    if len(texts) < count:
        sys.exit(f"only {len(texts)} distinct texts available, {count} asked")
    return texts


def queries(folder: Path, min_words: int = 5, max_words: int = 10) -> list[str]:
    """Natural-language queries of 5-10 words: SciFact claims and LoCoMo questions."""
    out = list(scifact_claims(folder).values())
    samples = json.loads((folder / "locomo" / "locomo10-dev.json").read_text(encoding="utf-8"))
    out.extend(qa["question"] for s in samples for qa in s["qa"])
    return [q for q in dict.fromkeys(out) if min_words <= len(q.split()) <= max_words]


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "mean": statistics.fmean(ordered),
    }


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    commit = ""
    with contextlib.suppress(OSError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        f"commit {commit or '?'}; {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}"
    )


def heading(title: str, note: str = "") -> list[str]:
    """The first lines of a section: ``title``, then the machine it ran on and ``note``."""
    return [title, "", f"Machine: {machine()}{note}", ""]


def write_section(name: str, body: str, target: Path = RESULTS) -> None:
    """Replace the section ``name`` of RESULTS.md (or of ``target``) in place; a new one goes
    after the current numbers, before the file's ``# History``, or at its end."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = (
        target.read_text(encoding="utf-8")
        if target.exists()
        else (
            f"# {target.stem.capitalize()}\n\nEach section is written by the script it names, "
            "with the machine it ran on; baselines are measured in the same run (the machines "
            "are shared and noisy).\n"
        )
    )
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + block + after
    elif HISTORY in text:
        current, history = text.split(HISTORY, 1)
        text = current.rstrip() + "\n\n" + block + "\n" + HISTORY + history
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    target.write_text(text, encoding="utf-8")


def publish(name: str, body: str, no_write: bool, target: Path = RESULTS) -> None:
    """Print ``body`` and, unless ``no_write``, make it the section ``name`` of ``target``."""
    print(body)
    if not no_write:
        write_section(name, body, target)
        print(f"wrote {target.relative_to(ROOT)}", file=sys.stderr)


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A script's arguments: the first paragraph of its ``doc``, ``--data`` and ``--no-write``."""
    out = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    out.add_argument("--data", help="benchmark data folder (see common.py)")
    out.add_argument("--no-write", action="store_true", help="print, do not update the results")
    return out


def run_checked(command: list[str], what: str, **options: Any) -> subprocess.CompletedProcess[Any]:
    """``command`` run to its end with its output captured; if it fails, the script stops
    saying ``what`` failed, with the command's error output."""
    done = subprocess.run(command, capture_output=True, **options)
    if done.returncode != 0:
        error = done.stderr if isinstance(done.stderr, str) else done.stderr.decode()
        sys.exit(f"{what} failed: {error}")
    return done


def child_env(src: Path = SRC, **variables: str) -> dict[str, str]:
    """This process's environment without its ``MNEMEX_*`` settings, running the mnemex of
    ``src``, with ``variables`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMEX_")}
    return {**env, "PYTHONPATH": str(src), **variables}


def checkout(ref: str, folder: Path) -> Path:
    """The ``src`` folder of commit ``ref``, extracted into ``folder``."""
    folder.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def short_ref(ref: str) -> str:
    """``ref`` as the section names it: its short commit, and the name given when another."""
    short = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True
    ).stdout.strip()
    return f"`{short}`" + (f" (`{ref}`)" if ref != short else "")


@contextlib.contextmanager
def pg_server(folder: Path) -> Iterator[Any]:
    """A throwaway local PostgreSQL 16 + pgvector (``pgserver``), stopped on the way out."""
    from mnemex.engine.postgres import start_server

    server = start_server(folder, delete=True)
    try:
        yield server
    finally:
        server.stop()


def fresh_database(url: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``url``, created empty."""
    from mnemex.engine.postgres import connect

    with connect(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")


CACHE = ROOT / "benchmarks" / ".cache"


def real_embeddings(texts: list[str], name: str) -> tuple[object, float]:
    """The local model's vectors for ``texts``, cached under benchmarks/.cache.

    Returns the float32 matrix and the model's throughput (texts/s) measured
    when it was computed.
    """
    import numpy as np

    from mnemex.embed import embed_checked
    from mnemex.embed.local import LocalEmbedder

    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"{name}-{len(texts)}-{digest}.npy"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        return np.load(path), json.loads(meta.read_text())["texts_per_s"]
    CACHE.mkdir(parents=True, exist_ok=True)
    embedder = LocalEmbedder()
    embedder.load()
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    started = time.perf_counter()
    step = 2048
    for start in range(0, len(texts), step):
        out[start : start + step] = embed_checked(embedder, texts[start : start + step])
        done = min(start + step, len(texts))
        rate = done / (time.perf_counter() - started)
        print(f"  embedded {done:,}/{len(texts):,} ({rate:.0f}/s)", file=sys.stderr, flush=True)
    rate = len(texts) / (time.perf_counter() - started)
    np.save(path, out)
    meta.write_text(json.dumps({"texts_per_s": rate, "count": len(texts)}))
    return out, rate


@contextlib.contextmanager
def figure(out: Path, size: tuple[float, float]) -> Iterator[Any]:
    """The axes of a new matplotlib figure of ``size`` inches (drawn without a display),
    saved to ``out`` at 120 dpi when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    yield ax
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def timed(fn, items) -> list[float]:  # type: ignore[no-untyped-def]
    """Milliseconds of ``fn(item)`` for each item."""
    samples = []
    for item in items:
        started = time.perf_counter()
        fn(item)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


class Precomputed:
    """The local model's id and dimension, answering from a table of query vectors:
    a search then costs what it costs without embedding its query. A text not in the
    table (a query whose misspelling the search corrected) is embedded by the local
    model and added to the table: run the queries once before timing them."""

    def __init__(self, model_id: str, table: dict[str, object]) -> None:
        self.model_id = model_id
        self.dim = 384
        self.table = table
        self.model: Any = None  # the local model, loaded for the first text missing

    def embed(self, texts: list[str]) -> object:
        import numpy as np

        missing = [t for t in texts if t not in self.table]
        if missing:
            from mnemex.embed import embed_checked
            from mnemex.embed.local import LocalEmbedder

            self.model = self.model or LocalEmbedder()
            self.table.update(zip(missing, embed_checked(self.model, missing), strict=True))
        return np.vstack([self.table[t] for t in texts])


def noisy_copies(base, total: int, seed: int = 7):  # type: ignore[no-untyped-def]
    """``total`` vectors: ``base``, then copies of it with Gaussian noise (sigma 0.02 per
    dimension), renormalized: realistic for latency and memory, not for quality."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = np.empty((total, base.shape[1]), dtype=np.float32)
    for start in range(0, total, len(base)):
        chunk = base[: min(len(base), total - start)]
        if start == 0:
            out[: len(chunk)] = chunk
            continue
        noisy = chunk + rng.normal(0, 0.02, chunk.shape).astype(np.float32)
        out[start : start + len(chunk)] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    return out


def scale_corpus(folder: Path, size: int) -> tuple[list[str], object, list[str]]:
    """``size`` memory texts and their vectors, and the 100k texts embedded: the local
    model's real vectors of the first 100,000 (cached), repeated with noise beyond."""
    base_texts = memories(folder, min(100_000, size))
    base_vectors, _ = real_embeddings(base_texts, "bench")
    texts = base_texts if size <= len(base_texts) else memories(folder, size)
    vectors = base_vectors if size <= len(base_vectors) else noisy_copies(base_vectors, size)
    return texts, vectors, base_texts


def query_vectors(qs: list[str]) -> tuple[str, dict[str, object], dict[str, float]]:
    """The local model's id, each query's vector, and its query-embedding latency (ms)."""
    from mnemex.embed import embed_checked
    from mnemex.embed.local import LocalEmbedder

    model = LocalEmbedder()
    model.load()
    embed_checked(model, ["warm up"])
    embed_ms = percentiles(timed(lambda q: embed_checked(model, [q]), qs))
    table = {q: embed_checked(model, [q])[0] for q in qs}
    return model.model_id, table, embed_ms


BUILD_BATCH = 20_000


def add_texts(store, texts: list[str], **fields: Any) -> None:  # type: ignore[no-untyped-def]
    """``texts`` as memories tagged ``bench`` (or with ``fields``), through add_many in
    batches, not embedded."""
    fields = {"tags": ["bench"], **fields}
    for start in range(0, len(texts), BUILD_BATCH):
        store.add_many(
            [{"content": t, **fields} for t in texts[start : start + BUILD_BATCH]], embed=False
        )


def store_vectors(store, vectors, model_id: str, record: bool = False, position=None) -> None:  # type: ignore[no-untyped-def]
    """``vectors`` written as the store writes them: the k-th memory (by ``seq``) gets
    ``vectors[k]``, or ``vectors[position(id)]``; with ``record``, the store's record of
    the local model as its embedder (as ``mnemex embed`` leaves it)."""
    from mnemex.storage.blobs import stored

    conn = store.session.conn
    rows = conn.execute("SELECT seq, id, content_hash FROM memories ORDER BY seq").fetchall()
    for start in range(0, len(rows), BUILD_BATCH):
        batch = rows[start : start + BUILD_BATCH]
        picked = [
            position(ident) if position else k for k, (_, ident, _) in enumerate(batch, start)
        ]
        blobs = stored(vectors[picked])
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO embeddings (seq, model, dim, content_hash, vector) VALUES (?, ?, 384, ?, ?)",
            [(seq, model_id, digest, blobs[i].data) for i, (seq, _, digest) in enumerate(batch)],
        )
        conn.execute("COMMIT")
    if record:
        from mnemex.embed import describe
        from mnemex.embed.local import LocalEmbedder

        described = json.dumps(describe(LocalEmbedder()), sort_keys=True)
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?)", (described,)
        )


def build_sqlite(
    path: Path,
    texts: list[str],
    vectors,
    model_id: str,
    record: bool = False,
    namespace: str | None = None,
    **fields: Any,
) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """A SQLite store of ``texts`` through add_many (FTS5 included), then their vectors
    written as the store writes them; seconds of each step (``rows_s``, ``vectors_s``)."""
    import mnemex

    started = time.perf_counter()
    with mnemex.open(path, embedder=None, namespace=namespace) as store:
        add_texts(store, texts, **fields)
        rows_s = time.perf_counter() - started
        started = time.perf_counter()
        store_vectors(store, vectors, model_id, record)
    return {"rows_s": rows_s, "vectors_s": time.perf_counter() - started}
