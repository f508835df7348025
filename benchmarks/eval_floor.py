"""The relevance floor's table: right answers kept, foreign questions answered, per layout.

    python benchmarks/eval_floor.py [--data DIR] [--cache DIR] [--quick] [--no-write]

Runs the product's evaluations (hybrid, the local model, through an embedding cache)
and writes the "relevance floor" section of benchmarks/RESULTS.md:

- LoCoMo-dev at each granularity (``mnemex eval locomo --granularity turn|session|
  workspace``), questions as written, lower-cased and with names misspelt by one edit:
  the questions keeping a hit, the other conversations' questions answered, R@10 and
  found@5 with the floor and without it, and R@10 of the lexical and vector arms;
- SciFact test and CISI (``mnemex eval beir``): nDCG@10 with and without the floor, of
  each arm, and the foreign pairs (each asked the other's queries and LoCoMo's);
- the bundled paraphrase set (``mnemex eval paraphrase``): found@3 with and without the
  floor, questions keeping a hit, unrelated prompts and other stores' questions answered.

``--quick`` runs only the as-written questions.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import data_dir, machine, parser, publish
from mnemex.eval.beir import run_beir
from mnemex.eval.embed_cache import default_cache_dir
from mnemex.eval.locomo import run_locomo
from mnemex.eval.paraphrase import run_paraphrase
from mnemex.eval.runner import Spec
from mnemex.search.floor import FLOOR_VERSION

LAYOUTS = ("turn", "session", "workspace")
VARIANTS = ((None, False, "as written"), ("lower", False, "lower-cased"), (None, True, "names"))


def spec(cache: Path, mode: str = "hybrid") -> Spec:
    """The run's settings: ``mode`` with the local model, through the embedding cache."""
    return Spec(mode=mode, embedder="local", embed_cache=cache)


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def locomo_rows(
    file: Path, cache: Path, quick: bool, others: list[Path]
) -> tuple[list[str], dict[str, Any]]:
    rows, raw = [], {}
    for layout in LAYOUTS:
        arms = {
            mode: run_locomo(
                file, granularity=layout, spec=spec(cache, mode), foreign=False, progress=False
            )["metrics"]["R@10"]
            for mode in ("lexical", "vector")
        }
        for case, names, label in VARIANTS[:1] if quick else VARIANTS:
            asked = others if layout == "turn" and case is None and not names else []
            report = run_locomo(
                file,
                granularity=layout,
                case=case,
                names=names,
                spec=spec(cache),
                progress=False,
                others=asked,
            )
            raw[f"{layout}/{label}"] = report
            on, off, floor = report["metrics"], report["metrics_without_floor"], report["floor"]
            for name, row in report.get("foreign", {}).items():
                print(f"{name} → locomo ({layout}): {pct(row['answered'])}", flush=True)
            rows.append(
                f"| {layout} | {label} | {pct(floor['kept'])} | {pct(floor['foreign_answered'])} "
                f"| {on['R@10']:.4f} / {off['R@10']:.4f} | {on['found@5']:.4f} / "
                f"{off['found@5']:.4f} | {arms['lexical']:.4f} / {arms['vector']:.4f} |"
            )
            print(rows[-1], flush=True)
    return rows, raw


def beir_rows(folder: Path, cache: Path) -> tuple[list[str], dict[str, Any]]:
    rows, raw = [], {}
    sets = {"scifact": folder / "beir" / "scifact", "cisi": folder / "beir" / "cisi"}
    locomo = folder / "locomo" / "locomo10-dev.json"
    for name, path in sets.items():
        others = [p for n, p in sets.items() if n != name] + [locomo]
        report = run_beir(path, spec=spec(cache), others=others, progress=False)
        arms = {
            m: run_beir(path, spec=spec(cache, m))["metrics"]["nDCG@10"]
            for m in ("lexical", "vector")
        }
        raw[name] = report
        foreign = "; ".join(
            f"{other} → {name} {pct(row['answered'])}" for other, row in report["foreign"].items()
        )
        rows.append(
            f"| {name} | {report['metrics']['nDCG@10']:.4f} | {arms['lexical']:.4f} / "
            f"{arms['vector']:.4f} | {foreign} |"
        )
        print(rows[-1], flush=True)
    return rows, raw


def paraphrase_row(cache: Path) -> tuple[str, dict[str, Any]]:
    report = run_paraphrase(spec=spec(cache))
    on, off = report["metrics"], report["metrics_without_floor"]
    row = (
        f"| {on['found@3']:.4f} / {off['found@3']:.4f} | {pct(on['kept'])} | "
        f"{pct(report['unrelated']['answered'])} | {pct(report['other_stores']['answered'])} |"
    )
    print(row, flush=True)
    return row, report


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--cache", type=Path, default=default_cache_dir())
    arguments.add_argument("--quick", action="store_true", help="only the questions as written")
    arguments.add_argument("--json", type=Path, help="also write every report to this file")
    args = arguments.parse_args()
    folder = data_dir(args.data)
    started = time.perf_counter()
    para, para_raw = paraphrase_row(args.cache)
    beir_sets = [folder / "beir" / "scifact", folder / "beir" / "cisi"]
    loc, loc_raw = locomo_rows(
        folder / "locomo" / "locomo10-dev.json", args.cache, args.quick, beir_sets
    )
    beir, beir_raw = beir_rows(folder, args.cache)
    body = "\n".join(
        [
            f"{FLOOR_VERSION}, hybrid, the local model; {machine()}; "
            f"{time.perf_counter() - started:.0f} s.",
            "",
            "    python benchmarks/eval_floor.py --data ../shared/data",
            "",
            "Paraphrase set (`mnemex eval paraphrase`): found@3 with / without the floor, "
            "questions keeping a hit, unrelated prompts answered, other stores' questions "
            "answered.",
            "",
            "| found@3 | kept | unrelated | other stores |",
            "| ---: | ---: | ---: | ---: |",
            para,
            "",
            "LoCoMo-dev (`mnemex eval locomo --granularity G [--case lower] "
            "[--perturb-names]`): in-domain questions keeping a hit, other conversations' "
            "questions answered, R@10 and found@5 with / without the floor, R@10 of the "
            "lexical / vector arm.",
            "",
            "| layout | questions | kept | foreign answered | R@10 | found@5 | lexical / vector |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
            *loc,
            "",
            "BEIR (`mnemex eval beir DIR --foreign OTHER`): hybrid nDCG@10, each arm's, and the "
            "share of another dataset's queries that get a hit.",
            "",
            "| dataset | hybrid | lexical / vector | foreign answered |",
            "| --- | ---: | ---: | --- |",
            *beir,
            "",
            "SciFact and CISI queries asked of each LoCoMo-dev conversation (a memory per "
            "turn): "
            + "; ".join(
                f"{name} → locomo {pct(row['answered'])}"
                for name, row in loc_raw["turn/as written"].get("foreign", {}).items()
            )
            + ".",
        ]
    )
    if args.json:
        args.json.write_text(
            json.dumps({"paraphrase": para_raw, "locomo": loc_raw, "beir": beir_raw}, indent=1),
            encoding="utf-8",
        )
    publish("relevance-floor", body, args.no_write)


if __name__ == "__main__":
    main()
