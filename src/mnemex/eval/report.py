"""Readable evaluation reports."""

from __future__ import annotations

from typing import Any

# The columns of the breakdown tables, when a report has more.
BREAKDOWN = (
    *("language", "memories", "R@5", "R@10", "nDCG@10", "RR@10"),
    *("found@1", "found@3", "found@5", "kept", "found@3 without floor"),
)


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(highlight=False)
    how = [report["mode"], *(report[key] for key in ("fusion", "embedder") if report.get(key))]
    title = f"{report['dataset']}  ({'; '.join(how)})"
    out.print(f"[bold]{title}[/bold]", markup=True)
    out.print(
        f"{report['memories']:,} memories, {report['queries']:,} queries, "
        f"ingest {report['ingest_seconds']:.1f} s"
    )
    if report.get("variant"):
        out.print(f"questions: {report['variant']}")
    unfloored = report.get("metrics_without_floor")
    table = Table(box=None)
    table.add_column("metric")
    table.add_column("value", justify="right")
    if unfloored:
        table.add_column("without floor", justify="right")
    for name, value in report["metrics"].items():
        extra = [f"{unfloored[name]:.4f}"] if unfloored else []
        table.add_row(name, f"{value:.4f}", *extra)
    for name, value in report.get("blocks", {}).items():
        table.add_row(f"within {name}", f"{value:.4f}", *([""] if unfloored else []))
    lat = report["latency_ms"]
    pad = [""] if unfloored else []
    table.add_row("latency p50", f"{lat['p50']:.2f} ms", *pad)
    table.add_row("latency p95", f"{lat['p95']:.2f} ms", *pad)
    out.print(table)
    floor = report.get("floor")
    if floor:
        line = f"{floor['kept']:.1%} of the questions get a hit"
        if floor.get("foreign_queries"):
            line += (
                f"; {floor['foreign_answered']:.1%} of {floor['foreign_queries']:,} "
                "other conversations' questions get one"
            )
        out.print(line)
    for key, title in (
        ("unrelated", "unrelated prompts"),
        ("other_stores", "other stores' questions"),
    ):
        if report.get(key):
            row = report[key]
            out.print(f"{title}: {row['answered']:.1%} of {row['queries']:,} get a hit")
    for name, row in report.get("foreign", {}).items():
        out.print(f"foreign {name}: {row['answered']:.1%} of {row['queries']:,} queries get a hit")
    if report.get("stores"):
        out.print(f"stores: {report['stores']}")
    for key, title, label in (
        ("per_category", "per category", "category"),
        ("per_conversation", "per conversation", "conversation"),
        ("per_store", "per store", "store"),
    ):
        if not report.get(key):
            continue
        part = Table(box=None, title=title)
        part.add_column(label)
        part.add_column("questions", justify="right")
        measures = [k for k in next(iter(report[key].values())) if k != "questions"]
        measures = [m for m in measures if m in BREAKDOWN] or measures
        for m in measures:
            part.add_column(m, justify="right")
        for name, row in report[key].items():
            cells = [
                f"{row[m]:.4f}" if isinstance(row[m], float) else str(row[m]) for m in measures
            ]
            part.add_row(name, str(row["questions"]), *cells)
        out.print(part)
