"""Retrieval quality on the development data: SciFact (BEIR) and LoCoMo-dev.

    python benchmarks/eval_quality.py [--data DIR]

Runs ``mnemex eval`` for the lexical mode with query shaping (the default)
and exact scoring, and writes the table to RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import data_dir, machine, write_section
from mnemex.eval.beir import run_beir
from mnemex.eval.locomo import run_locomo
from mnemex.eval.runner import Spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder with beir/scifact and locomo (see common.py)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    folder = data_dir(args.data)
    rows = []
    for label, budget in (("lexical (default, shaped)", None), ("lexical exact", 0)):
        spec = Spec(mode="lexical", lexical_budget=budget)
        beir = run_beir(folder / "beir" / "scifact", spec=spec, progress=False)
        locomo = run_locomo(folder / "locomo" / "locomo10-dev.json", spec=spec, progress=False)
        rows.append((label, beir, locomo))
        m, lm = beir["metrics"], locomo["metrics"]
        print(
            f"{label}: SciFact nDCG@10 {m['nDCG@10']:.4f} R@100 {m['R@100']:.4f} "
            f"(p50 {beir['latency_ms']['p50']:.1f} ms); LoCoMo-dev R@5 {lm['R@5']:.4f} "
            f"R@10 {lm['R@10']:.4f}",
            flush=True,
        )
    lines = [
        "## Retrieval quality (`benchmarks/eval_quality.py`)",
        "",
        f"Machine: {machine()}",
        "",
        "SciFact: BEIR test split, 300 queries over 5,183 abstracts (title + text as one memory). "
        "LoCoMo-dev: 5 conversations, 2,760 turns as memories in one namespace per conversation, "
        "760 questions of categories 1-4; a hit is a turn named in the question's evidence. "
        "Metrics by ir-measures (trec_eval); latency is per query for the top 100 ids, no snippets.",
        "",
        "| mode | SciFact nDCG@10 | R@10 | R@100 | MRR@10 | p50 | LoCoMo R@5 | R@10 | nDCG@10 | p50 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, beir, locomo in rows:
        m, lm = beir["metrics"], locomo["metrics"]
        lines.append(
            f"| {label} | {m['nDCG@10']:.4f} | {m['R@10']:.4f} | {m['R@100']:.4f} | "
            f"{m['RR@10']:.4f} | {beir['latency_ms']['p50']:.1f} ms | {lm['R@5']:.4f} | "
            f"{lm['R@10']:.4f} | {lm['nDCG@10']:.4f} | {locomo['latency_ms']['p50']:.1f} ms |"
        )
    cats = rows[0][2]["per_category"]
    lines += [
        "",
        "LoCoMo-dev per category (default): "
        + "; ".join(
            f"category {c}: {v['questions']} questions, R@5 {v['R@5']:.4f}, R@10 {v['R@10']:.4f}"
            for c, v in cats.items()
        )
        + ".",
        "",
        "Published BM25 on SciFact: 0.665 (BEIR paper, Elasticsearch) to 0.69 (Anserini variants).",
    ]
    if not args.no_write:
        write_section("eval_quality", "\n".join(lines))
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
