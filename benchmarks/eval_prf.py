"""Pseudo-relevance feedback on the lexical arm (RM3), measured offline.

    python benchmarks/eval_sentences.py dump --data ../shared/data   # stores + features, once
    python benchmarks/eval_prf.py table [--quick] [--sentences DIR]  # every candidate; writes RESULTS.md

Reuses the stores and per-query features ``eval_sentences.py dump`` leaves in
benchmarks/.cache/sentences (SciFact, CISI and each LoCoMo-dev conversation
in a store of its own; the stores are copied to benchmarks/.cache/prf on first
use, so this script never writes to them). For each query the lexical arm is
run again with its query expanded RM3-style from feedback memories: the top
k of the lexical arm itself, or of the fused (shipped adaptive) ranking. Each
feedback memory weighs its score over the k scores' sum; a term's feedback
weight is the sum over feedback memories of that weight x the term's share of
the memory's tokens (stop words, one-letter and numeric tokens left out); the
n terms with the highest feedback weight x IDF are kept, their weights
normalized to sum to 1. The expanded query gives each term

    w = alpha * count in the query + (1 - alpha) * |query| * feedback weight

(|query|: the query's terms counted with repeats; alpha = 1 is the query as
shipped) and a memory scores sum(w x the term's BM25 part), FTS5's ``bm25()``
arithmetic on the term's rows (``Lexicon.postings``, as a scoped plan scores
them), and the score normalization is sum(w x IDF). That is what the product
could compute at query time: k memories tokenized by FTS5's tokenizer, their
terms' document frequencies (cached) and the postings of at most n + 16
terms. The vector arm is the shipped one; rows the expanded arm finds get
their cosines from the store's vectors, and both arms are fused with the
shipped adaptive rule. No relevance floor and no thread stage (as
``eval_fusion.py``). Query embeddings come from the evaluation's embedding
cache (``MNEMEX_HOME``).
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import shutil
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import eval_fusion as ef
import mnemex
from common import CACHE, machine, write_section
from mnemex.eval.metrics import per_query, ranked_run
from mnemex.index import fts
from mnemex.index.fts import BM25_B, BM25_K1, Postings, Scope, plan
from mnemex.index.query import Term, idf, quote
from mnemex.index.stopwords import STOPWORDS
from mnemex.text import clean_query

FEATURES = CACHE / "sentences"
WORK = CACHE / "prf"
POOL = 200
SOURCES = ("lexical", "fused")
DEPTHS = (3, 5, 10)
TERMS = (5, 10, 20)
ALPHAS = (0.5, 0.7, 0.85)
Config = tuple[str, int, int, float]  # (feedback source, k memories, n terms, alpha)


@dataclass
class Context:
    """One store: its connection, lexicon, vectors and whole-store statistics."""

    store: mnemex.Store
    scope: Scope
    docs: dict[int, tuple[Counter[str], int, dict[str, str]]] = field(default_factory=dict)

    @property
    def lexicon(self) -> fts.Lexicon:
        return self.store.session.lexicon

    def doc(self, seq: int) -> tuple[Counter[str], int, dict[str, str]]:
        """A memory's content terms (stem -> frequency), its length in tokens, and a
        surface form of each stem."""
        if seq not in self.docs:
            conn = self.store.session.conn
            content = conn.execute("SELECT content FROM memories WHERE seq = ?", (seq,)).fetchone()
            tokens = self.lexicon.tokenize(content[0])
            kept = [
                t
                for t in tokens
                if len(t.stem) > 1
                and not t.stem.isdigit()
                and t.surface not in STOPWORDS
                and t.stem not in STOPWORDS
            ]
            surfaces = {t.stem: t.surface for t in kept}
            self.docs[seq] = (Counter(t.stem for t in kept), max(1, len(tokens)), surfaces)
        return self.docs[seq]


def open_context(name: str) -> Context:
    path = WORK / f"{name}.db"
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        for source in FEATURES.glob(f"{name}.db*"):
            if not source.name.endswith("-writers"):
                shutil.copy(source, WORK / source.name)
    store = mnemex.open(path, embedder=ef.embedder(), dedup=False)
    conn = store.session.conn
    namespace, lo, hi = conn.execute(
        "SELECT namespace, min(seq), max(seq) FROM memories GROUP BY namespace"
    ).fetchone()
    rows, tokens = fts._totals(conn)
    return Context(store, Scope(namespace, rows, tokens, 0, lo, hi))


def expansion(ctx: Context, feedback: list[tuple[int, float]], n: int) -> list[tuple[Term, float]]:
    """The ``n`` expansion terms of the feedback memories (seq, score) and their weights."""
    total = sum(max(s, 0.0) for _, s in feedback) or 1.0
    weight: dict[str, float] = defaultdict(float)
    surface: dict[str, str] = {}
    for seq, score in feedback:
        counts, length, surfaces = ctx.doc(seq)
        for stem, tf in counts.items():
            weight[stem] += max(score, 0.0) / total * tf / length
        surface.update(surfaces)
    stems = list(weight)
    terms = [Term(s, quote(surface[s]), False, False) for s in stems]
    dfs = ctx.lexicon.doc_freqs(terms)
    ranked = sorted(
        (i for i, df in enumerate(dfs) if df),
        key=lambda i: (-weight[stems[i]] * idf(dfs[i], ctx.scope.docs), stems[i]),
    )[:n]
    mass = sum(weight[stems[i]] for i in ranked) or 1.0
    return [(terms[i], weight[stems[i]] / mass) for i in ranked]


@dataclass
class Parts:
    """Each term's BM25 part in each row holding any of the terms (terms x rows); a term
    no row holds still counts in the score normalization, as the shipped arm's does."""

    keys: list[str]
    idfs: np.ndarray
    seqs: np.ndarray
    matrix: np.ndarray


def parts(ctx: Context, terms: list[Term]) -> Parts:
    postings: list[Postings] = ctx.lexicon.postings(terms, ctx.scope)
    seqs, first = np.unique(
        np.concatenate([p.seqs for p in postings] or [np.zeros(0, np.int64)]), return_index=True
    )
    lengths = np.concatenate([p.lengths for p in postings] or [np.zeros(0)])[first]
    k = BM25_K1 * (1 - BM25_B + BM25_B * lengths / ctx.scope.avgdl)
    matrix = np.zeros((len(terms), len(seqs)))
    idfs = np.array([idf(len(p), ctx.scope.docs) for p in postings])
    for row, p in enumerate(postings):
        f = fts._freqs_in(p, seqs)
        matrix[row] = idfs[row] * f * (BM25_K1 + 1.0) / (f + k)
    return Parts([t.key for t in terms], idfs, seqs, matrix)


def weights(
    original: list[Term], added: list[tuple[Term, float]], alpha: float
) -> dict[str, float]:
    """Each term's weight in the expanded query (by key)."""
    size = sum(t.count for t in original)
    out: dict[str, float] = defaultdict(float)
    for t in original:
        out[t.key] += alpha * t.count
    for t, w in added:
        out[t.key] += (1 - alpha) * size * w
    return out


def requery(ctx: Context, q: ef.Query, p: Parts, w: dict[str, float], qv: np.ndarray) -> ef.Query:
    """The query's features with the lexical arm scored by the weights ``w``."""
    vector = np.array([w[k] for k in p.keys])
    scores = vector @ p.matrix
    order = np.lexsort((p.seqs, -scores))
    order = order[scores[order] > 0][:POOL]
    lex = [(int(p.seqs[i]), float(scores[i])) for i in order]
    bm = dict(lex)
    vec_seqs = np.array([s for s, _ in q["vec"] if s not in bm], dtype=np.int64)
    at = np.minimum(np.searchsorted(p.seqs, vec_seqs), max(len(p.seqs) - 1, 0))
    for s, i in zip(vec_seqs.tolist(), at.tolist(), strict=True):
        if len(p.seqs) and p.seqs[i] == s and scores[i] > 0:
            bm[s] = float(scores[i])
    cos = dict(q["cos"])
    missing = [s for s in bm if s not in cos]
    if missing:
        cos.update(ctx.store.session.vectors(ef.embedder().dim).cosines_of(missing, qv))
    norm = float(vector @ p.idfs)
    return {**q, "lex": lex, "bm": bm, "cos": cos, "norm": norm}


def top10(q: ef.Query, scores: dict[int, float]) -> list[str]:
    return [q["ids"][s] for s in sorted(scores, key=lambda s: (-scores[s], s))[:10]]


def candidates(ctx: Context, q: ef.Query, text: str, qv: np.ndarray, grid: list[Config]) -> Any:
    """(config, lexical top 10, hybrid top 10) for the query under every config of the grid,
    and first the query as shipped, recomputed here (config ("none", 0, 0, 1.0))."""
    lexical = plan(ctx.lexicon, text, STOPWORDS, expand=True)
    original = list(lexical.terms)
    base = parts(ctx, original)
    shipped = requery(ctx, q, base, weights(original, [], 1.0), qv)
    yield ("none", 0, 0, 1.0), top10(q, dict(shipped["lex"])), top10(q, ef.adaptive(shipped))
    fused = ef.adaptive(q)
    feedback = {
        "lexical": list(q["lex"][:10]),
        "fused": sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:10],
    }
    by_terms = itertools.groupby(grid, key=lambda c: c[:3])
    for (source, k, n), configs in by_terms:
        added = expansion(ctx, feedback[source][:k], n)
        terms = list({t.key: t for t in [*original, *(t for t, _ in added)]}.values())
        p = parts(ctx, terms)
        for config in configs:
            expanded = requery(ctx, q, p, weights(original, added, config[3]), qv)
            yield config, top10(q, dict(expanded["lex"])), top10(q, ef.adaptive(expanded))


def run_set(ctx: Context, asked: dict[str, Any], grid: list[Config]) -> dict[Config, Any]:
    """Each config's lexical and hybrid runs of the set's queries."""
    qids = list(asked["q"])
    texts = [clean_query(asked["texts"][q]) for q in qids]
    qvs = ef.embedder().embed(texts)
    qvs /= np.linalg.norm(qvs, axis=1, keepdims=True)
    runs: dict[Config, Any] = defaultdict(lambda: ({}, {}))
    for qid, text, qv in zip(qids, texts, qvs, strict=True):
        for config, lex, hyb in candidates(ctx, asked["q"][qid], text, qv, grid):
            runs[config][0][qid] = ranked_run(lex)
            runs[config][1][qid] = ranked_run(hyb)
    return runs


def measure(qrels: Any, run: Any, name: str, cats: Any = None) -> tuple[float, list[float]]:
    values = per_query(qrels, run, [name])
    per_cat: dict[int, list[float]] = defaultdict(list)
    for qid, v in values.items():
        if cats:
            per_cat[cats[qid]].append(v[name])
    overall = float(np.mean([v[name] for v in values.values()]))
    return overall, [float(np.mean(per_cat[c])) for c in sorted(per_cat)]


def the_grid(quick: bool) -> list[Config]:
    if quick:
        return [("lexical", 5, 10, 0.7), ("fused", 5, 10, 0.7)]
    return list(itertools.product(SOURCES, DEPTHS, TERMS, ALPHAS))


SETS = ("scifact-train", "scifact-test", "cisi-test", "locomo")
TUNING = ("scifact-train", "cisi-test", "locomo")


def all_runs(data: dict[str, Any], grid: list[Config]) -> dict[str, dict[Config, Any]]:
    """Every set's runs under every config (the LoCoMo conversations as one set)."""
    out: dict[str, dict[Config, Any]] = {}
    for name, sets in (("scifact", ("scifact-train", "scifact-test")), ("cisi", ("cisi-test",))):
        ctx = open_context(name)
        for key in sets:
            out[key] = run_set(ctx, data[key], grid)
            print(f"{key}: {len(data[key]['q'])} queries", flush=True)
        ctx.store.close()
    merged: dict[Config, Any] = defaultdict(lambda: ({}, {}))
    for conv in sorted(k for k in data if k.startswith("locomo-")):
        ctx = open_context(conv)
        for config, (lex, hyb) in run_set(ctx, data[conv], grid).items():
            merged[config][0].update(lex)
            merged[config][1].update(hyb)
        ctx.store.close()
    out["locomo"] = merged
    print(f"locomo: {len(merged[('none', 0, 0, 1.0)][0])} questions", flush=True)
    return out


def scores(data: dict[str, Any], runs: dict[str, dict[Config, Any]]) -> dict[Config, Any]:
    """config -> (lexical, hybrid), each {set: (value, per category)}."""
    locomo: dict[str, dict[str, Any]] = {"q": {}, "qrels": {}, "cat": {}}
    for conv in (k for k in data if k.startswith("locomo-")):
        for key in ("q", "qrels", "cat"):
            locomo[key].update(data[conv][key])
    sets = {**{k: data[k] for k in SETS[:3]}, "locomo": locomo}
    out: dict[Config, Any] = {}
    for config in runs["locomo"]:
        arms = []
        for arm in (0, 1):
            arms.append(
                {
                    key: measure(
                        sets[key]["qrels"],
                        runs[key][config][arm],
                        "R@10" if key == "locomo" else "nDCG@10",
                        sets[key].get("cat"),
                    )
                    for key in SETS
                }
            )
        out[config] = tuple(arms)
    return out


def verdict(hybrid: dict[str, Any], base: dict[str, Any]) -> tuple[bool, float]:
    """(meets the rule: better on two tuning sets and no more than 0.005 worse on any,
    mean change over the tuning sets)."""
    deltas = [hybrid[k][0] - base[k][0] for k in TUNING]
    ok = sum(d > 0 for d in deltas) >= 2 and min(deltas) >= -0.005
    return ok, float(np.mean(deltas))


def label(config: Config) -> str:
    source, k, n, alpha = config
    if source == "none":
        return "no feedback (shipped, recomputed)"
    return f"{source} top {k} | {n} terms | α {alpha}"


def timing(
    name: str, asked: dict[str, Any], config: Config, cold: bool, limit: int = 100
) -> list[float]:
    """Milliseconds to expand and score each of ``limit`` queries: the feedback memories
    read and tokenized, the terms' statistics and postings read, the expanded arm scored
    (the first arm's own candidates given). ``cold``: the lexicon's caches of document
    frequencies and postings emptied before each query (else kept from query to query,
    as a running process keeps them)."""
    ctx = open_context(name)
    source, k, n, alpha = config
    out = []
    for qid in list(asked["q"])[:limit]:
        q = asked["q"][qid]
        ctx.docs.clear()
        if cold:
            ctx.lexicon.invalidate(counts=True)
        feedback = (
            q["lex"][:k]
            if source == "lexical"
            else sorted(ef.adaptive(q).items(), key=lambda kv: -kv[1])[:k]
        )
        start = time.perf_counter()
        lexical = plan(ctx.lexicon, clean_query(asked["texts"][qid]), STOPWORDS, expand=True)
        original = list(lexical.terms)
        added = expansion(ctx, feedback, n)
        p = parts(ctx, list({t.key: t for t in [*original, *(t for t, _ in added)]}.values()))
        w = weights(original, added, alpha)
        ranked = np.argsort(-(np.array([w[key] for key in p.keys]) @ p.matrix))[:POOL]
        out.append(1000 * (time.perf_counter() - start))
        assert len(ranked) or not len(p.seqs)
    ctx.store.close()
    return out


def row(config: Config, result: Any, base: Any) -> str:
    lex, hyb = result
    cells = [f"{lex[k][0]:.4f}" for k in SETS] + [f"{hyb[k][0]:.4f}" for k in SETS]
    cats = " / ".join(f"{v:.3f}" for v in hyb["locomo"][1])
    ok, mean = verdict(hyb, base[1])
    rule = "n/a" if config[0] == "none" else ("**yes**" if ok else "no")
    return f"| {label(config)} | {' | '.join(cells)} | {cats} | {mean:+.4f} | {rule} |"


def table(quick: bool) -> None:
    with open(FEATURES / "features.pkl", "rb") as handle:
        data = pickle.load(handle)
    grid = the_grid(quick)
    started = time.perf_counter()
    results = scores(data, all_runs(data, grid))
    minutes = (time.perf_counter() - started) / 60
    base = results[("none", 0, 0, 1.0)]
    head = " | ".join(["SciFact train", "SciFact test", "CISI", "LoCoMo R@10"])
    lines = [
        f"| feedback | lexical: {head} | hybrid: {head} | hybrid LoCoMo 1 / 2 / 3 / 4 "
        "| hybrid mean Δ, tuning sets | rule |",
        "| --- |" + " ---: |" * 9 + " --- | ---: | --- |",
    ]
    for config, result in results.items():
        lines.append(row(config, result, base))
        print(lines[-1], flush=True)
    eligible = [c for c in results if c[0] != "none" and verdict(results[c][1], base[1])[0]]
    pool = eligible or [c for c in results if c[0] != "none"]
    best = max(pool, key=lambda c: verdict(results[c][1], base[1])[1])
    ms = {
        (key, cold): timing(name, data[key], best, cold)
        for key, name in (("scifact-test", "scifact"), ("locomo-conv-26", "locomo-conv-26"))
        for cold in (True, False)
    }
    cost = "; ".join(
        f"{key} {'cold' if cold else 'warm'} median {statistics.median(v):.1f} ms, "
        f"max {max(v):.1f} ms"
        for (key, cold), v in ms.items()
    )
    summary = (
        f"Best on the tuning sets ({'meets the rule' if eligible else 'none meets the rule'}): "
        f"{label(best)}, SciFact test hybrid {results[best][1]['scifact-test'][0]:.4f} "
        f"(shipped {base[1]['scifact-test'][0]:.4f}). Expanding and scoring it (100 queries; "
        f"cold: the lexicon's caches emptied before each query): {cost}. "
        f"Grid run: {minutes:.1f} min."
    )
    print(summary)
    if not quick:
        write_section("eval_prf", section(lines, summary))


def section(lines: list[str], summary: str) -> str:
    return "\n".join(
        [
            "## Lexical pseudo-relevance feedback (`benchmarks/eval_prf.py`, issue 11)",
            "",
            f"Machine: {machine()}. `python benchmarks/eval_sentences.py dump --data "
            "../shared/data` (once), then `python benchmarks/eval_prf.py table`. No relevance "
            "floor and no thread stage (as `eval_fusion.py`); nDCG@10 on SciFact and CISI, "
            "evidence R@10 on LoCoMo-dev. The rule: better on at least two of SciFact train, "
            "CISI and LoCoMo-dev, and no more than 0.005 worse on any (hybrid).",
            "",
            *lines,
            "",
            summary,
        ]
    )


def main() -> None:
    global FEATURES
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("table",))
    parser.add_argument("--quick", action="store_true", help="two configs, no RESULTS.md")
    parser.add_argument("--sentences", help="eval_sentences.py's cache folder")
    args = parser.parse_args()
    if args.sentences:
        FEATURES = Path(args.sentences)
    table(args.quick)


if __name__ == "__main__":
    main()
