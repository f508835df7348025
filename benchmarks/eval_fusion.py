"""Fusion and relevance-floor candidates, measured offline on each arm's candidates.

    python benchmarks/eval_fusion.py dump [--data DIR]     # stores + per-query features
    python benchmarks/eval_fusion.py dump-workspace        # only the workspace stores' part
    python benchmarks/eval_fusion.py terms                 # query terms of an older dump
    python benchmarks/eval_fusion.py fusion                # every fusion candidate
    python benchmarks/eval_fusion.py floor                 # the floor's trade-off curve
    python benchmarks/eval_fusion.py dump --case lower     # every query lower-cased
    python benchmarks/eval_fusion.py floor --case lower    # the floor on those
    python benchmarks/eval_fusion.py dump --case sentence  # lower-cased, first letter upper

``dump`` builds a store per dataset under benchmarks/.cache/fusion (SciFact,
CISI, and each LoCoMo-dev conversation in its own store, so no other
namespace touches its statistics), embedding through the evaluation's
embedding cache, and records for every query each arm's top 200 with both
arms' scores for every candidate (BM25 of the rows the lexical arm missed,
cosine of the rows the vector arm missed), exactly what the search pipeline
fuses. It also asks "foreign" queries: SciFact claims and CISI queries
against each LoCoMo conversation, LoCoMo questions and CISI queries against
SciFact, LoCoMo questions and SciFact claims against CISI. ``fusion`` and
``floor`` then evaluate candidates on those features in seconds; the shipped
rules (``adaptive`` fusion, the floor) give the numbers ``mnemex eval``
gives.

The dump also writes each LoCoMo-dev conversation as a markdown workspace (as
``mnemex eval locomo FILE --as-workspace`` does) and syncs it into a store of
its own, then records features for the conversation's questions (a chunk is
relevant when its line range holds an evidence turn, as that evaluation scores
it), for the same foreign SciFact claims and CISI queries as the
per-conversation stores get, and for 40 questions of the other conversations
(``workspace.pkl``). ``floor`` reports each gate on them too.
"""

from __future__ import annotations

import argparse
import math
import pickle
import random
import sqlite3
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import CACHE, data_dir
from mnemex.embed.local import LocalEmbedder
from mnemex.embed.wordpiece import load_vocab
from mnemex.eval.data import load_beir, load_locomo
from mnemex.eval.embed_cache import CachedEmbedder, default_cache_dir
from mnemex.eval.metrics import per_query, ranked_run
from mnemex.eval.workspace import found_in_chunks, write_all
from mnemex.index.fts import Filters, LexicalPlan, bm25_of, plan, retrieve
from mnemex.index.query import idf, named_words
from mnemex.index.stopwords import STOPWORDS
from mnemex.search import fusion as shipped
from mnemex.search.floor import CALIBRATED, Floor
from mnemex.text import clean_query

POOL = 200
WORK = CACHE / "fusion"
Query = dict[str, Any]
Fusion = Callable[[Query], dict[int, float]]

_embedder: CachedEmbedder | None = None
CASE: str | None = None  # ``--case``: every query recased (``recase``), in dumps of their own


def dumped(name: str) -> Path:
    """A dump's file: ``features`` or ``workspace``, of the queries as written or recased."""
    return WORK / (f"{name}-{CASE}.pkl" if CASE else f"{name}.pkl")


def recase(query: str) -> str:
    """The query as ``--case`` writes it: as written; ``lower``: lower-cased; ``sentence``:
    lower-cased, then its first letter upper-cased ("What did caroline do in june?")."""
    if CASE is None:
        return query
    lowered = query.lower()
    if CASE == "lower":
        return lowered
    first = next((i for i, c in enumerate(lowered) if c.isalpha()), len(lowered))
    return lowered[:first] + lowered[first:].capitalize()


def embedder() -> CachedEmbedder:
    global _embedder
    if _embedder is None:
        _embedder = CachedEmbedder(LocalEmbedder(), default_cache_dir())
    return _embedder


# -- dump ---------------------------------------------------------------------------


def build(path: Path, groups: dict[str, list[dict[str, Any]]]) -> mnemex.Store:
    fresh = not path.exists()
    store = mnemex.open(path, embedder=embedder(), dedup=False)
    if fresh:
        for ns, items in groups.items():
            for start in range(0, len(items), 5000):
                store.add_many(items[start : start + 5000], namespace=ns, embed=False)
        store.embed()
    return store


def features(store: mnemex.Store, queries: list[tuple[str, str, str]]) -> dict[str, Query]:
    conn, lexicon, emb = store.session.conn, store.session.lexicon, embedder()
    ids = dict(conn.execute("SELECT seq, id FROM memories").fetchall())
    texts = [clean_query(recase(t)) for _, t, _ in queries]
    vectors = emb.embed(texts)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = store.session.vectors(emb.dim)
    out = {}
    for (qid, _, ns), text, qv in zip(queries, texts, vectors, strict=True):
        lexical = plan(lexicon, text, STOPWORDS, expand=True)
        lex = retrieve(conn, lexical, Filters(ns), POOL, store.settings.lexical_budget).candidates
        mask = index.mask_for(Filters(ns))
        vec = index.top(qv, mask, POOL)
        bm = {c.seq: c.raw for c in lex}
        bm.update(bm25_of(conn, lexicon, lexical, [h.seq for h in vec if h.seq not in bm]))
        cos = {h.seq: h.cosine for h in vec}
        cos.update(index.cosines_of([s for s in bm if s not in cos], qv))  # best windows
        first = {s: float(v @ qv) for s, v in index.vectors_of(sorted(cos)).items()}
        tokens = {**cos, **index.token_cosines_of(sorted(cos), qv)}  # best token windows
        out[qid] = {
            "lex": [(c.seq, c.raw) for c in lex],
            "vec": [(h.seq, h.cosine) for h in vec],
            "bm": bm,
            "cos": cos,
            "cos0": first,  # the first window's cosine (the memory's start)
            "tok": tokens,  # the best token window's cosine (sentence windows left out)
            "norm": lexical.norm,
            "text": text,  # the cleaned query
            "ns": ns,
            "ids": ids,
        }
        out[qid].update(term_features(conn, lexical, union(out[qid])))
    return out


def term_features(conn: Any, lexical: LexicalPlan, seqs: set[int]) -> Query:
    """The query's content terms (index term, document frequency in the store, the word as
    the query writes it, lower-cased: ``terms``), the store's row count (``n``) and, for each candidate holding some, the indexes of the terms it holds
    (``has``): one FTS5 query per term, on the candidates only."""
    has: dict[int, set[int]] = defaultdict(set)
    candidates = sorted(seqs)
    for i, term in enumerate(lexical.terms):
        for start in range(0, len(candidates), 500):
            chunk = candidates[start : start + 500]
            sql = (
                "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? "
                f"AND rowid IN ({','.join('?' * len(chunk))})"
            )
            for (seq,) in conn.execute(sql, [term.match, *chunk]):
                has[int(seq)].add(i)
    return {
        "terms": [
            (t.key, df, t.match[1:-1])
            for t, df in zip(lexical.terms, lexical.doc_freqs, strict=True)
        ],
        "n": lexical.n_docs,
        "has": {s: frozenset(v) for s, v in has.items()},
    }


def add_terms() -> None:
    """Add :func:`term_features` to a dump made without them (each query's text is needed)."""
    data = load()
    with open(dumped("workspace"), "rb") as handle:
        ws = pickle.load(handle)
    opened: dict[str, mnemex.Store] = {}

    def enrich(name: str, queries: dict[str, Query]) -> None:
        if name not in opened:
            opened[name] = mnemex.open(WORK / f"{name}.db", embedder=embedder(), dedup=False)
        store = opened[name]
        for q in queries.values():
            lexical = plan(store.session.lexicon, q["text"], STOPWORDS, expand=True)
            q.update(term_features(store.session.conn, lexical, union(q)))

    for key in ("scifact-train", "scifact-test", "cisi-test"):
        enrich(key.split("-")[0], data[key]["q"])
    for name, queries in [("locomo", data["locomo"]["q"]), *data["foreign"].items()]:
        target = name.split("->")[-1]
        for ns, group in groupby_ns(queries).items():
            enrich(f"locomo-{ns}" if target == "locomo" else target, group)
    for queries in [ws["q"], *ws["foreign"].values()]:
        for ns, group in groupby_ns(queries).items():
            enrich(f"workspace-{ns}", group)
    for store in opened.values():
        store.close()
    with open(dumped("features"), "wb") as handle:
        pickle.dump(data, handle)
    with open(dumped("workspace"), "wb") as handle:
        pickle.dump(ws, handle)


def groupby_ns(queries: dict[str, Query]) -> dict[str, dict[str, Query]]:
    out: dict[str, dict[str, Query]] = defaultdict(dict)
    for qid, q in queries.items():
        out[q["ns"]][qid] = q
    return out


def dump(folder: Path) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    beir: dict[str, Any] = {}
    stores = {}
    for name in ("scifact", "cisi"):
        data = load_beir(folder / "beir" / name, "test")
        items = [{"id": k, "content": v, "kind": "document"} for k, v in data.corpus.items() if v]
        stores[name] = build(WORK / f"{name}.db", {"beir": items})
        for split in ("train", "test") if name == "scifact" else ("test",):
            data = load_beir(folder / "beir" / name, split)
            beir[f"{name}-{split}"] = {
                "q": features(stores[name], [(q, t, "beir") for q, t in data.queries.items()]),
                "qrels": data.qrels,
            }
            print(f"{name} {split}: {len(data.queries)} queries", flush=True)
    locomo = load_locomo(folder / "locomo" / "locomo10-dev.json")
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in locomo.turns:
        by_ns[t.namespace].append(
            {"id": t.id, "content": t.content, "created_at": t.created_at, "kind": "dialogue"}
        )
    conv: dict[str, Any] = {"q": {}, "qrels": {}, "cat": {}}
    for ns, items in by_ns.items():
        stores[ns] = build(WORK / f"locomo-{ns}.db", {ns: items})
        asked = [q for q in locomo.questions if q.namespace == ns]
        conv["q"].update(features(stores[ns], [(q.id, q.text, ns) for q in asked]))
        for q in asked:
            conv["qrels"][q.id] = dict.fromkeys(q.evidence, 1)
            conv["cat"][q.id] = q.category
    beir["locomo"] = conv
    print(f"locomo: {len(conv['q'])} questions, one store per conversation", flush=True)
    claims, cisi, questions = foreign_queries(folder)
    foreign: dict[str, dict[str, Query]] = defaultdict(dict)

    def ask(name: str, store: str, ns: str, queries: list[tuple[str, str]]) -> None:
        found = features(stores[store], [(f"{ns}|{q}", t, ns) for q, t in queries])
        foreign[name].update(found)

    for ns in by_ns:
        ask("scifact->locomo", ns, ns, claims[:40])
        ask("cisi->locomo", ns, ns, cisi[:30])
    ask("locomo->scifact", "scifact", "beir", questions)
    ask("cisi->scifact", "scifact", "beir", cisi)
    ask("locomo->cisi", "cisi", "beir", questions)
    ask("scifact->cisi", "cisi", "beir", claims)
    beir["foreign"] = dict(foreign)
    for store in stores.values():
        store.close()
    with open(dumped("features"), "wb") as handle:
        pickle.dump(beir, handle)
    print({k: len(v) for k, v in foreign.items()}, "foreign queries")
    dump_workspace(folder)


Pairs = list[tuple[str, str]]


def foreign_queries(folder: Path) -> tuple[Pairs, Pairs, Pairs]:
    """The foreign queries: 100 SciFact test claims, the CISI queries, 200 LoCoMo questions."""
    rng = random.Random(7)
    claims = rng.sample(sorted(load_beir(folder / "beir" / "scifact", "test").queries.items()), 100)
    cisi = sorted(load_beir(folder / "beir" / "cisi", "test").queries.items())
    locomo = load_locomo(folder / "locomo" / "locomo10-dev.json")
    questions = rng.sample([(q.id, q.text) for q in locomo.questions], 200)
    return claims, cisi, questions


def chunk_places(store: mnemex.Store) -> dict[int, tuple[str, int, int]]:
    """Each chunk's ``(path, start_line, end_line)`` by seq."""
    sql = (
        "SELECT c.seq, f.path, c.start_line, c.end_line FROM chunks AS c "
        "JOIN files AS f ON f.id = c.file_id"
    )
    return {int(r[0]): (r[1], int(r[2]), int(r[3])) for r in store.session.conn.execute(sql)}


def dump_workspace(folder: Path) -> None:
    """Each LoCoMo-dev conversation as a synced workspace in its own store: features of its
    questions (relevant: the chunks holding an evidence line) and of foreign queries."""
    locomo = load_locomo(folder / "locomo" / "locomo10-dev.json")
    claims, cisi, _ = foreign_queries(folder)
    rng = random.Random(11)
    written = write_all(locomo, WORK / "workspace")
    ws: dict[str, Any] = {"q": {}, "rel": {}, "foreign": defaultdict(dict)}
    for ns, where in written.items():
        store = mnemex.open(WORK / f"workspace-{ns}.db", embedder=embedder(), dedup=False)
        store.sync(where.folder, namespace=ns)
        places = chunk_places(store)
        multi = {s for s, (_, start, end) in places.items() if end > start}
        asked = [q for q in locomo.questions if q.namespace == ns]
        for qid, q in features(store, [(q.id, q.text, ns) for q in asked]).items():
            ws["q"][qid] = {**q, "multi": multi}
        for q in asked:
            lines = [where.lines[e] for e in q.evidence if e in where.lines]
            ws["rel"][q.id] = {s for s, p in places.items() if found_in_chunks([p], lines)}
        others = rng.sample([(q.id, q.text) for q in locomo.questions if q.namespace != ns], 40)
        for name, queries in (
            ("scifact->workspace", claims[:40]),
            ("cisi->workspace", cisi[:30]),
            ("other conversation->workspace", others),
        ):
            found = features(store, [(f"{ns}|{q}", t, ns) for q, t in queries])
            ws["foreign"][name].update({k: {**v, "multi": multi} for k, v in found.items()})
        print(f"workspace {ns}: {len(places)} chunks, {len(asked)} questions", flush=True)
        store.close()
    ws["foreign"] = dict(ws["foreign"])
    with open(dumped("workspace"), "wb") as handle:
        pickle.dump(ws, handle)


# -- fusion candidates -----------------------------------------------------------------


def text(q: Query, seq: int) -> float:
    raw = q["bm"].get(seq, 0.0)
    return math.tanh(raw / q["norm"]) if raw > 0 and q["norm"] > 0 else 0.0


def cosine(q: Query, seq: int) -> float:
    return max(0.0, q["cos"].get(seq, 0.0))


def union(q: Query) -> set[int]:
    return set(q["bm"]) | set(q["cos"])


def arrays(q: Query) -> tuple[list[int], np.ndarray, np.ndarray]:
    seqs = sorted(union(q))
    return (
        seqs,
        np.array([q["bm"].get(s, 0.0) for s in seqs]),
        np.array([q["cos"].get(s, -1.0) for s in seqs]),
    )


def lexical_only(q: Query) -> dict[int, float]:
    return dict(q["lex"])


def vector_only(q: Query) -> dict[int, float]:
    return dict(q["vec"])


def weighted(wv: float) -> Fusion:
    return lambda q: {s: wv * cosine(q, s) + (1 - wv) * text(q, s) for s in union(q)}


def adaptive(q: Query) -> dict[int, float]:
    """The shipped default (mnemex.search.fusion.adaptive_weight)."""
    wv = shipped.adaptive_weight(
        [text(q, s) for s, _ in q["lex"]], [max(0.0, c) for _, c in q["vec"]], 0.5, 0.5
    )
    return weighted(wv)(q)


def rrf(k: int) -> Fusion:
    def fuse(q: Query) -> dict[int, float]:
        out: dict[int, float] = defaultdict(float)
        for arm in (q["lex"], q["vec"]):
            for rank, (s, _) in enumerate(arm, 1):
                out[s] += 1 / (k + rank)
        return out

    return fuse


def zscore(depth: int | None) -> Fusion:
    """Each arm z-normalized over its own top ``depth``."""

    def fuse(q: Query) -> dict[int, float]:
        seqs, t, c = arrays(q)
        lt = np.array([r for _, r in q["lex"][:depth]] or [0.0])
        lc = np.array([r for _, r in q["vec"][:depth]] or [0.0])
        zt = (t - lt.mean()) / (lt.std() + 1e-9) if len(q["lex"]) > 1 else np.zeros_like(t)
        zc = (c - lc.mean()) / (lc.std() + 1e-9)
        return dict(zip(seqs, (0.5 * zc + 0.5 * zt).tolist(), strict=True))

    return fuse


def minmax(q: Query) -> dict[int, float]:
    seqs, t, c = arrays(q)
    lt = np.array([r for _, r in q["lex"]] or [0.0])
    lc = np.array([r for _, r in q["vec"]] or [0.0])
    nt = np.clip((t - lt.min()) / (lt.max() - lt.min() + 1e-9), 0, None) if q["lex"] else 0 * t
    nc = np.clip((c - lc.min()) / (lc.max() - lc.min() + 1e-9), 0, None)
    return dict(zip(seqs, (0.5 * nc + 0.5 * nt).tolist(), strict=True))


def combmnz(q: Query) -> dict[int, float]:
    found = [{s for s, _ in q["lex"]}, {s for s, _ in q["vec"]}]
    return {s: v * sum(s in arm for arm in found) for s, v in minmax(q).items()}


def gap(k: int) -> Fusion:
    """Each arm as (s - s_k) / (s_1 - s_k)."""

    def fuse(q: Query) -> dict[int, float]:
        seqs, t, c = arrays(q)
        out = np.zeros(len(seqs))
        for values, arm in ((t, q["lex"]), (c, q["vec"])):
            if len(arm) > 1:
                top, kth = arm[0][1], arm[min(k, len(arm)) - 1][1]
                out += 0.5 * (values - kth) / (top - kth + 1e-9)
        return dict(zip(seqs, out.tolist(), strict=True))

    return fuse


def neighbours(gamma: float, base: Fusion = adaptive) -> Fusion:
    """A chat turn also scores ``gamma`` x the better of the turns before and after it."""

    def fuse(q: Query) -> dict[int, float]:
        scores = base(q)
        ids = q["ids"]
        seq_of = {v: k for k, v in ids.items()}
        out = {}
        for s, v in scores.items():
            conv, session, n = ids[s].rsplit(":", 2)
            near = [seq_of.get(f"{conv}:{session}:{int(n) + d}") for d in (-1, 1)]
            out[s] = v + gamma * max((scores.get(x, 0.0) for x in near if x), default=0.0)
        return out

    return fuse


CANDIDATES: dict[str, Fusion] = {
    "lexical": lexical_only,
    "vector": vector_only,
    "weighted 0.5/0.5": weighted(0.5),
    "weighted 0.6/0.4": weighted(0.6),
    "weighted 0.4/0.6": weighted(0.4),
    "adaptive (default)": adaptive,
    "rrf k=60": rrf(60),
    "rrf k=10": rrf(10),
    "z-score over top 200": zscore(None),
    "z-score over top 50": zscore(50),
    "min-max": minmax,
    "CombMNZ (min-max)": combmnz,
    "score gap k=10": gap(10),
    "score gap k=100": gap(100),
}
CONVERSATION_ONLY: dict[str, Fusion] = {
    "adaptive + neighbour turns 0.3": neighbours(0.3),
    "adaptive + neighbour turns 0.5": neighbours(0.5),
}


def run_of(dump_: dict[str, Any], fuse: Fusion) -> dict[str, dict[str, float]]:
    run = {}
    for qid, q in dump_["q"].items():
        scores = fuse(q)
        order = sorted(scores, key=lambda s: (-scores[s], s))[:100]
        run[qid] = ranked_run([q["ids"][s] for s in order])
    return run


def score(dump_: dict[str, Any], fuse: Fusion, measure: str) -> tuple[float, dict[int, float]]:
    values = per_query(dump_["qrels"], run_of(dump_, fuse), [measure])
    overall = float(np.mean([v[measure] for v in values.values()]))
    cats: dict[int, list[float]] = defaultdict(list)
    for qid, v in values.items():
        if "cat" in dump_:
            cats[dump_["cat"][qid]].append(v[measure])
    return overall, {c: float(np.mean(v)) for c, v in sorted(cats.items())}


SETS = (
    ("scifact-train", "nDCG@10"),
    ("scifact-test", "nDCG@10"),
    ("cisi-test", "nDCG@10"),
    ("locomo", "R@10"),
)


def load() -> dict[str, Any]:
    with open(dumped("features"), "rb") as handle:
        return pickle.load(handle)  # type: ignore[no-any-return]


def fusion_table() -> None:
    data = load()
    print(
        "| fusion | SciFact train nDCG@10 | SciFact test nDCG@10 | CISI nDCG@10 | LoCoMo-dev R@10 | LoCoMo R@10 per category 1 / 2 / 3 / 4 |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, fuse in {**CANDIDATES, **CONVERSATION_ONLY}.items():
        cells, cats = [], {}
        for key, measure in SETS:
            if name in CONVERSATION_ONLY and key != "locomo":
                cells.append("n/a")
                continue
            value, per = score(data[key], fuse, measure)
            cells.append(f"{value:.4f}")
            cats = per or cats
        per_cat = " / ".join(f"{v:.3f}" for v in cats.values())
        print(f"| {name} | " + " | ".join(cells) + f" | {per_cat} |", flush=True)


# -- the relevance floor -----------------------------------------------------------------


Multi = tuple[float | None, float | None]
Condition = Callable[[Query, int], bool]


def gated(
    floor: Floor,
    fuse: Fusion = adaptive,
    gate: str = "tok",
    multi: Multi = (None, None),
    when: Condition | None = None,
    every: bool = False,
) -> Fusion:
    """The floor on ``fuse``; ``gate`` names the cosines the query gate reads (``tok``: each
    memory's best token window, as the pipeline's gate; ``cos``: its best window, sentence
    windows too, as the arms score and the per-hit floor reads; ``cos0``: its first window).
    ``multi`` (text alone, cosine alone) also lets the gate pass on a multi-line memory (a
    workspace chunk of more than one line) whose text score or cosine reaches it, when
    ``when`` (of the query and the memory) holds too; ``every``: on any memory."""
    multi_text, multi_cosine = multi

    def vouched(q: Query, s: int) -> bool:
        c = q[gate].get(s, -1)
        if c >= floor.query_cosine or (c >= floor.agree_cosine and text(q, s) >= floor.agree_text):
            return True
        if not every and s not in q.get("multi", ()):
            return False
        if not (multi_text is not None and text(q, s) >= multi_text) and not (
            multi_cosine is not None and c >= multi_cosine
        ):
            return False
        return when is None or when(q, s)

    def keep(q: Query) -> dict[int, float]:
        scores = fuse(q)
        if not any(vouched(q, s) for s in scores):
            return {}
        return {
            s: v
            for s, v in scores.items()
            if q["cos"].get(s, -1) >= floor.hit_cosine or text(q, s) >= floor.hit_text
        }

    return keep


# -- what a query says the store holds (conditions of the looser gate on chunks) --


def names_held(q: Query, s: int) -> bool:
    """The query names a word the store holds (its term occurs in some memory), as
    :func:`mnemex.search.floor.names_held` tells."""
    names = named_words(q["text"])
    return any(df > 0 and word in names for _, df, word in q["terms"])


def name_in_memory(q: Query, s: int) -> bool:
    """The memory holds a word the query names."""
    names = named_words(q["text"])
    return any(q["terms"][i][2] in names for i in q["has"].get(s, ()))


def term_weights(q: Query) -> list[float]:
    return [idf(df, q["n"]) for _, df, _ in q["terms"]]


def absent_at_most(share: float) -> Condition:
    """At most ``share`` of the query's IDF weight is on terms no memory of the store holds."""

    def holds(q: Query, s: int) -> bool:
        weights = term_weights(q)
        absent = sum(w for w, (_, df, _) in zip(weights, q["terms"], strict=True) if df == 0)
        return absent <= share * sum(weights)

    return holds


def coverage_at_least(share: float) -> Condition:
    """The memory holds at least ``share`` of the query's IDF weight (its content terms)."""

    def holds(q: Query, s: int) -> bool:
        weights = term_weights(q)
        return sum(weights[i] for i in q["has"].get(s, ())) >= share * sum(weights)

    return holds


def both_arms(k: int) -> Condition:
    """The memory is in both arms' top ``k``."""
    return lambda q, s: s in {x for x, _ in q["lex"][:k]} and s in {x for x, _ in q["vec"][:k]}


# -- conditions for a query written without a capital (every condition below holds only then)

_names_of: dict[str, dict[int, frozenset[str]]] = {}
_vocab: dict[str, int] = {}


def memory_names(ns: str) -> dict[int, frozenset[str]]:
    """The words each memory of the workspace store of ``ns`` writes as names."""
    if ns not in _names_of:
        with sqlite3.connect(WORK / f"workspace-{ns}.db") as conn:
            rows = conn.execute("SELECT seq, content FROM memories").fetchall()
        _names_of[ns] = {int(seq): named_words(content) for seq, content in rows}
    return _names_of[ns]


def uncased(q: Query) -> bool:
    return not any(c.isupper() for c in q["text"])


def lower_case(rule: Condition) -> Condition:
    """v3's condition on a query with a capital, ``rule`` on one without."""
    return lambda q, s: names_held(q, s) if not uncased(q) else rule(q, s)


def names_nothing(rule: Condition) -> Condition:
    """v3's condition on a query naming a word, ``rule`` on one naming nothing (written
    without a capital, or with one only where a sentence opens)."""
    return lambda q, s: names_held(q, s) if named_words(q["text"]) else rule(q, s)


def memory_writes_as_name(q: Query, s: int) -> bool:
    """The memory writes a word of the query as a name (with a capital inside a sentence)."""
    names = memory_names(q["ns"]).get(s, frozenset())
    return any(word in names for _, _, word in q["terms"])


def rare_held(share: float) -> Condition:
    """A term of the query is in at least one memory and at most ``share`` of them."""
    return lambda q, s: any(0 < df <= share * q["n"] for _, df, _ in q["terms"])


def rare_in_memory(share: float) -> Condition:
    """The memory holds a term of the query that at most ``share`` of the memories hold."""
    return lambda q, s: any(q["terms"][i][1] <= share * q["n"] for i in q["has"].get(s, ()))


def rare_coverage(share: float) -> Condition:
    """The memory holds ``share`` of the IDF weight of the query's rarer terms (the held
    terms whose IDF is at or above the median of the held terms')."""

    def holds(q: Query, s: int) -> bool:
        held = [(i, idf(df, q["n"])) for i, (_, df, _) in enumerate(q["terms"]) if df > 0]
        if not held:
            return False
        middle = float(np.median([w for _, w in held]))
        rare = [(i, w) for i, w in held if w >= middle]
        has = q["has"].get(s, frozenset())
        return sum(w for i, w in rare if i in has) >= share * sum(w for _, w in rare)

    return holds


def pieces(word: str) -> bool:
    """The model's WordPiece vocabulary lacks the word as a whole token."""
    if not _vocab:
        _vocab.update(load_vocab())
    return word not in _vocab


def pieces_held(q: Query, s: int) -> bool:
    """A word of the query the vocabulary splits into pieces is in some memory."""
    return any(df > 0 and pieces(word) for _, df, word in q["terms"])


def pieces_in_memory(q: Query, s: int) -> bool:
    """The memory holds a word of the query the vocabulary splits into pieces."""
    return any(pieces(q["terms"][i][2]) for i in q["has"].get(s, ()))


def lexical_gate(best: float) -> Fusion:
    def keep(q: Query) -> dict[int, float]:
        top = max((text(q, s) for s, _ in q["lex"]), default=0.0)
        return dict(q["lex"]) if top >= best else {}

    return keep


Row = tuple[str, Fusion]
GATES = (
    (0.30, 1.1, 1.1),
    (0.35, 1.1, 1.1),
    (0.40, 1.1, 1.1),
    (0.40, 0.25, 0.30),
    (0.40, 0.30, 0.30),
    (0.40, 0.30, 0.40),
    (0.40, 0.35, 0.30),
    (0.40, 0.35, 0.40),
    (0.40, 0.30, 0.50),
    (0.45, 0.30, 0.30),
    (0.50, 0.30, 0.50),
)
# Candidates for chunks: (query cosine, agreement cosine, agreement text), then on a
# multi-line memory (text alone, cosine alone)
CHUNK_GATES: tuple[tuple[float, float, float, Multi], ...] = (
    (0.40, 0.25, 0.40, (None, None)),
    (0.40, 0.25, 0.35, (None, None)),
    (0.40, 0.30, 0.35, (None, None)),
    (0.35, 0.30, 0.40, (None, None)),
    (0.40, 0.30, 0.40, (0.60, None)),
    (0.40, 0.30, 0.40, (0.50, None)),
    (0.40, 0.30, 0.40, (0.40, None)),
    (0.40, 0.30, 0.40, (0.30, None)),
    (0.40, 0.30, 0.40, (None, 0.35)),
    (0.40, 0.30, 0.40, (None, 0.30)),
    (0.40, 0.30, 0.40, (None, 0.25)),
    (0.40, 0.30, 0.40, (0.40, 0.30)),
    (0.40, 0.30, 0.40, (0.30, 0.25)),
    (0.40, 0.25, 0.30, (0.50, None)),
)

CONDITIONS: dict[str, tuple[str, Condition]] = {
    "named": ("the query names a word the store holds", names_held),
    "in memory": ("the memory holds a word the query names", name_in_memory),
    "absent 0.2": (
        "at most 20 % of the query's weight is on words the store lacks",
        absent_at_most(0.2),
    ),
    "absent 0.4": (
        "at most 40 % of the query's weight is on words the store lacks",
        absent_at_most(0.4),
    ),
    "coverage 0.3": ("the memory holds 30 % of the query's weight", coverage_at_least(0.3)),
    "coverage 0.5": ("the memory holds 50 % of the query's weight", coverage_at_least(0.5)),
    "both 10": ("the memory is in both arms' top 10", both_arms(10)),
    "v3 or memory names": (
        "the query names a word the store holds, or, written without a capital, the memory"
        " writes one of its words as a name",
        lower_case(memory_writes_as_name),
    ),
    "v3 or memory names, naming nothing": (
        "the query names a word the store holds, or, naming nothing, the memory writes one of"
        " its words as a name",
        names_nothing(memory_writes_as_name),
    ),
    **{
        f"v3 or rare {p}": (
            f"the query names a word the store holds, or, written without a capital, holds a"
            f" word that at most {p:.0%} of the memories hold",
            lower_case(rare_held(p)),
        )
        for p in (0.02, 0.05, 0.10)
    },
    **{
        f"v3 or rare in memory {p}": (
            f"the query names a word the store holds, or, written without a capital, the memory"
            f" holds a word of it that at most {p:.0%} of the memories hold",
            lower_case(rare_in_memory(p)),
        )
        for p in (0.02, 0.05, 0.10)
    },
    **{
        f"v3 or rare coverage {p}": (
            f"the query names a word the store holds, or, written without a capital, the memory"
            f" holds {p:.0%} of the weight of its rarer half",
            lower_case(rare_coverage(p)),
        )
        for p in (0.5, 1.0)
    },
    "v3 or pieces held": (
        "the query names a word the store holds, or, written without a capital, holds a word"
        " the model's vocabulary splits that the store holds",
        lower_case(pieces_held),
    ),
    "v3 or pieces in memory": (
        "the query names a word the store holds, or, written without a capital, the memory"
        " holds a word of it the model's vocabulary splits",
        lower_case(pieces_in_memory),
    ),
}
# The looser gate on chunks under a condition: (condition, (text alone, cosine alone), on
# every memory rather than multi-line ones only)
CONDITIONED: tuple[tuple[str, Multi, bool], ...] = (
    ("absent 0.2", (0.40, 0.30), False),
    ("absent 0.4", (0.40, 0.30), False),
    ("coverage 0.3", (0.40, 0.30), False),
    ("coverage 0.5", (0.40, 0.30), False),
    ("both 10", (0.40, 0.30), False),
    ("named", (0.40, 0.30), False),
    ("named", (0.40, 0.25), False),
    ("named", (0.40, 0.35), False),
    ("named", (0.30, 0.30), False),
    ("named", (None, 0.30), False),
    ("named", (0.40, None), False),
    ("named", (0.40, 0.30), True),
    ("in memory", (0.40, 0.30), False),
    ("in memory", (0.40, 0.30), True),
    *(
        (name, (0.40, 0.30), False)
        for name in (
            "v3 or memory names",
            "v3 or memory names, naming nothing",
            *(f"v3 or rare {p}" for p in (0.02, 0.05, 0.10)),
            *(f"v3 or rare in memory {p}" for p in (0.02, 0.05, 0.10)),
            *(f"v3 or rare coverage {p}" for p in (0.5, 1.0)),
            "v3 or pieces held",
            "v3 or pieces in memory",
        )
    ),
)

SHIPPED = ("v3 or memory names, naming nothing", (0.40, 0.30), False)  # floor-v5
FLOOR_V4 = ("v3 or memory names", (0.40, 0.30), False)


def floor_label(floor: Floor, multi: Multi = (None, None)) -> str:
    qc, ac, at = floor.query_cosine, floor.agree_cosine, floor.agree_text
    label = f"cosine ≥ {qc}" + (f", or ≥ {ac} with text ≥ {at}" if ac <= 1 else "")
    alone = [f"text ≥ {multi[0]}"] * (multi[0] is not None)
    alone += [f"cosine ≥ {multi[1]}"] * (multi[1] is not None)
    return label + (f", or {' or '.join(alone)} on a multi-line memory" if alone else "")


def floor_rows() -> list[Row]:
    shipped_floor = CALIBRATED["all-minilm-l6-v2"]
    hit = (shipped_floor.hit_cosine, shipped_floor.hit_text)
    rows: list[Row] = [("no floor (adaptive)", adaptive)]
    for qc, ac, at in GATES:
        floor = Floor(qc, ac, at, *hit)
        label = floor_label(floor)
        if floor == shipped_floor:
            label += " (floor-v2: every memory)"
        rows.append((label, gated(floor)))
        if floor == shipped_floor:
            label = "the same, the query gate on each memory's best window (sentences too)"
            rows.append((label, gated(floor, gate="cos")))
            label = "the same, the query gate on each memory's first window"
            rows.append((label, gated(floor, gate="cos0")))
    for qc, ac, at, multi in CHUNK_GATES:
        floor = Floor(qc, ac, at, *hit)
        rows.append(("*chunks:* " + floor_label(floor, multi), gated(floor, multi=multi)))
    default = (0.40, 0.30, 0.40)
    for when, multi, every in CONDITIONED:
        floor = Floor(*default, *hit)
        label = floor_label(floor, multi).replace(
            "a multi-line memory", "any memory" if every else "a multi-line memory"
        )
        label = f"*chunks, when {CONDITIONS[when][0]}:* " + label
        if (when, multi, every) == SHIPPED:
            label += " **(default, floor-v5)**"
        elif (when, multi, every) == FLOOR_V4:
            label += " (floor-v4)"
        rows.append((label, gated(floor, multi=multi, when=CONDITIONS[when][1], every=every)))
    for best in (0.3, 0.4, 0.5):
        rows.append((f"lexical only: best text score ≥ {best}", lexical_gate(best)))
    return rows


def found_at(ws: dict[str, Any], fuse: Fusion, k: int = 5) -> float:
    """Workspace found@k: a question is found when one of its first k chunks is relevant."""
    found = []
    for qid, q in ws["q"].items():
        scores = fuse(q)
        order = sorted(scores, key=lambda s: (-scores[s], s))[:k]
        found.append(any(s in ws["rel"][qid] for s in order))
    return float(np.mean(found))


SCIENCE = ("scifact->workspace", "cisi->workspace")


def floor_row(data: dict[str, Any], ws: dict[str, Any], fuse: Fusion) -> list[float]:
    """Share of foreign queries keeping a hit per pair, then science to the workspaces, all
    foreign (those two), other conversations' questions to each workspace; in-domain values
    per set, then workspace found@1 / found@5."""
    kept = {n: [bool(fuse(q)) for q in data["foreign"][n].values()] for n in data["foreign"]}
    to_ws = [bool(fuse(q)) for n in SCIENCE for q in ws["foreign"][n].values()]
    everything = [x for v in kept.values() for x in v] + to_ws
    chat = [bool(fuse(q)) for q in ws["foreign"]["other conversation->workspace"].values()]
    rates = [float(np.mean(v)) for v in kept.values()]
    rates += [np.mean(to_ws), np.mean(everything), np.mean(chat)]
    values = [score(data[key], fuse, measure)[0] for key, measure in SETS]
    return rates + values + [found_at(ws, fuse, 1), found_at(ws, fuse, 5)]


def floor_table() -> None:
    data = load()
    with open(dumped("workspace"), "rb") as handle:
        ws = pickle.load(handle)
    names = list(data["foreign"])
    print(
        "| floor (query gate) | "
        + " | ".join(names)
        + " | foreign → workspace | all foreign | other conversation → workspace"
        + " | SciFact train | SciFact test | CISI | LoCoMo R@10 | workspace found@1 | found@5 |"
    )
    print("| --- |" + " ---: |" * (len(names) + 9))
    base = floor_row(data, ws, adaptive)
    lex_base = floor_row(data, ws, lexical_only)
    pairs = len(names) + 3
    for label, fuse in floor_rows():
        against = lex_base if label.startswith("lexical only") else base
        row = floor_row(data, ws, fuse)
        deltas = [v - b for v, b in zip(row[pairs:], against[pairs:], strict=True)]
        print(
            f"| {label} | "
            + " | ".join(f"{r:.1%}" for r in row[:pairs])
            + " | "
            + " | ".join(f"{d:+.4f}" for d in deltas)
            + " |",
            flush=True,
        )
    print(
        "no floor, absolute: workspace found@1 / found@5 "
        f"{base[-2]:.4f} / {base[-1]:.4f} ({len(ws['q'])} questions); "
        + ", ".join(f"{n} {len(v)}" for n, v in ws["foreign"].items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["dump", "dump-workspace", "terms", "fusion", "floor"])
    parser.add_argument("--data")
    parser.add_argument(
        "--case",
        choices=["lower", "sentence"],
        help="every query recased: lower-cased, or sentence-cased (dump, floor: own files)",
    )
    parser.add_argument("--lower", action="store_true", help="the same as --case lower")
    args = parser.parse_args()
    global CASE
    CASE = "lower" if args.lower else args.case
    if args.step == "dump":
        dump(data_dir(args.data))
    elif args.step == "dump-workspace":
        dump_workspace(data_dir(args.data))
    elif args.step == "terms":
        add_terms()
    elif args.step == "fusion":
        fusion_table()
    else:
        floor_table()


if __name__ == "__main__":
    main()
