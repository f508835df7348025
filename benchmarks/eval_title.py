"""A memory's first line (a title or heading) as a field of its own.

    python benchmarks/eval_sentences.py dump --data DIR   # the stores and features read here
    python benchmarks/eval_title.py dump                   # first-line vectors
    python benchmarks/eval_title.py table                  # every candidate; writes RESULTS.md

``mnemex eval beir`` stores a BEIR document as its title, a newline, then its
text; a markdown note starts with its heading; a chat turn is one line. Here a
memory of more than one line gets its first line scored as a field of its own
(BM25F-style), on both arms:

* lexical: BM25 of the whole memory plus ``w`` x BM25 of the first line alone
  (the query's terms with the store's document frequencies, the first line's
  length against the average first line), divided by 1 + ``w`` so that the
  score's normalization (the query's IDFs) bounds it as it bounds the whole's
  (also measured undivided); or the first line counted twice in the indexed
  text (term frequencies and length of the whole plus the first line's, the
  average length grown to match);
* vector: the first line embedded alone (``dump``, cached under
  benchmarks/.cache/title), scored as the larger of it and the memory's
  cosine (its best window, what ships) or as 0.8 x cosine + 0.2 x first line.

``table`` reads the stores ``eval_sentences.py dump`` built (SciFact, CISI, each
LoCoMo-dev conversation on its own), scores every memory of the store for
each query with each candidate (the index's own tokens, read from an in-memory
FTS5 table with the store's tokenizer: no query shaping), takes each arm's top
200, and fuses with the shipped adaptive rule. No relevance floor and no
thread stage (as ``eval_fusion.py``).
"""

from __future__ import annotations

import argparse
import pickle
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import eval_fusion as ef
import mnemex
from common import CACHE, machine, write_section
from mnemex.embed.local import LocalEmbedder
from mnemex.eval.embed_cache import CachedEmbedder
from mnemex.eval.metrics import per_query, ranked_run
from mnemex.index.fts import BM25_B, BM25_K1, LexicalPlan, plan
from mnemex.index.query import idf
from mnemex.index.stopwords import STOPWORDS
from mnemex.storage.migrations import TOKENIZER
from mnemex.text import clean_query

SOURCE = CACHE / "sentences"  # eval_sentences.py dump: stores and features.pkl
WORK = CACHE / "title"
POOL = 200
SPAN = 1 << 20  # offsets per (row, column) in a position key


def first_line(content: str) -> str:
    """The memory's first line when more follows it, else ''."""
    head, _, rest = content.partition("\n")
    return head.strip() if rest.strip() else ""


def stores(data: dict[str, Any]) -> list[str]:
    convs = sorted(k for k in data if k.startswith("locomo-"))
    return ["scifact", "cisi", *convs]


def rows_of(name: str) -> list[tuple[int, str, str]]:
    """(seq, indexed text, first line) of every memory of a store, in seq order."""
    conn = sqlite3.connect(f"file:{SOURCE / name}.db?mode=ro", uri=True)
    sql = (
        "SELECT m.seq, s.content, m.content FROM memories AS m "
        "JOIN memories_fts_source AS s ON s.seq = m.seq ORDER BY m.seq"
    )
    out = [(seq, text, first_line(content)) for seq, text, content in conn.execute(sql)]
    conn.close()
    return out


def dump() -> None:
    """Embed every first line (memories of more than one line) with the local model."""
    WORK.mkdir(parents=True, exist_ok=True)
    emb = CachedEmbedder(LocalEmbedder(), WORK / "embed")
    names = ["scifact", "cisi", *sorted(p.stem for p in SOURCE.glob("locomo-*.db"))]
    for name in names:
        rows = [(seq, head) for seq, _, head in rows_of(name) if head]
        heads = [head for _, head in rows]
        vectors = np.vstack(
            [emb.embed(heads[i : i + 512]) for i in range(0, len(heads), 512)]
            or [np.zeros((0, emb.dim))]
        )
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        seqs = np.array([seq for seq, _ in rows], dtype=np.int64)
        np.savez(WORK / f"{name}.npz", seqs=seqs, vectors=vectors.astype(np.float32))
        print(f"{name}: {len(rows)} first lines of {len(rows_of(name))} memories", flush=True)


@dataclass
class Fields:
    """A store's memories as two fields, from an FTS5 table with the index's tokenizer."""

    seqs: np.ndarray  # int64, sorted
    length: np.ndarray  # tokens of the whole memory (column 0), of its first line (1)
    spans: dict[str, tuple[int, int]]  # term -> its slice of the instance arrays
    row: np.ndarray  # row index (into seqs) of each instance, by term
    col: np.ndarray
    offset: np.ndarray

    @classmethod
    def of(cls, rows: list[tuple[int, str, str]]) -> Fields:
        conn = sqlite3.connect(":memory:")
        conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(whole, head, tokenize='{TOKENIZER}')")
        conn.executemany("INSERT INTO f (rowid, whole, head) VALUES (?, ?, ?)", rows)
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)")
        found = conn.execute("SELECT term, doc, col, offset FROM v ORDER BY term").fetchall()
        conn.close()
        seqs = np.array([r[0] for r in rows], dtype=np.int64)
        terms = [t for t, _, _, _ in found]
        row = np.searchsorted(seqs, np.array([d for _, d, _, _ in found], dtype=np.int64))
        col = np.array([c == "head" for _, _, c, _ in found], dtype=np.int64)
        offset = np.array([o for _, _, _, o in found], dtype=np.int64)
        length = np.zeros((2, len(seqs)))
        np.add.at(length, (col, row), 1.0)
        spans: dict[str, tuple[int, int]] = {}
        for i, term in enumerate(terms):
            start, _ = spans.get(term, (i, i))
            spans[term] = (start, i + 1)
        return cls(seqs, length, spans, row, col, offset)

    def freqs(self, key: str) -> np.ndarray:
        """Each memory's frequency of a term or phrase in each field, shape (2, rows)."""
        words = key.split(" ")
        start, end = self.spans.get(words[0], (0, 0))
        keys = (self.row[start:end] * 2 + self.col[start:end]) * SPAN + self.offset[start:end]
        for k, word in enumerate(words[1:], 1):
            s, e = self.spans.get(word, (0, 0))
            following = (self.row[s:e] * 2 + self.col[s:e]) * SPAN + self.offset[s:e]
            keys = keys[np.isin(keys + k, following)]
        out = np.zeros((2, len(self.seqs)))
        np.add.at(out, ((keys // SPAN) % 2, keys // SPAN // 2), 1.0)
        return out


def saturate(f: np.ndarray, length: np.ndarray, avg: float) -> np.ndarray:
    """BM25's term-frequency part, as FTS5's ``bm25()`` computes it."""
    return f * (BM25_K1 + 1) / (f + BM25_K1 * (1 - BM25_B + BM25_B * length / max(avg, 1e-9)))


def field_scores(fields: Fields, lexical: LexicalPlan) -> dict[str, np.ndarray]:
    """Each memory's BM25 for the plan: whole (``bm25()``), first line alone, and with the
    first line counted twice in the text."""
    n = len(fields.seqs)
    whole_len, head_len = fields.length
    titled = head_len > 0
    avg_whole = float(whole_len.mean()) if n else 1.0
    avg_head = float(head_len[titled].mean()) if titled.any() else 1.0
    avg_twice = float((whole_len + head_len).mean()) if n else 1.0
    out = {k: np.zeros(n) for k in ("whole", "head", "twice")}
    out["titled"] = titled.astype(float)
    for term, df in zip(lexical.terms, lexical.doc_freqs, strict=True):
        if not df:
            continue
        weight = term.count * idf(df, lexical.n_docs)
        whole, head = fields.freqs(term.key)
        out["whole"] += weight * saturate(whole, whole_len, avg_whole)
        out["head"] += weight * saturate(head, head_len, avg_head)
        out["twice"] += weight * saturate(whole + head, whole_len + head_len, avg_twice)
    return out


def bonus(w: float) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """Whole + ``w`` x first line, over 1 + ``w`` for memories that have a first line: the
    score's normalization (the query's IDFs) then bounds it as it bounds the whole's."""
    return lambda s: (s["whole"] + w * s["head"]) / (1 + w * s["titled"])


# name -> lexical score from the field scores
LEXICAL: dict[str, Callable[[dict[str, np.ndarray]], np.ndarray]] = {
    "whole (shipped)": lambda s: s["whole"],
    "+ 0.1 x first line": bonus(0.1),
    "+ 0.25 x first line": bonus(0.25),
    "+ 0.5 x first line": bonus(0.5),
    "+ 1.0 x first line": bonus(1.0),
    "+ 0.5 x first line, not divided by 1.5": lambda s: s["whole"] + 0.5 * s["head"],
    "first line twice in the text": lambda s: s["twice"],
}
# name -> vector score from (the memory's cosine, its first line's, has a first line)
VECTOR: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "doc (shipped)": lambda a, t, titled: a,
    "max(doc, first line)": lambda a, t, titled: np.where(titled, np.maximum(a, t), a),
    "0.8 doc + 0.2 first line": lambda a, t, titled: np.where(titled, 0.8 * a + 0.2 * t, a),
    "0.9 doc + 0.1 first line": lambda a, t, titled: np.where(titled, 0.9 * a + 0.1 * t, a),
}
SETS = {  # label -> (store, key of its queries in features.pkl) pairs, and the measure
    "SciFact train nDCG@10": ([("scifact", "scifact-train")], "nDCG@10"),
    "SciFact test nDCG@10": ([("scifact", "scifact-test")], "nDCG@10"),
    "CISI nDCG@10": ([("cisi", "cisi-test")], "nDCG@10"),
}
Runs = dict[tuple[str, str], dict[str, dict[str, float]]]


def top(score: np.ndarray, seqs: np.ndarray, positive: bool) -> list[tuple[int, float]]:
    """An arm's ``POOL`` best memories, best first, ties by seq."""
    order = np.lexsort((seqs, -score))[:POOL]
    if positive:
        order = order[score[order] > 0]
    return [(int(seqs[i]), float(score[i])) for i in order]


def fused(lex: np.ndarray, norm: float, vec: np.ndarray, seqs: np.ndarray, ids: Any) -> ef.Query:
    """What the pipeline fuses: each arm's top 200 and both arms' scores of their union."""
    lexical, vector = top(lex, seqs, True), top(vec, seqs, False)
    where = np.searchsorted(seqs, sorted({s for s, _ in lexical} | {s for s, _ in vector}))
    bm = {int(seqs[i]): float(lex[i]) for i in where if lex[i] > 0}
    cos = {int(seqs[i]): float(vec[i]) for i in where}
    return {"lex": lexical, "vec": vector, "bm": bm, "cos": cos, "norm": norm, "ids": ids}


def ranked(scores: dict[int, float], ids: Any) -> dict[str, float]:
    order = sorted(scores, key=lambda s: (-scores[s], s))[:100]
    return ranked_run([ids[s] for s in order])


def store_runs(name: str, asked: dict[str, Any], runs: Runs) -> float:
    """Every candidate's run of the queries ``asked`` against store ``name``; returns the
    largest difference between the whole-memory BM25 here and the features' (a check)."""
    fields = Fields.of(rows_of(name))
    seqs = fields.seqs
    heads = np.load(WORK / f"{name}.npz")
    at = np.searchsorted(seqs, heads["seqs"])
    titled = np.zeros(len(seqs), dtype=bool)
    titled[at] = True
    emb, drift = ef.embedder(), 0.0
    with mnemex.open(SOURCE / f"{name}.db", embedder=emb, dedup=False) as store:
        index, lexicon = store.session.vectors(emb.dim), store.session.lexicon
        assert index.size == len(seqs), "every memory has a vector"
        qids = list(asked["q"])
        texts = [clean_query(asked["texts"][q]) for q in qids]
        qvs = emb.embed(texts)
        qvs /= np.linalg.norm(qvs, axis=1, keepdims=True)
        for qid, text, qv in zip(qids, texts, qvs, strict=True):
            base, lexical = asked["q"][qid], plan(lexicon, text, STOPWORDS, expand=True)
            scores = field_scores(fields, lexical)
            drift = max(
                [
                    drift,
                    *(
                        abs(scores["whole"][np.searchsorted(seqs, s)] - v)
                        for s, v in base["bm"].items()
                    ),
                ]
            )
            best = index.cosines_of(seqs.tolist(), qv)
            doc = np.array([best.get(int(s), -1.0) for s in seqs])
            head = np.zeros(len(seqs))
            head[at] = heads["vectors"] @ qv
            vectors = {v: score(doc, head, titled) for v, score in VECTOR.items()}
            for lname, lexical_score in LEXICAL.items():
                lex = lexical_score(scores)
                runs.setdefault(("lexical arm", lname), {})[qid] = ranked(
                    dict(top(lex, seqs, True)), base["ids"]
                )
                for vname, vec in vectors.items():
                    q = fused(lex, lexical.norm, vec, seqs, base["ids"])
                    runs.setdefault((lname, vname), {})[qid] = ranked(ef.adaptive(q), base["ids"])
            for vname, vec in vectors.items():
                runs.setdefault(("vector arm", vname), {})[qid] = ranked(
                    dict(top(vec, seqs, False)), base["ids"]
                )
    return drift


def measured(runs: Runs, asked: dict[str, Any], measure: str) -> dict[tuple[str, str], Any]:
    """Each candidate's mean ``measure`` (and per LoCoMo category) over the queries asked."""
    out = {}
    for key, run in runs.items():
        values = per_query(asked["qrels"], run, [measure])
        cats: dict[int, list[float]] = {}
        for qid, v in values.items():
            if "cat" in asked:
                cats.setdefault(asked["cat"][qid], []).append(v[measure])
        per = {c: float(np.mean(v)) for c, v in sorted(cats.items())}
        out[key] = (float(np.mean([v[measure] for v in values.values()])), per)
    return out


def evaluate() -> tuple[dict[str, dict[tuple[str, str], Any]], float]:
    with open(SOURCE / "features.pkl", "rb") as handle:
        data = pickle.load(handle)
    sets = dict(SETS)
    convs = [n for n in stores(data) if n.startswith("locomo-")]
    sets["LoCoMo-dev R@10"] = ([(n, n) for n in convs], "R@10")
    out, drift = {}, 0.0
    for label, (parts, measure) in sets.items():
        runs: Runs = {}
        asked: dict[str, Any] = {"q": {}, "qrels": {}, "cat": {}}
        for name, key in parts:
            drift = max(drift, store_runs(name, data[key], runs))
            for field in ("q", "qrels", "cat"):
                asked[field].update(data[key].get(field, {}))
        if not asked["cat"]:
            del asked["cat"]
        out[label] = measured(runs, asked, measure)
        print(label, "done", flush=True)
    return out, drift


def table() -> None:
    results, drift = evaluate()
    labels = list(results)
    lines = [
        f"| lexical score | vector score | {' | '.join(labels)} | LoCoMo R@10 per category 1 / 2 / 3 / 4 |",
        "| --- | --- |" + " ---: |" * len(labels) + " --- |",
    ]
    for key in results[labels[0]]:
        cells = [f"{results[label][key][0]:.4f}" for label in labels]
        cats = " / ".join(f"{v:.3f}" for v in results[labels[-1]][key][1].values())
        lex, vec = key
        if key[0] == "lexical arm":
            lex, vec = key[1], "(lexical arm alone)"
        elif key[0] == "vector arm":
            lex, vec = "(vector arm alone)", key[1]
        lines.append(f"| {lex} | {vec} | {' | '.join(cells)} | {cats} |")
        print(lines[-1], flush=True)
    print(f"largest |whole BM25 here - features'|: {drift:.2e}")
    with open(WORK / "results.pkl", "wb") as handle:
        pickle.dump(results, handle)
    body = "\n".join(
        [
            "## A memory's first line as a field (`benchmarks/eval_title.py`, issue 11)",
            "",
            f"Machine: {machine()}. `python benchmarks/eval_sentences.py dump --data ../shared/data`, "
            "then `python benchmarks/eval_title.py dump` and `table`. Each arm scored over every "
            "memory (no query shaping), top 200 each, fused with the shipped adaptive rule; no "
            f"relevance floor, no thread stage. Whole-memory BM25 matches the features' to {drift:.0e}.",
            "",
            *lines,
        ]
    )
    write_section("eval_title", body)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("dump", "table"))
    args = parser.parse_args()
    if args.command == "dump":
        dump()
    else:
        table()


if __name__ == "__main__":
    main()
