"""A vector per sentence: long memories read sentence by sentence by the vector arm.

    python benchmarks/eval_sentences.py dump [--data DIR]   # stores, features, sentence vectors
    python benchmarks/eval_sentences.py table               # every variant; writes RESULTS.md

The local model reads a memory as one vector (one per 254-token window). A
SciFact claim is usually supported by one sentence of an abstract, which that
vector blurs. ``dump`` builds a store per dataset under benchmarks/.cache/sentences
(SciFact, CISI, and each LoCoMo-dev conversation on its own, as
``eval_fusion.py`` does), records each arm's candidates per query
(``eval_fusion.features``), and embeds every sentence of every memory twice:
alone, and after the memory's first line (a BEIR title; chat turns have
none). ``table`` then scores each memory by its whole vector (*doc*, what
ships), its best sentence, or a mix, takes the vector arm's top 200 by that
score (BM25 of the rows the lexical arm missed computed as the pipeline does),
and fuses with the shipped adaptive rule and a few fixed weights. The thread
stage is not applied (LoCoMo numbers compare with ``eval_fusion.py``'s).
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import eval_fusion as ef
import mnemex
from common import CACHE, data_dir, machine, write_section
from mnemex.eval.data import load_beir, load_locomo
from mnemex.index.fts import bm25_of, plan
from mnemex.index.stopwords import STOPWORDS
from mnemex.search import fusion as shipped
from mnemex.text import clean_query

WORK = CACHE / "sentences"
POOL = 200
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")
# A memory longer than one window of the local model (254 WordPiece tokens, len / 4).
LONG_CHARS = 4 * 254
Score = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
VARIANTS: dict[str, Score] = {  # (doc, best sentence, best first-line + sentence, is long)
    "doc (shipped)": lambda a, b, c, long: a,
    "best sentence": lambda a, b, c, long: b,
    "best first line + sentence": lambda a, b, c, long: c,
    "max(doc, sentence)": lambda a, b, c, long: np.maximum(a, b),
    "max(doc, first line + sentence)": lambda a, b, c, long: np.maximum(a, c),
    "0.5 doc + 0.5 sentence": lambda a, b, c, long: 0.5 * a + 0.5 * b,
    "0.5 doc + 0.5 first line + sentence": lambda a, b, c, long: 0.5 * a + 0.5 * c,
    "0.7 doc + 0.3 first line + sentence": lambda a, b, c, long: 0.7 * a + 0.3 * c,
    "0.7 doc + 0.3 first line + sentence, long memories only": lambda a, b, c, long: np.where(
        long, 0.7 * a + 0.3 * c, a
    ),
    "max(doc, first line + sentence), long memories only": lambda a, b, c, long: np.where(
        long, np.maximum(a, c), a
    ),
}


def adaptive_from(vector_weight: float) -> ef.Fusion:
    def fuse(q: ef.Query) -> dict[int, float]:
        wv = shipped.adaptive_weight(
            [ef.text(q, s) for s, _ in q["lex"]],
            [max(0.0, c) for _, c in q["vec"]],
            vector_weight,
            1 - vector_weight,
        )
        return ef.weighted(wv)(q)

    return fuse


FUSERS: dict[str, ef.Fusion] = {
    "vector arm": ef.vector_only,
    "adaptive (shipped)": ef.adaptive,
    "adaptive from 0.6": adaptive_from(0.6),
    "weighted 0.5": ef.weighted(0.5),
    "weighted 0.6": ef.weighted(0.6),
}


def sentences(text: str, titled: bool) -> tuple[str, list[str]]:
    """The memory's first line (when ``titled`` and there is more) and its sentences."""
    title, _, body = text.partition("\n")
    if not titled or not body.strip():
        title, body = "", text
    return title.strip(), [s.strip() for s in SENTENCE.split(body) if s.strip()]


def sentence_vectors(store: mnemex.Store, titled: bool) -> dict[str, Any]:
    """Every sentence's vector, alone and after its memory's first line, grouped by seq."""
    rows = store.session.conn.execute("SELECT seq, content FROM memories ORDER BY seq").fetchall()
    owner, alone, headed = [], [], []
    for seq, content in rows:
        title, parts = sentences(content, titled)
        for part in parts or [content]:
            owner.append(seq)
            alone.append(part)
            headed.append(f"{title}. {part}" if title else part)
    emb = ef.embedder()

    def embed(texts: list[str]) -> np.ndarray:
        return np.vstack([emb.embed(texts[i : i + 512]) for i in range(0, len(texts), 512)])

    vs = embed(alone)
    vt = vs if not titled else embed(headed)
    return {"owner": np.array(owner), "vs": vs, "vt": vt}


def dump(folder: Path) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    ef.WORK = WORK
    out: dict[str, Any] = {}
    for name in ("scifact", "cisi"):
        data = load_beir(folder / "beir" / name, "test")
        items = [{"id": k, "content": v, "kind": "document"} for k, v in data.corpus.items() if v]
        with ef.build(WORK / f"{name}.db", {"beir": items}) as store:
            for split in ("train", "test") if name == "scifact" else ("test",):
                d = load_beir(folder / "beir" / name, split)
                asked = [(q, t, "beir") for q, t in d.queries.items()]
                out[f"{name}-{split}"] = {"q": ef.features(store, asked), "qrels": d.qrels}
                out[f"{name}-{split}"]["texts"] = d.queries
            out[name] = sentence_vectors(store, titled=True)
        print(f"{name}: {len(out[name]['owner'])} sentences", flush=True)
    locomo = load_locomo(folder / "locomo" / "locomo10-dev.json")
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in locomo.turns:
        by_ns[t.namespace].append(
            {"id": t.id, "content": t.content, "created_at": t.created_at, "kind": "dialogue"}
        )
    for ns, items in by_ns.items():
        asked = [q for q in locomo.questions if q.namespace == ns]
        with ef.build(WORK / f"locomo-{ns}.db", {ns: items}) as store:
            out[f"locomo-{ns}"] = {
                "q": ef.features(store, [(q.id, q.text, ns) for q in asked]),
                "qrels": {q.id: dict.fromkeys(q.evidence, 1) for q in asked},
                "cat": {q.id: q.category for q in asked},
                "texts": {q.id: q.text for q in asked},
            }
            out[ns] = sentence_vectors(store, titled=False)
        print(f"{ns}: {len(out[ns]['owner'])} sentences", flush=True)
    with open(WORK / "features.pkl", "wb") as handle:
        pickle.dump(out, handle)


def rescored(
    data: dict[str, Any], store_name: str, split: str, sentences_of: str
) -> dict[str, dict[str, Any]]:
    """For each variant, the split's queries with the vector arm scored by it
    (``sentences_of``: the key of the store's sentence vectors)."""
    vectors, asked = data[sentences_of], data[split]
    owner = vectors["owner"]
    starts = np.r_[0, np.flatnonzero(np.diff(owner)) + 1]
    group = owner[starts]
    out: dict[str, dict[str, Any]] = {v: {"q": {}, "qrels": asked["qrels"]} for v in VARIANTS}
    if "cat" in asked:
        for v in out.values():
            v["cat"] = asked["cat"]
    with mnemex.open(WORK / f"{store_name}.db", embedder=ef.embedder(), dedup=False) as store:
        conn, lexicon = store.session.conn, store.session.lexicon
        index = store.session.vectors(ef.embedder().dim)
        assert index.size == len(group), "every memory has a vector"
        sizes = dict(conn.execute("SELECT seq, length(content) FROM memories").fetchall())
        long = np.array([sizes[int(seq)] > LONG_CHARS for seq in group])
        qids = list(asked["q"])
        texts = [clean_query(asked["texts"][q]) for q in qids]
        qvs = ef.embedder().embed(texts)
        qvs /= np.linalg.norm(qvs, axis=1, keepdims=True)
        for qid, text, qv in zip(qids, texts, qvs, strict=True):
            whole = index.cosines_of(group.tolist(), qv)
            a = np.array([whole.get(int(s), -1.0) for s in group])
            b = np.maximum.reduceat(vectors["vs"] @ qv, starts)
            c = np.maximum.reduceat(vectors["vt"] @ qv, starts)
            lexical = plan(lexicon, text, STOPWORDS, expand=True)
            for name, score in VARIANTS.items():
                values = score(a, b, c, long)
                vec = [(int(group[i]), float(values[i])) for i in np.argsort(-values)[:POOL]]
                base = asked["q"][qid]
                bm = dict(base["bm"])
                bm.update(bm25_of(conn, lexicon, lexical, [s for s, _ in vec if s not in bm]))
                full = dict(zip(group.tolist(), values.tolist(), strict=True))
                cos = {s: full[s] for s in set(bm) | {s for s, _ in vec}}
                out[name]["q"][qid] = {**base, "vec": vec, "bm": bm, "cos": cos}
    return out


def merged(parts: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The LoCoMo conversations' rescored queries as one set per variant."""
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for name, d in part.items():
            into = out.setdefault(name, {"q": {}, "qrels": {}, "cat": {}})
            for key in ("q", "qrels", "cat"):
                into[key].update(d[key])
    return out


def table() -> None:
    with open(WORK / "features.pkl", "rb") as handle:
        data = pickle.load(handle)
    sets = {
        "SciFact train nDCG@10": rescored(data, "scifact", "scifact-train", "scifact"),
        "SciFact test nDCG@10": rescored(data, "scifact", "scifact-test", "scifact"),
        "CISI nDCG@10": rescored(data, "cisi", "cisi-test", "cisi"),
        "LoCoMo-dev R@10": merged(
            [rescored(data, f"locomo-{ns}", f"locomo-{ns}", ns) for ns in conversations(data)]
        ),
    }
    lines = [f"| vector score | fusion | {' | '.join(sets)} |", "| --- | --- |" + " ---: |" * 4]
    for variant in VARIANTS:
        for fusion, fuse in FUSERS.items():
            cells = []
            for label, by_variant in sets.items():
                measure = "R@10" if label.startswith("LoCoMo") else "nDCG@10"
                cells.append(f"{ef.score(by_variant[variant], fuse, measure)[0]:.4f}")
            lines.append(f"| {variant} | {fusion} | {' | '.join(cells)} |")
            print(lines[-1], flush=True)
    sizes = ", ".join(f"{k} {len(data[k]['owner']):,}" for k in ("scifact", "cisi"))
    body = "\n".join(
        [
            "## A vector per sentence (`benchmarks/eval_sentences.py`, issue 11)",
            "",
            f"Machine: {machine()}. Sentences embedded: {sizes}, LoCoMo-dev "
            f"{sum(len(data[ns]['owner']) for ns in conversations(data)):,}. "
            "`python benchmarks/eval_sentences.py dump --data ../shared/data`, then `table`. "
            "No relevance floor and no thread stage (as `eval_fusion.py`).",
            "",
            *lines,
        ]
    )
    write_section("eval_sentences", body)


def conversations(data: dict[str, Any]) -> list[str]:
    return sorted(k.removeprefix("locomo-") for k in data if k.startswith("locomo-"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("dump", "table"))
    parser.add_argument("--data")
    args = parser.parse_args()
    if args.command == "dump":
        dump(data_dir(args.data))
    else:
        table()


if __name__ == "__main__":
    main()
