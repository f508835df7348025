"""Markdown workspace: first sync, incremental re-sync, freshness check, save-to-searchable.

    python benchmarks/bench_workspace.py [--files 2000] [--megabytes 20] [--model-files N]

The workspace is generated (not taken from the benchmark data): ``MEMORY.md``,
daily notes ``memory/YYYY-MM-DD.md`` and project notes
``memory/projects/*.md``, 2,000 files and 20 MB of markdown by default, with
headings, paragraphs, lists and fenced code in Zipf-distributed made-up
words, every mtime a day in the past. What it measures (medians of repeats):

- the first sync of the whole workspace, lexical only (no embedder);
- the first sync with the local model (int8 ONNX all-MiniLM-L6-v2), on the
  whole workspace or on its first ``--model-files`` files (then extrapolated
  to the whole by chunk count, and said so);
- a re-sync after touching one file (new mtime, same bytes), after editing
  one (a paragraph appended), and with nothing changed: lexical only, and
  the edit with the model;
- what the freshness check costs a search: search with ``sync_on_search``
  on and off on an unchanged workspace;
- save to searchable: a file saved while ``mnemex watch`` runs in another
  process, until a search (that does not sync by itself) finds it; and the
  same without a watcher, through the search's own freshness check.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import SRC, machine, parser, publish
from mnemex.ingest.workspace import freshen
from mnemex.results import SyncReport
from mnemex.store import Store

SEED = 2025
VOCABULARY = 20_000
REPEATS = 30
WATCH_SAVES = 10
DAY_NS = 86_400 * 1_000_000_000
LOAD = os.getloadavg()[0]


# -- the workspace -------------------------------------------------------------------


def vocabulary(rng: random.Random, size: int) -> list[str]:
    onsets = ["", "b", "br", "c", "ch", "d", "f", "g", "gr", "k", "l", "m", "n", "p", "pl", "r",
              "s", "st", "t", "tr", "v", "w", "z"]  # fmt: skip
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "nd", "st", "x"]
    words: dict[str, None] = {}
    while len(words) < size:
        syllables = rng.choice((1, 2, 2, 3, 3, 4))
        words.setdefault(
            "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                    for _ in range(syllables))
        )  # fmt: skip
    return list(words)


class Writer:
    """Markdown text of a given size from Zipf-distributed words."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng, VOCABULARY)
        self.weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(VOCABULARY)))

    def sentence(self) -> str:
        words = self.rng.choices(self.words, cum_weights=self.weights, k=self.rng.randint(6, 22))
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 7)))

    def block(self) -> str:
        kind = self.rng.random()
        if kind < 0.15:
            return "\n".join(f"- {self.sentence()}" for _ in range(self.rng.randint(3, 8)))
        if kind < 0.22:
            lines = [
                f"{self.rng.choice(self.words)} = {self.rng.choice(self.words)}({i})"
                for i in range(self.rng.randint(4, 20))
            ]
            return "```python\n" + "\n".join(lines) + "\n```"
        return self.paragraph()

    def document(self, title: str, size: int) -> str:
        parts = [f"# {title}"]
        length = len(parts[0])
        while length < size:
            heading = f"## {' '.join(self.rng.choices(self.words, k=3)).capitalize()}"
            parts.append(heading)
            length += len(heading)
            for _ in range(self.rng.randint(1, 4)):
                block = self.block()
                parts.append(block)
                length += len(block) + 2
        return "\n\n".join(parts) + "\n"


def generate(root: Path, files: int, total_bytes: int, seed: int = SEED) -> dict[str, int]:
    """The workspace: MEMORY.md, 10 % project notes, the rest daily notes; sizes vary ±50 %."""
    writer = Writer(seed)
    mean = total_bytes // files
    paths = ["MEMORY.md"]
    paths += [
        f"memory/projects/{writer.rng.choice(writer.words)}-{i}.md" for i in range(files // 10)
    ]
    first = date(2020, 1, 1)
    paths += [
        f"memory/{(first + timedelta(days=i)).isoformat()}.md" for i in range(files - len(paths))
    ]
    written = 0
    stamp = time.time_ns() - DAY_NS
    for path in paths:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        size = int(mean * writer.rng.uniform(0.5, 1.5))
        text = writer.document(Path(path).stem, size)
        target.write_text(text, encoding="utf-8")
        os.utime(target, ns=(stamp, stamp))
        written += len(text.encode("utf-8"))
    return {"files": len(paths), "bytes": written}


# -- measurements --------------------------------------------------------------------


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def first_sync(root: Path, db: Path, embedder: str) -> dict[str, Any]:
    store = mnemex.open(db, embedder=embedder)
    if embedder != "none":
        store.embedder.load()  # type: ignore[union-attr]  # the cold start is not the sync's
    phases: dict[str, float] = {}

    def progress(phase: str, done: int, total: int) -> None:
        phases.setdefault(phase, time.perf_counter())

    started = time.perf_counter()
    report = store.sync(root, progress=progress)
    seconds = time.perf_counter() - started
    embedding = seconds - (phases["embedding"] - started) if "embedding" in phases else 0.0
    store.close()
    return {"seconds": seconds, "embedding_seconds": embedding, "report": report}


def touch(path: Path) -> None:
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def timed_syncs(
    store: Store, root: Path, change: Callable[[], object], repeats: int = REPEATS
) -> tuple[float, list[SyncReport]]:
    """Median milliseconds of ``store.sync(root)`` right after each ``change()``; the reports."""
    samples, reports = [], []
    for _ in range(repeats):
        change()
        started = time.perf_counter()
        reports.append(store.sync(root))
        samples.append(time.perf_counter() - started)
    return median_ms(samples), reports


def append_paragraph(rng: random.Random, paths: list[Path], writer: Writer) -> None:
    with open(rng.choice(paths), "a", encoding="utf-8") as handle:
        handle.write("\n" + writer.paragraph() + "\n")


def resyncs(store: Store, root: Path, paths: list[Path], writer: Writer) -> dict[str, float]:
    """Median ms of a re-sync after touching one file, editing one, changing none."""
    rng = random.Random(SEED + 1)
    touch_ms, reports = timed_syncs(store, root, lambda: touch(rng.choice(paths)))
    assert all(r.touched == 0 and r.chunks_added == 0 for r in reports), reports
    edit_ms, reports = timed_syncs(store, root, lambda: append_paragraph(rng, paths, writer))
    assert all(r.changed >= 1 for r in reports), reports
    time.sleep(2.1)  # out of the racy window: nothing is read again
    store.sync(root)
    idle_ms, _ = timed_syncs(store, root, lambda: None)
    return {"touch": touch_ms, "edit": edit_ms, "idle": idle_ms}


def freshness_cost(db: Path, root: Path) -> dict[str, float]:
    """Median search latency with the freshness check (nothing changed) and without (the
    same store with no workspace registered), interleaved query by query; the check alone."""
    on = mnemex.open(db, embedder=None)
    # The baseline: the same chunks in a store that has no workspace registered (with
    # sync_on_search off a search still checks, to flag stale results).
    bare = db.with_name("bare.db")
    conn = sqlite3.connect(db)
    conn.execute("VACUUM INTO ?", (str(bare),))
    conn.close()
    conn = sqlite3.connect(bare)
    conn.execute("DELETE FROM workspaces")
    conn.commit()
    conn.close()
    off = mnemex.open(bare, embedder=None)
    rng = random.Random(SEED + 5)
    words = Writer(SEED).words[100:5000]  # neither the commonest words nor the rarest
    queries = [" ".join(rng.sample(words, rng.randint(2, 5))) for _ in range(200)]
    for q in queries[:20]:
        on.search(q, 10)
        off.search(q, 10)
    samples: dict[str, list[float]] = {"on": [], "off": [], "check": []}
    for n, q in enumerate(queries):
        for name, store in (("on", on), ("off", off)) if n % 2 else (("off", off), ("on", on)):
            started = time.perf_counter()
            result = store.search(q, 10)
            samples[name].append(time.perf_counter() - started)
            assert not result.stale
        started = time.perf_counter()
        freshen(on.session, "default")
        samples["check"].append(time.perf_counter() - started)
    on.close()
    off.close()
    return {name: median_ms(values) for name, values in samples.items()}


def save_to_searchable(db: Path, root: Path, watch: bool) -> list[float]:
    """Seconds from saving a new note to a search finding it, per save."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "MNEMEX_EMBEDDER": "none"}
    watcher = None
    if watch:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "mnemex", "--db", str(db), "-n", "default", "watch", str(root)],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert watcher.stderr is not None
        for line in watcher.stderr:
            if "watching" in line:
                break
    store = mnemex.open(db, embedder=None, sync_on_search=not watch)
    samples = []
    try:
        for n in range(WATCH_SAVES):
            token = f"savedtoken{n}x{int(watch)}"
            time.sleep(0.5)
            path = root / f"memory/projects/saved-{int(watch)}-{n}.md"
            saved = time.perf_counter()
            path.write_text(f"# Saved\n\nThe note with {token} in it.\n", encoding="utf-8")
            while not store.search(token, 1, mode="lexical").hits:
                if time.perf_counter() - saved > 60:
                    raise RuntimeError("the saved note never became searchable")
                time.sleep(0.01)
            samples.append(time.perf_counter() - saved)
    finally:
        store.close()
        if watcher is not None:
            watcher.terminate()
            watcher.wait(timeout=30)
    return samples


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--files", type=int, default=2000)
    arguments.add_argument("--megabytes", type=float, default=20.0)
    arguments.add_argument(
        "--model-files",
        type=int,
        default=0,
        help="sync only this many files with the local model and extrapolate (0: all)",
    )
    arguments.add_argument("--no-model", action="store_true", help="skip the local model")
    args = arguments.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemex-bench-ws-") as tmp:
        folder, db = Path(tmp), Path(tmp) / "lexical.db"
        root = folder / "workspace"
        started = time.perf_counter()
        made = generate(root, args.files, int(args.megabytes * 1_000_000))
        took = time.perf_counter() - started
        print(f"generated {made['files']:,} files, {made['bytes'] / 1e6:.1f} MB in {took:.1f} s")
        lexical = first_sync(root, db, "none")
        with mnemex.open(db, embedder=None) as store:
            again = resyncs(store, root, sorted(root.rglob("*.md")), Writer(SEED + 2))
        fresh = freshness_cost(db, root)
        watched = save_to_searchable(db, root, watch=True)
        direct = save_to_searchable(db, root, watch=False)
        model = None
        if not args.no_model:
            model = run_model(folder, root, args.model_files, lexical["report"].chunks)
        lines = section(made, lexical, again, fresh, watched, direct, model, args)
    publish("bench_workspace", "\n".join(lines), args.no_write)


def run_model(folder: Path, root: Path, files: int, total_chunks: int) -> dict[str, Any]:
    target = root
    if files:
        target = folder / "model-part"
        everything = sorted(p.relative_to(root) for p in root.rglob("*.md"))
        for relative in everything[:files]:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).write_bytes((root / relative).read_bytes())
            stamp = time.time_ns() - DAY_NS
            os.utime(target / relative, ns=(stamp, stamp))
    result = first_sync(target, folder / "model.db", "local")
    report = result["report"]
    per_chunk = result["seconds"] / max(report.chunks, 1)
    result["extrapolated"] = per_chunk * total_chunks if files else result["seconds"]
    print(
        f"first sync with the local model: {result['seconds']:.1f} s for {report.files:,} files, "
        f"{report.chunks:,} chunks ({report.chunks / result['embedding_seconds']:.1f} chunks/s "
        f"embedded)"
        + (f"; whole workspace extrapolated: {result['extrapolated']:.0f} s" if files else ""),
        flush=True,
    )
    store = mnemex.open(folder / "model.db", embedder="local")
    paths = sorted(target.rglob("*.md"))
    rng = random.Random(SEED + 3)
    writer = Writer(SEED + 4)
    edit_ms, reports = timed_syncs(store, target, lambda: append_paragraph(rng, paths, writer), 10)
    assert all(r.embedded >= 1 for r in reports), reports
    store.close()
    result["edit_ms"] = edit_ms
    print(f"re-sync after editing one file, with the model: p50 {result['edit_ms']:.0f} ms")
    return result


def section(
    made: dict[str, int],
    lexical: dict[str, Any],
    again: dict[str, float],
    fresh: dict[str, float],
    watched: list[float],
    direct: list[float],
    model: dict[str, Any] | None,
    args: argparse.Namespace,
) -> list[str]:
    report = lexical["report"]
    mb = made["bytes"] / 1e6
    command = "python benchmarks/bench_workspace.py" + (
        f" --model-files {args.model_files}" if args.model_files else ""
    )
    lines = [
        "## Markdown workspace sync (`benchmarks/bench_workspace.py`)",
        "",
        f"Machine: {machine()}; load average {LOAD:.1f} when the run started (the cores are "
        f"shared). Command: `{command}`.",
        "",
        f"Workspace: generated, {made['files']:,} files and {mb:.1f} MB of markdown (MEMORY.md, "
        "10 % project notes, daily notes; headings, paragraphs, lists, fenced code; Zipf-"
        f"distributed made-up words), cut into {report.chunks:,} chunks of at most 400 tokens "
        f"with 80 of overlap. Re-syncs: median of {REPEATS} repeats.",
        "",
        "| measure | result |",
        "| --- | ---: |",
        f"| first sync, lexical only | {lexical['seconds']:.2f} s ({mb / lexical['seconds']:.1f} MB/s, "
        f"{report.files / lexical['seconds']:,.0f} files/s) |",
    ]
    if model is not None:
        part = model["report"]
        rate = part.chunks / model["embedding_seconds"]
        if args.model_files:
            lines.append(
                f"| first sync with the local model | **extrapolated** {model['extrapolated'] / 60:.1f} min "
                f"(measured {model['seconds']:.0f} s on the first {part.files:,} files, "
                f"{part.chunks:,} chunks, scaled by chunk count; {rate:.1f} chunks/s embedded) |"
            )
        else:
            lines.append(
                f"| first sync with the local model | {model['seconds'] / 60:.1f} min "
                f"({part.chunks:,} chunks, {rate:.1f} chunks/s embedded; embedding "
                f"{model['embedding_seconds'] / model['seconds']:.0%} of the time) |"
            )
    lines += [
        f"| re-sync after touching one file (new mtime, same bytes), lexical only, p50 | {again['touch']:.1f} ms (target ≤ 50 ms) |",
        f"| re-sync after editing one file (a paragraph appended), lexical only, p50 | {again['edit']:.1f} ms |",
    ]
    if model is not None:
        lines.append(
            f"| re-sync after editing one file, with the local model, p50 of 10 | {model['edit_ms']:.0f} ms |"
        )
    lines += [
        f"| re-sync with nothing changed, p50 | {again['idle']:.1f} ms |",
        f"| freshness check before a search ({report.files:,} files, nothing changed), p50 | "
        f"{fresh['check']:.2f} ms |",
        f"| lexical search, limit 10, unchanged workspace: with the check / the same store "
        f"without a workspace, p50 (interleaved) | {fresh['on']:.2f} / {fresh['off']:.2f} ms |",
        f"| save → searchable under `mnemex watch` (debounce 1.5 s), p50 of {len(watched)} (min–max) | "
        f"{statistics.median(watched):.2f} s ({min(watched):.2f}–{max(watched):.2f} s) |",
        f"| save → searchable without a watcher (the search syncs first), p50 of {len(direct)} | "
        f"{statistics.median(direct) * 1000:.0f} ms |",
        "",
        "The freshness check stats every file a glob reaches before each search of a namespace "
        "with a workspace and compares sizes and mtimes with the index (the file rows are "
        "cached until the store changes). Under "
        "`watch`, a save becomes searchable after the 1.5 s debounce plus one incremental sync; "
        "a search finds it sooner by syncing first (the lower row).",
    ]
    if model is not None and args.model_files:
        part = model["report"]
        lines += [
            "",
            f"**The first sync with the local model was not run on the whole workspace**: the "
            f"model embeds a 400-token chunk at its 256-token truncation, "
            f"{part.chunks / model['embedding_seconds']:.1f} chunks/s on these cores, so the "
            f"{report.chunks:,} chunks would take about {model['extrapolated'] / 60:.0f} minutes. "
            f"It was measured on the first {part.files:,} files ({part.files / made['files']:.0%}) "
            "and scaled by chunk count; embedding is nearly all of it (the lexical sync of the "
            f"whole workspace takes {lexical['seconds']:.1f} s). `mnemex sync --no-embed` indexes "
            "the text at once and `mnemex embed` adds the vectors later; searches meanwhile use "
            "the lexical arm for the chunks without one.",
        ]
    return lines


if __name__ == "__main__":
    main()
