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
thread stage (as ``eval_fusion.py fusion``). Two checks: μ from a few memories
drawn at random (a small store), and μ from the other datasets' stores (a constant
of the model instead of the store's). The section also gives the same fusion with
its weight read from the raw cosines, the vector arm alone, a paired sign-flip test
of each row meeting the rule, and the median best cosine of in-domain and of
``eval_fusion``'s foreign queries under each variant, since the relevance floor is
calibrated on raw cosines.
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
from mnemex.eval.metrics import per_query
from mnemex.index.fts import bm25_of, plan
from mnemex.index.stopwords import STOPWORDS
from mnemex.search import fusion as shipped
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


MEANS = {
    "first": "first windows",
    "all": "all windows",
    "others": "the other datasets' first windows",
}


class Centering(NamedTuple):
    """What a store's vectors lose: μ, the mean of its ``mean`` rows (``first`` windows,
    ``all`` windows, the first windows of ``sample`` memories drawn at random; ``others``:
    the mean of the other datasets' stores' first windows, a constant rather than the
    store's; ``None``: nothing, as shipped) times ``shrink``, and the ``top`` principal
    components of the same rows; ``queries``: whether the query is transformed too."""

    mean: str | None = None
    shrink: float = 1.0
    top: int = 0
    queries: bool = True
    sample: int = 0

    def label(self) -> str:
        if self.mean is None:
            return "raw cosines (shipped)"
        what = f"μ of {MEANS[self.mean]}"
        what += f" of {self.sample} memories drawn at random" if self.sample else ""
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
    rows += [Centering("first", sample=n) for n in (10, 30, 100)]
    return [*rows, Centering("others"), Centering("others", shrink=0.5)]


class Vectors(NamedTuple):
    """A store's stored vectors (float64, a row per window, by seq then window), each
    memory's first row and each memory's seq."""

    rows: np.ndarray
    starts: np.ndarray
    seqs: np.ndarray


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)  # type: ignore[no-any-return]


def fitted(c: Centering, vectors: Vectors, others: np.ndarray) -> Transform:
    """The variant's transform, fitted on one store's vectors (``others``: the mean of the
    other datasets' first windows)."""
    if c.mean is None:
        return lambda x: x
    sample = vectors.rows if c.mean == "all" else vectors.rows[vectors.starts]
    if c.sample:
        drawn = np.random.default_rng(7).permutation(len(sample))[: c.sample]
        sample = sample[np.sort(drawn)]
    mean = others if c.mean == "others" else sample.mean(axis=0)
    basis = np.linalg.svd(sample - mean, full_matrices=False)[2][: c.top]

    def apply(x: np.ndarray) -> np.ndarray:
        y = x - c.shrink * mean
        return y - (y @ basis.T) @ basis  # type: ignore[no-any-return]

    return apply


def stored(store: mnemex.Store) -> Vectors:
    index = store.session.vectors(ef.embedder().dim)
    found = store.session.conn.execute(
        "SELECT seq, vector FROM embeddings WHERE model = ? ORDER BY seq, window",
        (index.model,),
    ).fetchall()
    seq = np.array([r[0] for r in found])
    rows = np.frombuffer(b"".join(r[1] for r in found), dtype=np.float32).reshape(len(found), -1)
    starts = np.r_[0, np.flatnonzero(np.diff(seq)) + 1]
    assert index.size == len(starts), "every memory has a vector"
    return Vectors(rows.astype(np.float64), starts, seq[starts])


def best_cosines(
    c: Centering, vectors: Vectors, queries: np.ndarray, others: np.ndarray
) -> np.ndarray:
    """(memories × queries): each memory's best window's cosine under the variant."""
    transform = fitted(c, vectors, others)
    docs = unit(transform(vectors.rows))
    asked = unit(transform(queries)) if c.queries else queries
    return np.maximum.reduceat(docs @ asked.T, vectors.starts, axis=0)


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


def opened(store_name: str) -> mnemex.Store:
    return mnemex.open(ef.WORK / f"{store_name}.db", embedder=ef.embedder(), dedup=False)


def rescored(
    data: dict[str, Any],
    store_name: str,
    asked: list[tuple[str, str, str]],
    rows: list[Centering],
    others: np.ndarray,
) -> dict[Centering, dict[str, dict[str, Any]]]:
    """Per variant and feature key: the in-domain queries with the vector arm taken anew
    (``q``), and every query's best cosine (``top1``)."""
    out: dict[Centering, dict[str, dict[str, Any]]] = {c: defaultdict(dict) for c in rows}
    with opened(store_name) as store:
        vectors = stored(store)
        cleaned = [clean_query(text) for _, _, text in asked]
        queries = unit(ef.embedder().embed(cleaned).astype(np.float64))
        scores = {c: best_cosines(c, vectors, queries, others) for c in rows}
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
                q = {**base, "vec": vec, "cos": cos, "bm": mine, "raw vec": base["vec"]}
                out[c][key].setdefault("q", {})[qid] = q
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
    stores = by_store(data, folder)
    means = dataset_means(list(stores))
    for store_name, asked in stores.items():
        others = np.mean([m for d, m in means.items() if d != dataset(store_name)], axis=0)
        for c, per_key in rescored(data, store_name, asked, rows, others).items():
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


def dataset(store_name: str) -> str:
    return store_name.split("-")[0]


def dataset_means(store_names: list[str]) -> dict[str, np.ndarray]:
    """Each dataset's mean first window, over all its stores."""
    firsts: dict[str, list[np.ndarray]] = defaultdict(list)
    for store_name in store_names:
        with opened(store_name) as store:
            vectors = stored(store)
        firsts[dataset(store_name)].append(vectors.rows[vectors.starts])
    return {d: np.vstack(parts).mean(axis=0) for d, parts in firsts.items()}


def raw_weight(q: ef.Query) -> dict[int, float]:
    """The shipped adaptive rule with its vector margin read from the raw cosines' top
    (the variant's cosines fused): what the weight alone does."""
    wv = shipped.adaptive_weight(
        [ef.text(q, s) for s, _ in q["lex"]], [max(0.0, c) for _, c in q["raw vec"]], 0.5, 0.5
    )
    return ef.weighted(wv)(q)


# -- the table ---------------------------------------------------------------------------


Row = dict[str, list[float]]


def measured(sets: dict[str, dict[str, Any]], fuse: ef.Fusion) -> Row:
    """Per label: the mean (nDCG@10, LoCoMo R@10) and, for LoCoMo, each category's."""
    out = {}
    for label, key in SCORED.items():
        value, cats = ef.score(sets[key], fuse, MEASURE.get(key, "nDCG@10"))
        out[label] = [value, *cats.values()]
    return out


FUSERS: dict[str, ef.Fusion] = {
    "adaptive": ef.adaptive,
    "adaptive, weight from raw cosines": raw_weight,
    "vector arm": ef.vector_only,
}


def per_query_values(sets: dict[str, Any], key: str) -> dict[str, float]:
    """Each query's value under the shipped adaptive rule."""
    measure = MEASURE.get(key, "nDCG@10")
    values = per_query(sets[key]["qrels"], ef.run_of(sets[key], ef.adaptive), [measure])
    return {q: v[measure] for q, v in values.items()}


def paired(before: dict[str, float], after: dict[str, float]) -> str:
    """The change in the mean, the queries it helps and hurts, and a two-sided sign-flip
    randomization test's p (10,000 rounds)."""
    d = np.array([after[q] - before[q] for q in before])
    flips = np.random.default_rng(7).choice((-1.0, 1.0), size=(10_000, len(d)))
    p = float((np.abs((flips * d).mean(axis=1)) >= abs(d.mean()) - 1e-12).mean())
    return f"{d.mean():+.4f} ({int((d > 0).sum())} up, {int((d < 0).sum())} down, p {p:.2f})"


def tested(
    found: dict[Centering, dict[str, dict[str, Any]]], rows: dict[Centering, Row]
) -> list[str]:
    """For each variant meeting the rule: :func:`paired` against the shipped row, per set."""
    base = {key: per_query_values(found[Centering()], key) for key in SCORED.values()}
    out = []
    for c, r in rows.items():
        if c != Centering() and passes(r, rows[Centering()]):
            cells = [
                f"{label} {paired(base[key], per_query_values(found[c], key))}"
                for label, key in SCORED.items()
            ]
            out.append(f"- {c.label()}: " + "; ".join(cells) + ".")
    return out


def table(folder: Path) -> None:
    data = ef.load()
    check = measured(data, ef.adaptive)
    print("eval_fusion features:", {k: round(v[0], 4) for k, v in check.items()})
    found = gathered(data, folder)
    rows: dict[str, dict[Centering, Row]] = {name: {} for name in FUSERS}
    for c, sets in found.items():
        for name, fuse in FUSERS.items():
            rows[name][c] = measured(sets, fuse)
        print(c.label(), {k: round(v[0], 4) for k, v in rows["adaptive"][c].items()}, flush=True)
    checks = tested(found, rows["adaptive"])
    print("\n".join(checks))
    write_section("eval_centering", section(data, found, rows, check, checks))


def scores_table(rows: dict[Centering, Row], rule: bool) -> list[str]:
    """A row per variant: each set's mean, LoCoMo's categories and (``rule``) whether it
    meets the rule against the shipped row."""
    shipped_row = rows[Centering()]
    head = "| vectors | " + " | ".join(SCORED) + " | LoCoMo 1 / 2 / 3 / 4 |" + " rule |" * rule
    lines = [head, "| --- |" + " ---: |" * 4 + " --- |" * (1 + rule)]
    for c, r in rows.items():
        cells = " | ".join(f"{r[k][0]:.4f}" for k in SCORED)
        cats = " / ".join(f"{v:.3f}" for v in r["LoCoMo-dev"][1:])
        verdict = "shipped" if c == Centering() else ("meets" if passes(r, shipped_row) else "no")
        lines.append(f"| {c.label()} | {cells} | {cats} |" + f" {verdict} |" * rule)
    return lines


def section(
    data: dict[str, Any],
    found: dict[Centering, dict[str, dict[str, Any]]],
    rows: dict[str, dict[Centering, Row]],
    check: Row,
    checks: list[str],
) -> str:
    pairs = [*SCORED.values(), *data["foreign"]]
    names = [*SCORED, *(k.replace("->", " → ") for k in data["foreign"])]
    cos_lines = ["| vectors | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    for c, sets in found.items():
        medians = [np.median(sets[k]["top1"]) for k in pairs]
        cos_lines.append(f"| {c.label()} | " + " | ".join(f"{m:.3f}" for m in medians) + " |")
    checked = ", ".join(f"{k} {v[0]:.4f}" for k, v in check.items())
    return "\n".join(
        [
            "## Store-adaptive centering of the vectors (`benchmarks/eval_centering.py`, issue 11)",
            "",
            f"Machine: {machine()}. `python benchmarks/eval_fusion.py dump --data ../shared/data`, "
            "then `python benchmarks/eval_centering.py table --data ../shared/data`. "
            f"eval_fusion's own features give adaptive {checked}. "
            "No relevance floor and no thread stage.",
            "",
            "Adaptive fusion (nDCG@10; LoCoMo-dev R@10, a store per conversation):",
            "",
            *scores_table(rows["adaptive"], rule=True),
            "",
            "The rows meeting the rule, query by query against the shipped row:",
            "",
            *checks,
            "",
            "Adaptive fusion of the same cosines, its weight read from the raw cosines:",
            "",
            *scores_table(rows["adaptive, weight from raw cosines"], rule=True),
            "",
            "The vector arm alone:",
            "",
            *scores_table(rows["vector arm"], rule=False),
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
