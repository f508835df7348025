"""Retrieval quality of every mode and fusion on SciFact (train and test) and LoCoMo-dev.

    python benchmarks/eval_quality.py [--data DIR]

Defaults are chosen on SciFact's train split and LoCoMo-dev, then reported on
SciFact's test split. The embedded stores are kept under benchmarks/.cache so
that a re-run only re-queries. Writes a table to RESULTS.md and a plot
(benchmarks/quality.png).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import CACHE, ROOT, data_dir, machine, write_section
from mnemex.config import DEFAULT_FUSION, TEXT_WEIGHT, VECTOR_WEIGHT
from mnemex.eval.beir import run_beir
from mnemex.eval.locomo import run_locomo
from mnemex.eval.runner import Spec

CONFIGS: list[tuple[str, Spec]] = [
    ("lexical", Spec(mode="lexical")),
    ("lexical, exact BM25", Spec(mode="lexical", lexical_budget=0)),
    ("vector", Spec(mode="vector")),
    ("hybrid rrf (k=60)", Spec(mode="hybrid", fusion="rrf")),
    ("hybrid weighted 0.7/0.3", Spec(mode="hybrid", fusion="weighted", weights=(0.7, 0.3))),
    ("hybrid weighted 0.5/0.5", Spec(mode="hybrid", fusion="weighted", weights=(0.5, 0.5))),
    ("hybrid weighted 0.3/0.7", Spec(mode="hybrid", fusion="weighted", weights=(0.3, 0.7))),
    ("hybrid adaptive 0.5/0.5", Spec(mode="hybrid", fusion="adaptive", weights=(0.5, 0.5))),
]


def plot(rows: list[tuple[str, dict, dict, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r[0] for r in rows]
    series = [
        ("SciFact test nDCG@10", [r[2]["metrics"]["nDCG@10"] for r in rows]),
        ("SciFact train nDCG@10", [r[1]["metrics"]["nDCG@10"] for r in rows]),
        ("LoCoMo-dev recall@10", [r[3]["metrics"]["R@10"] for r in rows]),
    ]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    width = 0.27
    for i, (name, values) in enumerate(series):
        xs = [x + (i - 1) * width for x in range(len(labels))]
        bars = ax.bar(xs, values, width, label=name)
        ax.bar_label(bars, fmt="%.3f", fontsize=6, rotation=90, padding=2)
    ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(0.4, 0.82)
    ax.set_title("Quality per mode and fusion (local all-MiniLM-L6-v2)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder with beir/scifact and locomo (see common.py)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    folder = data_dir(args.data)
    CACHE.mkdir(parents=True, exist_ok=True)
    scifact_db = CACHE / "scifact-eval.db"
    locomo_db = CACHE / "locomo-eval.db"
    rows = []
    for label, spec in CONFIGS:
        train = run_beir(
            folder / "beir" / "scifact", split="train", spec=spec, db=scifact_db, progress=False
        )
        test = run_beir(folder / "beir" / "scifact", spec=spec, db=scifact_db, progress=False)
        locomo = run_locomo(
            folder / "locomo" / "locomo10-dev.json", spec=spec, db=locomo_db, progress=False
        )
        for report in (train, test, locomo):
            assert report["modes_used"] == {report["mode"]: report["queries"]}, report["modes_used"]
        rows.append((label, train, test, locomo))
        print(
            f"{label}: SciFact train {train['metrics']['nDCG@10']:.4f}, test "
            f"{test['metrics']['nDCG@10']:.4f}; LoCoMo-dev R@5 {locomo['metrics']['R@5']:.4f} "
            f"R@10 {locomo['metrics']['R@10']:.4f}",
            flush=True,
        )
    plot(rows, ROOT / "benchmarks" / "quality.png")
    default = f"hybrid {DEFAULT_FUSION} {VECTOR_WEIGHT:g}/{TEXT_WEIGHT:g}"
    lines = [
        "## Retrieval quality (`benchmarks/eval_quality.py`)",
        "",
        f"Machine: {machine()}",
        "",
        "SciFact: BEIR, 5,183 abstracts (title + text as one memory); train split 809 queries "
        "(used to choose defaults), test split 300 queries (reported). LoCoMo-dev: 5 "
        "conversations, 2,760 turns as memories in one namespace per conversation, 760 "
        "questions of categories 1-4; a hit is a turn named in the question's evidence. "
        "Metrics by ir-measures (trec_eval). Embedder: the local int8 all-MiniLM-L6-v2. "
        "Latency: p50 per query for the top 100 ids, query embedding included, no snippets.",
        "",
        "| mode | SciFact train nDCG@10 | SciFact test nDCG@10 | test R@100 | test MRR@10 | test p50 | LoCoMo R@5 | LoCoMo R@10 | LoCoMo nDCG@10 | LoCoMo p50 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, train, test, locomo in rows:
        m, lm = test["metrics"], locomo["metrics"]
        mark = " **(default)**" if label == default else ""
        lines.append(
            f"| {label}{mark} | {train['metrics']['nDCG@10']:.4f} | {m['nDCG@10']:.4f} | "
            f"{m['R@100']:.4f} | {m['RR@10']:.4f} | {test['latency_ms']['p50']:.1f} ms | "
            f"{lm['R@5']:.4f} | {lm['R@10']:.4f} | {lm['nDCG@10']:.4f} | "
            f"{locomo['latency_ms']['p50']:.1f} ms |"
        )
    lines += ["", "LoCoMo-dev recall@5 / @10 per question category:", ""]
    lines += ["| mode | " + " | ".join(f"cat {c}" for c in rows[0][3]["per_category"]) + " |"]
    lines += ["| --- |" + " ---: |" * len(rows[0][3]["per_category"])]
    for label, _, _, locomo in rows:
        cells = [f"{v['R@5']:.3f} / {v['R@10']:.3f}" for v in locomo["per_category"].values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    counts = {c: v["questions"] for c, v in rows[0][3]["per_category"].items()}
    lines += [
        "",
        f"Questions per category: {counts}. Published on SciFact: BM25 0.665 (BEIR, "
        "Elasticsearch) to 0.69 (Anserini variants); all-MiniLM-L6-v2 about 0.645.",
        "",
        "![quality per mode and fusion](quality.png)",
    ]
    if not args.no_write:
        write_section("eval_quality", "\n".join(lines))
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
