"""Search latency of one namespace among five, against the same memories in one namespace.

    python benchmarks/bench_namespaces.py [--data DIR] [--size 100000]

Three stores of the same benchmark memories (see ``bench_lexical.py``):
``single``, all ``--size`` memories in one namespace (the fast path: FTS5's
own statistics); ``shared``, the same memories written in turn to five
namespaces (a search of one namespace ranks by that namespace's own
statistics, see ``mnemex.index.fts.Scope``); ``alone``, one of those
namespaces in a store of its own, which ``shared`` must match hit for hit and
score for score (checked on every query). Lexical and hybrid search (limit
10, snippets, default settings). Hybrid uses a deterministic bag-of-words
embedder (384 dimensions) so that 100,000 memories embed in seconds: the
vector arm's cost depends on the number of rows, not on what the vectors mean.
Each query is timed warm (the connection's cache of the namespace's postings
filled by earlier queries, as in a long-running server) and cold (the cache
emptied first, as in a one-shot CLI call).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import data_dir, machine, memories, percentiles, queries, write_section

NAMESPACES = 5
LIMIT = 10
BATCH = 10_000


class HashEmbedder:
    """Bag of words hashed into 384 dimensions, unit length: fast and deterministic."""

    model_id = "bench:hash-bow-384"
    dim = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                out[row, int.from_bytes(digest[:2], "little") % self.dim] += 1.0
                out[row, int.from_bytes(digest[2:], "little") % self.dim] += 0.5
            if not out[row].any():
                out[row, 0] = 1.0
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def build(path: Path, texts: list[str], namespaces: list[str]) -> None:
    store = mnemex.open(path, embedder=HashEmbedder())
    for start in range(0, len(texts), BATCH):
        chunk = range(start, min(start + BATCH, len(texts)))
        for ns in sorted(set(namespaces)):
            items = [{"content": texts[i], "id": f"m{i}"} for i in chunk if namespaces[i] == ns]
            if items:
                store.add_many(items, namespace=ns, embed=False)
    store.embed()
    store.close()


def timed(store: mnemex.Store, qs: list[str], mode: str, cold: bool) -> tuple[list[float], list]:  # type: ignore[type-arg]
    samples, results = [], []
    for q in qs:
        if cold:
            store.session.lexicon.invalidate(counts=True)
        started = time.perf_counter()
        hits = store.search(q, LIMIT, mode=mode, namespace="ns0").hits
        samples.append((time.perf_counter() - started) * 1000)
        results.append([(h.id, h.score) for h in hits])
    return samples, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder with beir/scifact and locomo (see common.py)")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    folder = data_dir(args.data)
    texts = memories(folder, args.size)
    qs = queries(folder)[: args.queries]
    turns = [f"ns{i % NAMESPACES}" for i in range(len(texts))]
    rows: dict[str, dict[str, dict[str, float]]] = {}
    mismatches = 0
    with tempfile.TemporaryDirectory(prefix="mnemex-bench-ns-") as tmp:
        paths = {
            "single": (Path(tmp) / "single.db", texts, ["ns0"] * len(texts)),
            "shared": (Path(tmp) / "shared.db", texts, turns),
            "alone": (
                Path(tmp) / "alone.db",
                [t for t, ns in zip(texts, turns, strict=True) if ns == "ns0"],
                ["ns0"] * turns.count("ns0"),
            ),
        }
        for name, (path, items, namespaces) in paths.items():
            started = time.perf_counter()
            if name == "alone":  # the same ids as in the shared store
                store = mnemex.open(path, embedder=HashEmbedder())
                store.add_many(
                    [
                        {"content": t, "id": f"m{i}"}
                        for i, t in enumerate(texts)
                        if turns[i] == "ns0"
                    ],
                    namespace="ns0",
                    embed=False,
                )
                store.embed()
                store.close()
            else:
                build(path, items, namespaces)
            print(
                f"built {name} ({len(items):,} memories) in {time.perf_counter() - started:.0f} s"
            )
        results: dict[tuple[str, str, bool], list] = {}  # type: ignore[type-arg]
        for name, (path, _, _) in paths.items():
            store = mnemex.open(path, embedder=HashEmbedder())
            for mode in ("lexical", "hybrid"):
                timed(store, qs[:30], mode, False)  # warm the page cache and the model
                for cold in (True, False):
                    ms, found = timed(store, qs, mode, cold)
                    results[(name, mode, cold)] = found
                    rows.setdefault(name, {})[f"{mode} {'cold' if cold else 'warm'}"] = percentiles(
                        ms
                    )
                    print(
                        f"{name:>6} {mode:>7} {'cold' if cold else 'warm'}: "
                        f"p50 {percentiles(ms)['p50']:.2f} ms, p95 {percentiles(ms)['p95']:.2f} ms",
                        flush=True,
                    )
            store.close()
        for mode in ("lexical", "hybrid"):
            for cold in (True, False):
                a, b = results[("shared", mode, cold)], results[("alone", mode, cold)]
                mismatches += sum(x != y for x, y in zip(a, b, strict=True))
    print(f"queries whose hits or scores differ between shared and alone: {mismatches}")
    per_ns = args.size // NAMESPACES
    lines = [
        "## One namespace among five (`benchmarks/bench_namespaces.py`)",
        "",
        f"Machine: {machine()}",
        "",
        f"{args.size:,} memories (as in `bench_lexical.py`); *single*: all in one namespace; "
        f"*shared*: written in turn to {NAMESPACES} namespaces, one searched ({per_ns:,} "
        f"memories); *alone*: that namespace in a store of its own. {len(qs)} queries, limit "
        "10, snippets, default settings; hybrid with a bag-of-words hash embedder "
        "(384 dimensions). *cold*: the connection's postings cache emptied before each query; "
        "*warm*: kept from earlier queries.",
        "",
        "| store | lexical cold p50 / p95 | lexical warm p50 / p95 | hybrid cold p50 / p95 | hybrid warm p50 / p95 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in ("single", "shared", "alone"):
        cells = [
            f"{rows[name][key]['p50']:.2f} / {rows[name][key]['p95']:.2f} ms"
            for key in ("lexical cold", "lexical warm", "hybrid cold", "hybrid warm")
        ]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    lines += [
        "",
        f"Queries whose hits or scores differ between *shared* and *alone*: {mismatches} "
        f"of {4 * len(qs)} (lexical and hybrid, cold and warm).",
    ]
    if not args.no_write:
        write_section("bench_namespaces", "\n".join(lines))
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
