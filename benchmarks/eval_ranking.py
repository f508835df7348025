"""Ranking stages for agents on LoCoMo-dev: each stage on and off, recall within a budget.

    python benchmarks/eval_ranking.py [--data DIR] [--lexical-only]

Every dialogue turn is a memory created at its session's date, in its
conversation's namespace; each question (categories 1-4) is a query. For
lexical and hybrid search (local model) it measures evidence recall@5/@10
with each ranking stage (confidence, decay, MMR with Jaccard or cosine,
thresholds) switched on alone; then what ``recall`` puts in a 500-token
block against plain top-5 search, and the tokens each costs; then how the
minimum-score thresholds would cut evidence; then how many distinct
dialogue turns write-time dedup would merge (all of them are false merges or
verbatim repeats). Writes the tables to RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import CACHE, data_dir, machine, write_section
from mnemex.eval.data import load_locomo
from mnemex.search.rank import age_days
from mnemex.search.recall import count_chars, format_age, render, render_line
from mnemex.store import Store
from mnemex.text import utcnow

STAGES: list[tuple[str, dict[str, Any]]] = [
    ("no stage", {"confidence": False, "decay": False, "mmr": False, "threshold": False}),
    ("confidence", {"confidence": True, "decay": False, "mmr": False, "threshold": False}),
    ("decay (30 d)", {"confidence": False, "decay": True, "mmr": False, "threshold": False}),
    ("MMR λ 0.7", {"confidence": False, "decay": False, "mmr": True, "threshold": False}),
    ("defaults", {}),
    ("defaults, no query expansion", {"expand": False}),
]
WINDOW_TURNS = 8  # turns of one session per memory in the long-memory setting


def windows(turns: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """Longer memories: each run of ``WINDOW_TURNS`` turns of a session becomes one memory.

    Returns the windows (as turns) and the window id of every turn id.
    """
    from mnemex.eval.data import Turn

    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for t in turns:
        session = t.id.split(":")[1]  # "conv-26:D3:7" -> "D3"
        groups[(t.namespace, session)].append(t)
    out, window_of = [], {}
    for (ns, session), members in groups.items():
        for start in range(0, len(members), WINDOW_TURNS):
            part = members[start : start + WINDOW_TURNS]
            ident = f"{ns}:{session}:w{start // WINDOW_TURNS}"
            out.append(Turn(ns, ident, "\n".join(t.content for t in part), part[0].created_at))
            window_of.update((t.id, ident) for t in part)
    return out, window_of


def build(path: Path, turns: list[Any], embed: bool) -> Store:
    fresh = not path.exists()
    store = mnemex.open(path, embedder="local" if embed else "none", dedup=False)
    if fresh:
        by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for t in turns:
            by_ns[t.namespace].append(
                {"id": t.id, "content": t.content, "created_at": t.created_at, "kind": "dialogue"}
            )
        for ns, items in by_ns.items():
            store.add_many(items, namespace=ns)
    return store


def recall_at(found: list[str], evidence: set[str], k: int) -> float:
    return len(evidence & set(found[:k])) / len(evidence)


def stage_table(store: Store, questions: list[Any], mode: str, settings: dict[str, Any]) -> dict:
    out: dict[str, dict[str, float]] = {}
    for name, switches in STAGES:
        if mode == "lexical" and name == "MMR λ 0.7":
            variants = [(name + " (Jaccard)", "jaccard")]
        elif name == "MMR λ 0.7":
            variants = [(name + " (Jaccard)", "jaccard"), (name + " (cosine)", "cosine")]
        else:
            variants = [(name, None)]
        for label, similarity in variants:
            s = store
            if similarity is not None:
                s = mnemex.open(store.path, **settings, mmr_similarity=similarity, dedup=False)
            r5, r10 = [], []
            for q in questions:
                hits = s.search(q.text, 10, mode=mode, namespace=q.namespace, **switches).hits
                found = [h.id for h in hits]
                r5.append(recall_at(found, set(q.evidence), 5))
                r10.append(recall_at(found, set(q.evidence), 10))
            out[label] = {"R@5": statistics.fmean(r5), "R@10": statistics.fmean(r10)}
            if s is not store:
                s.close()
    return out


def budget_table(
    store: Store, questions: list[Any], mode: str, window_of: dict[str, str] | None = None
) -> dict[str, dict[str, float]]:
    """Recall block (500 tokens, 5 memories) against plain top-5 rendered the same way.

    With ``window_of``, memories are windows of turns and a question's
    evidence is the set of windows holding its evidence turns.
    """
    now = utcnow()
    rows: dict[str, dict[str, list[float]]] = {
        "plain top-5": defaultdict(list),
        "plain top-5 cut at 500 tokens": defaultdict(list),
        "recall, 500 tokens": defaultdict(list),
        "recall, 500 tokens, MMR": defaultdict(list),
        "recall, 500 tokens, decay": defaultdict(list),
    }
    for q in questions:
        evidence = set(q.evidence) if window_of is None else {window_of[e] for e in q.evidence}
        hits = store.search(q.text, 5, mode=mode, namespace=q.namespace).hits
        got = store.get([h.id for h in hits], namespace=q.namespace).memories if hits else ()
        block = render(
            [
                render_line(
                    m.kind, m.content, m.confidence, format_age(age_days(m.created_at, now))
                )
                for m in got
            ]
        )
        results = {
            "plain top-5": ([h.id for h in hits], count_chars(block)),
            "plain top-5 cut at 500 tokens": cut_at(block, [m.id for m in got], 500),
        }
        for label, extra in (
            ("recall, 500 tokens", {}),
            ("recall, 500 tokens, MMR", {"mmr": True}),
            ("recall, 500 tokens, decay", {"decay": True}),
        ):
            r = store.recall(q.text, 500, 5, mode=mode, namespace=q.namespace, **extra)
            results[label] = (list(r.ids), r.tokens)
        for label, (ids, tokens) in results.items():
            inside = evidence & set(ids)
            rows[label]["any evidence inside"].append(1.0 if inside else 0.0)
            rows[label]["evidence recall"].append(len(inside) / len(evidence))
            rows[label]["tokens"].append(tokens)
            rows[label]["over 500"].append(1.0 if tokens > 500 else 0.0)
    return {
        label: {k: statistics.fmean(v) for k, v in values.items()} for label, values in rows.items()
    }


def cut_at(block: str, ids: list[str], budget: int) -> tuple[list[str], int]:
    """A block cut at ``budget`` tokens: the memories whose line starts inside, and its size."""
    lines = block.split("\n")
    first = len(lines) - len(ids)  # memory lines come last, one a memory
    inside = [
        ident for n, ident in enumerate(ids) if count_chars("\n".join(lines[: first + n])) < budget
    ]
    return inside, min(count_chars(block), budget)


def threshold_table(store: Store, questions: list[Any], mode: str) -> dict[str, Any]:
    """Evidence hits in the top 10 and the arm scores they had."""
    text_scores, cosines, all_text, all_cos = [], [], [], []
    for q in questions:
        hits = store.search(
            q.text, 10, mode=mode, namespace=q.namespace, explain=True, threshold=False
        ).hits
        for h in hits:
            e = h.explain or {}
            lex = (e.get("lexical") or {}).get("score")
            cos = (e.get("vector") or {}).get("cosine")
            if lex is not None:
                all_text.append(lex)
            if cos is not None:
                all_cos.append(cos)
            if h.id in q.evidence:
                if lex is not None:
                    text_scores.append(lex)
                if cos is not None:
                    cosines.append(cos)
    out: dict[str, Any] = {}
    for name, relevant, every, cuts in (
        ("normalized BM25", text_scores, all_text, (0.05, 0.1, 0.2, 0.3)),
        ("cosine", cosines, all_cos, (0.1, 0.2, 0.3, 0.4)),
    ):
        if not relevant:
            continue
        out[name] = {
            str(c): {
                "evidence hits lost": sum(s < c for s in relevant) / len(relevant),
                "all hits cut": sum(s < c for s in every) / len(every),
            }
            for c in cuts
        }
    return out


def dedup_table(turns: list[Any], embed: bool, folder: Path) -> dict[str, Any]:
    """Write every turn through write-time dedup; count merges (turns are distinct utterances)."""
    path = folder / f"dedup-{'hybrid' if embed else 'lexical'}.db"
    path.unlink(missing_ok=True)
    store = mnemex.open(path, embedder="local" if embed else "none")
    merged: dict[str, int] = defaultdict(int)
    examples = []
    started = time.perf_counter()
    for t in turns:
        added = store.remember(t.content, created_at=t.created_at, namespace=t.namespace)
        if added.deduplicated:
            merged[added.by or "?"] += 1
            if len(examples) < 6 and added.by != "exact":
                kept = store.get(added.id, namespace=t.namespace).memories[0].content
                examples.append((t.content[:90], kept[:90], added.by, added.similarity))
    seconds = time.perf_counter() - started
    store.close()
    path.unlink(missing_ok=True)
    return {
        "turns": len(turns),
        "merged": dict(merged),
        "per_write_ms": 1000 * seconds / len(turns),
        "examples": examples,
    }


def fmt(v: float) -> str:
    return f"{v:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data")
    parser.add_argument("--lexical-only", action="store_true")
    args = parser.parse_args()
    folder = data_dir(args.data)
    data = load_locomo(folder / "locomo" / "locomo10-dev.json")
    questions = data.questions
    CACHE.mkdir(parents=True, exist_ok=True)
    modes = ["lexical"] if args.lexical_only else ["lexical", "hybrid"]
    lines = [
        f"LoCoMo-dev: {len(data.turns)} turns, {len(questions)} questions (categories 1-4). "
        "Command: `python benchmarks/eval_ranking.py`.",
        "",
    ]
    for mode in modes:
        embed = mode == "hybrid"
        settings = {"embedder": "local" if embed else "none"}
        store = build(CACHE / f"ranking-{mode}.db", data.turns, embed)
        started = time.perf_counter()
        stages = stage_table(store, questions, mode, settings)
        budget = budget_table(store, questions, mode)
        thresholds = threshold_table(store, questions, mode)
        store.close()
        long_turns, window_of = windows(data.turns)
        store = build(CACHE / f"ranking-windows-{mode}.db", long_turns, embed)
        long_budget = budget_table(store, questions, mode, window_of)
        mean_chars = statistics.fmean(len(t.content) for t in long_turns)
        store.close()
        print(f"{mode}: {time.perf_counter() - started:.0f} s")
        lines += [
            f"### {mode}: evidence recall with each stage alone",
            "",
            "| stage | R@5 | R@10 |",
            "| --- | --- | --- |",
            *(f"| {k} | {fmt(v['R@5'])} | {fmt(v['R@10'])} |" for k, v in stages.items()),
            "",
            f"### {mode}: what the agent reads (5 memories at most)",
            "",
            "| block | questions with evidence inside | evidence recall | mean tokens | over 500 tokens |",
            "| --- | --- | --- | --- | --- |",
            *(
                f"| {k} | {fmt(v['any evidence inside'])} | {fmt(v['evidence recall'])} | "
                f"{v['tokens']:.0f} | {v['over 500']:.1%} |"
                for k, v in budget.items()
            ),
            "",
            f"### {mode}: what the agent reads when memories are long "
            f"({len(long_turns)} memories of {WINDOW_TURNS} turns, {mean_chars / 4:.0f} tokens on average)",
            "",
            "| block | questions with evidence inside | evidence recall | mean tokens | over 500 tokens |",
            "| --- | --- | --- | --- | --- |",
            *(
                f"| {k} | {fmt(v['any evidence inside'])} | {fmt(v['evidence recall'])} | "
                f"{v['tokens']:.0f} | {v['over 500']:.1%} |"
                for k, v in long_budget.items()
            ),
            "",
            f"### {mode}: share of evidence hits (top 10) a threshold would remove",
            "",
            "| arm | threshold | evidence hits lost | all hits cut |",
            "| --- | --- | --- | --- |",
            *(
                f"| {arm} | {cut} | {v['evidence hits lost']:.1%} | {v['all hits cut']:.1%} |"
                for arm, table in thresholds.items()
                for cut, v in table.items()
            ),
            "",
        ]
        print("\n".join(lines[-50:]))
    for embed in [False] if args.lexical_only else [False, True]:
        report = dedup_table(data.turns, embed, CACHE)
        label = "with the local model" if embed else "lexical only"
        lines += [
            f"### write-time dedup over every turn, {label}",
            "",
            f"{report['turns']} turns written one by one with `remember`: merged "
            f"{sum(report['merged'].values())} ({report['merged']}); "
            f"{report['per_write_ms']:.1f} ms per write.",
            "",
            *(f"- `{a}` → `{b}` ({by} {s:.2f})" for a, b, by, s in report["examples"]),
            "",
        ]
        print("\n".join(lines[-10:]))
    lines.append(f"Machine: {machine()}")
    write_section("eval_ranking", "\n".join(lines))


if __name__ == "__main__":
    main()
