"""Readable evaluation reports."""

from __future__ import annotations

from typing import Any


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
    table = Table(box=None)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in report["metrics"].items():
        table.add_row(name, f"{value:.4f}")
    lat = report["latency_ms"]
    table.add_row("latency p50", f"{lat['p50']:.2f} ms")
    table.add_row("latency p95", f"{lat['p95']:.2f} ms")
    out.print(table)
    if report.get("stores"):
        out.print(f"stores: {report['stores']}")
    for key, title, label in (
        ("per_category", "per category", "category"),
        ("per_conversation", "per conversation", "conversation"),
    ):
        if not report.get(key):
            continue
        part = Table(box=None, title=title)
        part.add_column(label)
        part.add_column("questions", justify="right")
        measures = [k for k in next(iter(report[key].values())) if k != "questions"]
        for m in measures:
            part.add_column(m, justify="right")
        for name, row in report[key].items():
            part.add_row(name, str(row["questions"]), *(f"{row[m]:.4f}" for m in measures))
        out.print(part)
