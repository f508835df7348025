"""SciFact through the whole store on both engines: ``mnemex eval beir`` on SQLite and on
PostgreSQL, with the same settings, side by side.

    python benchmarks/bench_pg_quality.py [--data DIR] [--modes lexical,hybrid] [--url URL]

Each mode runs :func:`mnemex.eval.beir.run_beir` (what ``mnemex eval beir`` runs) on
a temporary SQLite file and on a PostgreSQL database: a throwaway local server from
``pgserver`` unless ``--url`` names one (a database that is emptied first). Hybrid
uses the local model, its corpus vectors from the eval's embedding cache, so both
engines search the same vectors. The issue asks for nDCG@10 within 0.01.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import data_dir, machine, write_section
from mnemex.engine.postgres import connect, start_server
from mnemex.eval.beir import run_beir
from mnemex.eval.embed_cache import default_cache_dir
from mnemex.eval.runner import Spec

MEASURES = ("nDCG@10", "R@10", "R@100", "RR@10")


def run(directory: Path, mode: str, db: Any) -> dict[str, Any]:
    spec = Spec(
        mode=mode,
        embedder="local" if mode != "lexical" else None,
        embed_cache=default_cache_dir() if mode != "lexical" else None,
    )
    return run_beir(directory, spec=spec, db=db, progress=False)


def fresh_database(url: str, name: str) -> str:
    with connect(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data")
    parser.add_argument("--modes", default="lexical,hybrid")
    parser.add_argument("--url", help="a PostgreSQL server (default: a local pgserver)")
    args = parser.parse_args()
    directory = data_dir(args.data) / "beir" / "scifact"
    with tempfile.TemporaryDirectory(prefix="mnemex-pgq-") as tmp:
        server = None if args.url else start_server(Path(tmp) / "pg", delete=True)
        url = args.url or server.url  # type: ignore[union-attr]
        rows = []
        try:
            for mode in args.modes.split(","):
                sqlite = run(directory, mode, Path(tmp) / f"{mode}.db")
                pg = run(directory, mode, fresh_database(url, f"mnemex_scifact_{mode}"))
                rows.append((mode, sqlite, pg))
                print(mode, sqlite["metrics"], pg["metrics"], flush=True)
        finally:
            if server is not None:
                server.stop()
    report(rows)


def report(rows: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
    lines = [
        "## SciFact on SQLite and PostgreSQL (`benchmarks/bench_pg_quality.py`)",
        "",
        f"{machine()}. `mnemex eval beir` (300 test queries, 100 deep) on each engine with",
        "the same settings; hybrid with the local model (the same cached corpus vectors).",
        "",
        "| mode | engine | " + " | ".join(MEASURES) + " | p50 ms | p95 ms |",
        "| --- | --- | " + " | ".join("---:" for _ in MEASURES) + " | ---: | ---: |",
    ]
    for mode, sqlite, pg in rows:
        for name, result in (("SQLite", sqlite), ("PostgreSQL", pg)):
            metrics = " | ".join(f"{result['metrics'][m]:.4f}" for m in MEASURES)
            lat = result["latency_ms"]
            lines.append(f"| {mode} | {name} | {metrics} | {lat['p50']:.1f} | {lat['p95']:.1f} |")
        gap = abs(sqlite["metrics"]["nDCG@10"] - pg["metrics"]["nDCG@10"])
        lines.append(f"| {mode} | difference | {gap:.4f} | | | | | |")
    write_section("pg-quality", "\n".join(lines))


if __name__ == "__main__":
    main()
