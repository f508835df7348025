"""Retrieval quality of every mode and fusion on SciFact (train and test) and LoCoMo-dev;
with ``--postgres``, lexical and hybrid on SQLite and PostgreSQL side by side.

    python benchmarks/eval_quality.py [--data DIR]
    python benchmarks/eval_quality.py --postgres [--datasets scifact,locomo]
        [--modes lexical,hybrid] [--url URL]

Defaults are chosen on SciFact's train split and LoCoMo-dev, then reported on
SciFact's test split. The embedded stores are kept under benchmarks/.cache so
that a re-run only re-queries. Writes a table to RESULTS.md and a plot
(benchmarks/quality.png).

``--postgres``: each dataset and mode runs :func:`mnemex.eval.beir.run_beir` (SciFact's
300 test queries) or :func:`mnemex.eval.locomo.run_locomo` (LoCoMo-dev's evidence recall,
a namespace per conversation) on a temporary SQLite file and on a PostgreSQL database: a
throwaway local server from ``pgserver`` unless ``--url`` names one (a database that is
emptied first). Hybrid uses the local model, its corpus vectors from the eval's embedding
cache (``$MNEMEX_HOME/cache``, else the user cache dir), so both engines search the same
vectors; the numbers should agree within 0.01 (section pg-quality).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import CACHE, ROOT, data_dir, fresh_database, machine, parser, pg_server, publish
from mnemex.config import DEFAULT_FUSION, TEXT_WEIGHT, VECTOR_WEIGHT
from mnemex.eval.beir import run_beir
from mnemex.eval.embed_cache import default_cache_dir
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


# Per dataset: its title, the measures shown, the one compared (the 0.01).
DATASETS = {
    "scifact": (
        "SciFact (BEIR test, 300 queries, 100 deep)",
        ("nDCG@10", "R@10", "R@100", "RR@10"),
    ),
    "locomo": ("LoCoMo-dev (evidence recall, 760 questions)", ("R@10", "R@5", "nDCG@10", "R@100")),
}


def run_engine(data: Path, dataset: str, mode: str, db: Any) -> dict[str, Any]:
    spec = Spec(
        mode=mode,
        embedder="local" if mode != "lexical" else None,
        embed_cache=default_cache_dir() if mode != "lexical" else None,
    )
    if dataset == "locomo":
        return run_locomo(data / "locomo" / "locomo10-dev.json", spec=spec, db=db, progress=False)
    return run_beir(data / "beir" / "scifact", spec=spec, db=db, progress=False)


def engines(args: argparse.Namespace) -> None:
    """Lexical and hybrid on SQLite and on PostgreSQL, the same settings (section pg-quality)."""
    data = data_dir(args.data)
    with tempfile.TemporaryDirectory(prefix="mnemex-pgq-") as tmp:
        rows = []
        with contextlib.nullcontext() if args.url else pg_server(Path(tmp) / "pg") as server:
            url = args.url or server.url
            for dataset in args.datasets.split(","):
                for mode in args.modes.split(","):
                    sqlite = run_engine(data, dataset, mode, Path(tmp) / f"{dataset}-{mode}.db")
                    name = f"mnemex_{dataset}_{mode}"
                    pg = run_engine(data, dataset, mode, fresh_database(url, name))
                    rows.append((dataset, mode, sqlite, pg))
                    print(dataset, mode, sqlite["metrics"], pg["metrics"], flush=True)
    engines_report(rows, args.no_write)


def engines_report(
    rows: list[tuple[str, str, dict[str, Any], dict[str, Any]]], no_write: bool
) -> None:
    lines = [
        "## SciFact and LoCoMo-dev on SQLite and PostgreSQL (`benchmarks/eval_quality.py --postgres`)",
        "",
        f"{machine()}. `mnemex eval beir` and `mnemex eval locomo` on each engine with the",
        "same settings; hybrid with the local model (the same cached corpus vectors, a",
        "vector per window of a long text on both engines). *difference*: of the first",
        "measure, which the issue asks within 0.01.",
    ]
    for dataset, (title, measures) in DATASETS.items():
        mine = [r for r in rows if r[0] == dataset]
        if not mine:
            continue
        lines += [
            "",
            f"### {title}",
            "",
            "| mode | engine | " + " | ".join(measures) + " | p50 ms | p95 ms |",
            "| --- | --- | " + " | ".join("---:" for _ in measures) + " | ---: | ---: |",
        ]
        for _, mode, sqlite, pg in mine:
            for name, result in (("SQLite", sqlite), ("PostgreSQL", pg)):
                metrics = " | ".join(f"{result['metrics'][m]:.4f}" for m in measures)
                lat = result["latency_ms"]
                lines.append(
                    f"| {mode} | {name} | {metrics} | {lat['p50']:.1f} | {lat['p95']:.1f} |"
                )
            gap = abs(sqlite["metrics"][measures[0]] - pg["metrics"][measures[0]])
            lines.append(f"| {mode} | difference | {gap:.4f} |" + " |" * (len(measures) + 1))
    publish("pg-quality", "\n".join(lines), no_write)


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
    arguments = parser(__doc__)
    arguments.add_argument("--postgres", action="store_true", help="SQLite beside PostgreSQL")
    arguments.add_argument("--datasets", default="scifact,locomo")
    arguments.add_argument("--modes", default="lexical,hybrid")
    arguments.add_argument("--url", help="a PostgreSQL server (default: a local pgserver)")
    args = arguments.parse_args()
    if args.postgres:
        return engines(args)
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
    publish("eval_quality", "\n".join(lines), args.no_write)


if __name__ == "__main__":
    main()
