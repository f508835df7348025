"""Store-adaptive centering of the vectors: each store's common direction(s) taken out.

    python benchmarks/eval_fusion.py dump --data DIR          # the stores and features read here
    python benchmarks/eval_centering.py table [--data DIR]    # every variant; writes RESULTS.md

The local model's vectors share a common direction (anisotropy), so every cosine
carries a part that says little about the pair. ``table`` reads the stores and
features ``eval_fusion.py dump`` wrote (SciFact, CISI, each LoCoMo-dev
conversation in a store of its own), takes each store's stored vectors (a row per
window, as the product stores them) and, per variant, transforms them with that
store's own statistics: ``v - μ`` with μ the mean of the memories' first windows
or of all windows (*centering*), ``λ μ`` for a shrunk mean, and the projections
on the top D principal components of the same rows removed as well
(*all-but-the-top*); the query gets the same transform, or none (*documents
only*). Every vector is then normalized again. The vector arm's top 200 is taken
anew from those cosines (a memory scores its best window, as shipped; BM25 of
the rows the lexical arm missed is computed as the pipeline does) and fused with
the shipped adaptive rule (``eval_fusion.adaptive``). No relevance floor and no
thread stage (as ``eval_fusion.py fusion``). The table also gives the median best
cosine of in-domain and of ``eval_fusion``'s foreign queries under each variant,
since the relevance floor is calibrated on raw cosines.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import eval_fusion as ef
import mnemex
from common import data_dir, machine, write_section
from eval_sentences import passes
from mnemex.eval.data import load_beir, load_locomo
from mnemex.index.fts import bm25_of, plan
from mnemex.index.stopwords import STOPWORDS
from mnemex.text import clean_query

Transform = Callable[[np.ndarray], np.ndarray]
# The sets scored (eval_fusion's feature keys) and their labels; the first three tune.
SCORED = {
    "SciFact train": "scifact-train",
    "SciFact test": "scifact-test",
    "CISI": "cisi-test",
    "LoCoMo-dev": "locomo",
}
MEASURE = {"locomo": "R@10"}  # nDCG@10 elsewhere
# The set each foreign query set is drawn from (eval_fusion.foreign_queries).
FOREIGN = {"scifact": "scifact-test", "cisi": "cisi-test", "locomo": "locomo"}


class Centering(NamedTuple):
    """What a store's vectors lose: μ, the mean of its ``mean`` rows (``first`` windows or
    ``all``; ``None``: nothing, as shipped) times ``shrink``, and their ``top`` principal
    components; ``queries``: whether the query is transformed too."""

    mean: str | None = None
    shrink: float = 1.0
    top: int = 0
    queries: bool = True

    def label(self) -> str:
        if self.mean is None:
            return "raw cosines (shipped)"
        what = f"μ of {'first windows' if self.mean == 'first' else 'all windows'}"
        what = f"{self.shrink} × {what}" if self.shrink != 1.0 else what
        what += f" and top {self.top} PC" + "s" * (self.top > 1) if self.top else ""
        return what + ("" if self.queries else ", documents only")


def variants() -> list[Centering]:
    rows = [Centering()]
    for mean in ("first", "all"):
        rows += [Centering(mean), Centering(mean, queries=False)]
        rows += [Centering(mean, shrink=0.5), Centering(mean, shrink=0.5, queries=False)]
        rows += [Centering(mean, top=d) for d in (1, 2, 3, 5)]
        rows += [Centering(mean, top=d, queries=False) for d in (1, 3)]
    return rows


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def fitted(c: Centering, rows: np.ndarray, window: np.ndarray) -> Transform:
    """The variant's transform, fitted on one store's rows (window numbers beside them)."""
    if c.mean is None:
        return lambda x: x
    sample = rows if c.mean == "all" else rows[window == 0]
    mean = sample.mean(axis=0)
    basis = np.linalg.svd(sample - mean, full_matrices=False)[2][: c.top]

    def apply(x: np.ndarray) -> np.ndarray:
        y = x - c.shrink * mean
        return y - (y @ basis.T) @ basis  # type: ignore[no-any-return]

    return apply


class Vectors(NamedTuple):
    """A store's stored vectors (float64, a row per window, by seq then window), each
    row's window number, each memory's first row and each memory's seq."""

    rows: np.ndarray
    window: np.ndarray
    starts: np.ndarray
    seqs: np.ndarray


def stored(store: mnemex.Store) -> Vectors:
    index = store.session.vectors(ef.embedder().dim)
    found = store.session.conn.execute(
        "SELECT seq, window, vector FROM embeddings WHERE model = ? ORDER BY seq, window",
        (index.model,),
    ).fetchall()
    seq = np.array([r[0] for r in found])
    rows = np.frombuffer(b"".join(r[2] for r in found), dtype=np.float32).reshape(len(found), -1)
    starts = np.r_[0, np.flatnonzero(np.diff(seq)) + 1]
    assert index.size == len(starts), "every memory has a vector"
    return Vectors(rows.astype(np.float64), np.array([r[1] for r in found]), starts, seq[starts])


def best_cosines(c: Centering, vectors: Vectors, queries: np.ndarray) -> np.ndarray:
    """(memories × queries): each memory's best window's cosine under the variant."""
    transform = fitted(c, vectors.rows, vectors.window)
    docs = unit(transform(vectors.rows))
    asked = unit(transform(queries)) if c.queries else queries
    return np.maximum.reduceat(docs @ asked.T, vectors.starts, axis=0)  # type: ignore[no-any-return]


# -- the queries of each store ------------------------------------------------------------


def query_texts(folder: Path) -> dict[str, dict[str, str]]:
    """Each in-domain feature key's query texts by query id (the foreign queries are drawn
    from them: :data:`FOREIGN`)."""
    return {
        "scifact-train": load_beir(folder / "beir" / "scifact", "train").queries,
        "scifact-test": load_beir(folder / "beir" / "scifact", "test").queries,
        "cisi-test": load_beir(folder / "beir" / "cisi", "test").queries,
        "locomo": {
            q.id: q.text for q in load_locomo(folder / "locomo" / "locomo10-dev.json").questions
        },
    }


def store_of(key: str, q: ef.Query) -> str:
    """The store a query of feature key ``key`` was asked against."""
    target = key.split("->")[-1] if "->" in key else key.split("-")[0]
    return f"locomo-{q['ns']}" if target == "locomo" else target


def by_store(data: dict[str, Any], folder: Path) -> dict[str, list[tuple[str, str, str]]]:
    """Per store: its (feature key, query id, text), in-domain and foreign."""
    texts = query_texts(folder)
    out: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for key in SCORED.values():
        for qid, q in data[key]["q"].items():
            out[store_of(key, q)].append((key, qid, texts[key][qid]))
    for key, asked in data["foreign"].items():
        source = texts[FOREIGN[key.split("->")[0]]]
        for qid, q in asked.items():
            out[store_of(key, q)].append((key, qid, source[qid.split("|", 1)[1]]))
    return out


# -- the vector arm anew ----------------------------------------------------------------


def rescored(
    data: dict[str, Any], store_name: str, asked: list[tuple[str, str, str]], rows: list[Centering]
) -> dict[Centering, dict[str, dict[str, Any]]]:
    """Per variant and feature key: the in-domain queries with the vector arm taken anew
    (``q``), and every query's best cosine (``top1``)."""
    out: dict[Centering, dict[str, dict[str, Any]]] = {c: defaultdict(dict) for c in rows}
    emb = ef.embedder()
    with mnemex.open(ef.WORK / f"{store_name}.db", embedder=emb, dedup=False) as store:
        vectors = stored(store)
        cleaned = [clean_query(text) for _, _, text in asked]
        queries = unit(emb.embed(cleaned).astype(np.float64))
        scores = {c: best_cosines(c, vectors, queries) for c in rows}
        conn, lexicon = store.session.conn, store.session.lexicon
        place = {int(s): i for i, s in enumerate(vectors.seqs)}
        for j, ((key, qid, _), text) in enumerate(zip(asked, cleaned, strict=True)):
            for c in rows:
                out[c][key].setdefault("top1", []).append(float(scores[c][:, j].max()))
            if key not in SCORED.values():
                continue
            base = data[key]["q"][qid]
            arms = {c: arm(base, scores[c][:, j], vectors.seqs, place) for c in rows}
            known = base["bm"]
            missing = {s for vec, _ in arms.values() for s, _ in vec if s not in known}
            lexical = plan(lexicon, text, STOPWORDS, expand=True)
            bm = {**known, **bm25_of(conn, lexicon, lexical, sorted(missing))}
            lexed = {s for s, _ in base["lex"]}
            for c, (vec, cos) in arms.items():
                keep = lexed | {s for s, _ in vec}
                mine = {s: bm[s] for s in keep if s in bm}
                out[c][key].setdefault("q", {})[qid] = {**base, "vec": vec, "cos": cos, "bm": mine}
    return out


def arm(
    base: ef.Query, cosines: np.ndarray, seqs: np.ndarray, place: dict[int, int]
) -> tuple[list[tuple[int, float]], dict[int, float]]:
    """The vector arm's top ``POOL`` by ``cosines`` (a value per memory, in ``seqs``'
    order) and the cosine of every candidate of either arm."""
    top = np.argsort(-cosines, kind="stable")[: ef.POOL]
    vec = [(int(seqs[i]), float(cosines[i])) for i in top]
    cos = dict(vec)
    cos.update({s: float(cosines[place[s]]) for s, _ in base["lex"] if s not in cos})
    return vec, cos


def gathered(data: dict[str, Any], folder: Path) -> dict[Centering, dict[str, dict[str, Any]]]:
    """Every store's part of :func:`rescored`, merged per variant and feature key."""
    rows = variants()
    out: dict[Centering, dict[str, dict[str, Any]]] = {c: defaultdict(dict) for c in rows}
    for store_name, asked in by_store(data, folder).items():
        for c, per_key in rescored(data, store_name, asked, rows).items():
            for key, part in per_key.items():
                into = out[c][key]
                into.setdefault("top1", []).extend(part["top1"])
                if "q" in part:
                    into.setdefault("q", {}).update(part["q"])
                    into["qrels"] = data[key]["qrels"]
                    if "cat" in data[key]:
                        into["cat"] = data[key]["cat"]
        print(f"{store_name}: {len(asked)} queries", flush=True)
    return out


# -- the table ---------------------------------------------------------------------------


Row = dict[str, list[float]]


def measured(sets: dict[str, dict[str, Any]], fuse: ef.Fusion) -> Row:
    """Per label: the mean (nDCG@10, LoCoMo R@10) and, for LoCoMo, each category's."""
    out = {}
    for label, key in SCORED.items():
        value, cats = ef.score(sets[key], fuse, MEASURE.get(key, "nDCG@10"))
        out[label] = [value, *cats.values()]
    return out


def table(folder: Path) -> None:
    data = ef.load()
    base = {
        "adaptive": measured(data, ef.adaptive),
        "vector": measured(data, ef.vector_only),
    }
    print("eval_fusion features:", {k: round(v[0], 4) for k, v in base["adaptive"].items()})
    found = gathered(data, folder)
    fused: dict[Centering, Row] = {}
    vector: dict[Centering, Row] = {}
    for c, sets in found.items():
        fused[c], vector[c] = measured(sets, ef.adaptive), measured(sets, ef.vector_only)
        print(c.label(), {k: round(v[0], 4) for k, v in fused[c].items()}, flush=True)
    write_section("eval_centering", section(data, found, fused, vector, base))


def section(
    data: dict[str, Any],
    found: dict[Centering, dict[str, dict[str, Any]]],
    fused: dict[Centering, Row],
    vector: dict[Centering, Row],
    base: dict[str, Row],
) -> str:
    shipped = fused[Centering()]
    head = "| vectors | " + " | ".join(SCORED) + " | LoCoMo 1 / 2 / 3 / 4 | rule |"
    lines = [head, "| --- |" + " ---: |" * 4 + " --- | --- |"]
    for c, r in fused.items():
        cells = " | ".join(f"{r[k][0]:.4f}" for k in SCORED)
        cats = " / ".join(f"{v:.3f}" for v in r["LoCoMo-dev"][1:])
        rule = "shipped" if c == Centering() else ("meets" if passes(r, shipped) else "no")
        lines.append(f"| {c.label()} | {cells} | {cats} | {rule} |")
    arm_lines = [
        "| vectors | " + " | ".join(SCORED) + " | LoCoMo 1 / 2 / 3 / 4 |",
        "| --- |" + " ---: |" * 4 + " --- |",
    ]
    for c, r in vector.items():
        cells = " | ".join(f"{r[k][0]:.4f}" for k in SCORED)
        cats = " / ".join(f"{v:.3f}" for v in r["LoCoMo-dev"][1:])
        arm_lines.append(f"| {c.label()} | {cells} | {cats} |")
    pairs = [*SCORED.values(), *data["foreign"]]
    names = [*SCORED, *(k.replace("->", " → ") for k in data["foreign"])]
    cos_lines = ["| vectors | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    for c, sets in found.items():
        medians = [np.median(sets[k]["top1"]) for k in pairs]
        cos_lines.append(f"| {c.label()} | " + " | ".join(f"{m:.3f}" for m in medians) + " |")
    check = ", ".join(f"{k} {v[0]:.4f}" for k, v in base["adaptive"].items())
    return "\n".join(
        [
            "## Store-adaptive centering of the vectors (`benchmarks/eval_centering.py`, issue 11)",
            "",
            f"Machine: {machine()}. `python benchmarks/eval_fusion.py dump --data ../shared/data`, "
            "then `python benchmarks/eval_centering.py table --data ../shared/data`. "
            f"eval_fusion's own features give adaptive {check}. "
            "No relevance floor and no thread stage.",
            "",
            "Adaptive fusion (nDCG@10; LoCoMo-dev R@10, a store per conversation):",
            "",
            *lines,
            "",
            "The vector arm alone:",
            "",
            *arm_lines,
            "",
            "Median best cosine per query, in-domain then foreign (query set → store):",
            "",
            *cos_lines,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("table",))
    parser.add_argument("--data")
    args = parser.parse_args()
    table(data_dir(args.data))


if __name__ == "__main__":
    main()
