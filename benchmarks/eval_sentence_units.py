"""Sentence windows for line-structured text: which unit a markdown chat log needs.

    nice python benchmarks/eval_sentence_units.py run [--data DIR] [--cache /tmp/ev/cache]
        [--sets workspace,cisi,scifact] [--variants off,a,b,c,d] [--no-floor]
        # appends a row per run to benchmarks/.cache/sentence_units.jsonl
    python benchmarks/eval_sentence_units.py table                  # prints the markdown table
    python benchmarks/eval_sentence_units.py check [--data DIR]     # BEIR texts a variant changes

With ``embed_sentences`` on, a long memory also gets a vector per sentence of its
body, ``"{first line}. {sentence}"`` (:func:`mnemex.embed.local.sentence_windows`).
``run`` runs the product's evaluations (``run_locomo``: LoCoMo-dev as a markdown
workspace; ``run_beir``: CISI and SciFact test), hybrid, local model behind the
embedding cache, with ``embed_sentences`` on and ``sentence_windows`` replaced in
process by a variant:

    off  embed_sentences off (token windows only)
    a    the shipped sentences
    b    a body of several non-empty lines: one unit per line that is not a heading
         (its list marker stripped), after the first line; a one-line body: shipped
    c    as b, the first line a prefix only when it is a heading ('#'), else a unit itself
    d    as c, a line shorter than 40 characters merged with the next of its paragraph

Every BEIR text is ``title\\nabstract`` (a one-line body), so b, c and d give it the
shipped windows; ``check`` counts the texts where a variant differs from a.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import CACHE, data_dir, machine
from mnemex.embed import local
from mnemex.eval.beir import run_beir
from mnemex.eval.data import load_beir
from mnemex.eval.locomo import run_locomo
from mnemex.eval.runner import Spec

SHIPPED = local.sentence_windows
LIST_MARKER = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
MERGE_CHARS = 40
RESULTS_FILE = CACHE / "sentence_units.jsonl"
MEASURES = ("found@1", "found@3", "found@5", "top-k cut", "recall")


@dataclass(frozen=True)
class SentenceSpec(Spec):
    """A spec that also sets ``embed_sentences``."""

    sentences: bool = False
    floor: bool = True

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "embed_sentences": self.sentences,
            "relevance_floor": self.floor,
        }


def paragraphs(body: str) -> list[list[str]]:
    """The body's units by paragraph: each non-empty line that is not a heading, its list
    marker stripped; a blank line or a heading ends a paragraph."""
    out: list[list[str]] = [[]]
    for raw in body.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            out.append([])
        else:
            out[-1].append(LIST_MARKER.sub("", line))
    return [p for p in out if p]


def merged(lines: list[str], shortest: int) -> list[str]:
    """``lines`` with each line shorter than ``shortest`` characters joined to the next."""
    out: list[str] = []
    pending = ""
    for line in lines:
        pending = f"{pending} {line}" if pending else line
        if len(pending) >= shortest:
            out.append(pending)
            pending = ""
    return [*out, pending] if pending else out


def line_units(text: str, *, heading_only: bool = False, shortest: int = 0) -> list[str]:
    """Variants b-d (see the module docstring): the shipped sentences for a body of one
    non-empty line, else a unit per line, prefixed by the first line (with
    ``heading_only``: only when it is a heading, else the first line is a unit too)."""
    title, _, body = text.partition("\n")
    if sum(1 for line in body.splitlines() if line.strip()) < 2:
        return SHIPPED(text)
    title = title.strip()
    if heading_only and not title.startswith("#"):
        body, title = text, ""
    units = [u for p in paragraphs(body) for u in merged(p, shortest)]
    pieces = dict.fromkeys(f"{title}. {u}" if title else u for u in units)
    return list(pieces)[: local.SENTENCE_WINDOWS]


VARIANTS: dict[str, Callable[[str], list[str]] | None] = {
    "off": None,
    "a": SHIPPED,
    "b": line_units,
    "c": lambda text: line_units(text, heading_only=True),
    "d": lambda text: line_units(text, heading_only=True, shortest=MERGE_CHARS),
}


def vectors_stored(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM embeddings").fetchone()[0])


def run_one(
    variant: str, dataset: str, folder: Path, cache: Path, floor: bool = True
) -> dict[str, Any]:
    """One evaluation of ``dataset`` with ``variant``'s sentence windows (``floor``: the
    relevance floor on, as shipped)."""
    cut = VARIANTS[variant]
    local.sentence_windows = cut or SHIPPED  # type: ignore[assignment]
    spec = SentenceSpec(
        mode="hybrid",
        embedder="local",
        embed_cache=cache,
        sentences=cut is not None,
        floor=floor,
    )
    started = time.perf_counter()
    home = os.environ.get("MNEMEX_HOME")
    try:
        with tempfile.TemporaryDirectory(prefix="mnemex-units-") as tmp:
            os.environ["MNEMEX_HOME"] = tmp
            db = Path(tmp) / "eval.db"
            if dataset == "workspace":
                path = folder / "locomo" / "locomo10-dev.json"
                report = run_locomo(path, granularity="workspace", spec=spec, db=db, progress=False)
            else:
                report = run_beir(folder / "beir" / dataset, spec=spec, db=db, progress=False)
            vectors = vectors_stored(db)
    finally:
        local.sentence_windows = SHIPPED
        os.environ.pop("MNEMEX_HOME", None)
        if home is not None:
            os.environ["MNEMEX_HOME"] = home
    return {
        "variant": variant,
        "dataset": dataset,
        "floor": floor,
        "metrics": report["metrics"],
        "per_category": report.get("per_category", {}),
        "memories": report["memories"],
        "vectors": vectors,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }


def run(args: argparse.Namespace) -> None:
    folder = data_dir(args.data)
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    for dataset in args.sets.split(","):
        for variant in args.variants.split(","):
            row = run_one(variant, dataset, folder, Path(args.cache), not args.no_floor)
            with RESULTS_FILE.open("a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
            print(json.dumps({k: row[k] for k in ("variant", "dataset", "metrics", "vectors")}))


def check(args: argparse.Namespace) -> None:
    """How many BEIR texts each variant gives other windows than the shipped ones."""
    folder = data_dir(args.data)
    for dataset in ("cisi", "scifact"):
        corpus = load_beir(folder / "beir" / dataset, "test").corpus
        for variant in ("b", "c", "d"):
            cut = VARIANTS[variant]
            assert cut is not None
            changed = sum(1 for text in corpus.values() if cut(text) != SHIPPED(text))
            print(f"{dataset}: {variant} changes {changed} of {len(corpus)} texts")


def table(_: argparse.Namespace) -> None:
    """The last row of each (dataset, floor, variant) as markdown, variants in order."""
    rows: dict[tuple[str, bool, str], dict[str, Any]] = {}
    for line in RESULTS_FILE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        rows[row["dataset"], row.get("floor", True), row["variant"]] = row
    order = {name: i for i, name in enumerate(VARIANTS)}
    print("| set | variant | found@1 | found@3 | found@5 | top-k cut | recall | vectors |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (dataset, floor, variant), row in sorted(
        rows.items(), key=lambda kv: (kv[0][0], not kv[0][1], order[kv[0][2]])
    ):
        m = row["metrics"]
        name = dataset if floor else f"{dataset}, no floor"
        if dataset == "workspace":
            cells = " | ".join(f"{m[k]:.4f}" for k in MEASURES)
        else:
            cells = f"nDCG@10 {m['nDCG@10']:.4f} | | | |"
        print(f"| {name} | {variant} | {cells} | {row['vectors']:,} |")
        for category, c in row["per_category"].items():
            cells = " | ".join(f"{c[k]:.4f}" for k in MEASURES)
            print(f"| {name}: category {category} ({c['questions']}) | {variant} | {cells} | |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("run", "table", "check"))
    parser.add_argument("--data")
    parser.add_argument("--cache", default="/tmp/ev/cache")
    parser.add_argument("--sets", default="workspace,cisi,scifact")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--no-floor", action="store_true", help="relevance floor off")
    args = parser.parse_args()
    {"run": run, "table": table, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
