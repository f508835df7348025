"""``mnemex eval locomo``: evidence recall on LoCoMo conversations, at three granularities.

Each conversation lives in its own namespace, as a store of one of three shapes
(``--granularity``):

- ``turn``: a memory per dialogue turn (``"<speaker>: <text>"``, plus the caption of
  a shared image), created at its session's date, its session's turns one thread;
- ``session``: a memory per session, its turns as ``Speaker: text`` lines (a summarized
  or captured session, about 1,100 tokens: several embedding windows);
- ``workspace``: a markdown workspace, a file a day, synced and chunked as any
  workspace is (see :mod:`mnemex.eval.workspace`).

Each question of categories 1-4 is asked of its conversation; a memory is relevant
when it holds an evidence turn. The report gives the ranking measures with the
relevance floor (as a search runs by default) and without it, the share of questions
that keep at least one hit, and the share of *other* conversations' questions that get
any hit at all (a question about someone the store never heard of should get none).
``case`` and ``names`` rewrite every question as people type them
(:mod:`mnemex.eval.variants`).
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from mnemex.embed import Embedder
from mnemex.errors import InvalidInput
from mnemex.eval import variants
from mnemex.eval.data import LocomoData, Question, Turn, load_locomo
from mnemex.eval.metrics import latency, mean, per_query, ranked_run
from mnemex.eval.runner import (
    FOREIGN_DEPTH,
    Spec,
    ask_foreign,
    eval_store,
    foreign_queries,
    ingest,
    lexical_fallbacks,
    machine,
)
from mnemex.progress import progress_bar
from mnemex.records import dataclass
from mnemex.store import Store

GRANULARITIES = ("turn", "session", "workspace")
MEASURES = ("R@5", "R@10", "nDCG@10", "RR@10", "R@100", "Success@1", "Success@3", "Success@5")
# Success@k (some relevant memory in the first k) is reported as found@k.
LABELS = {m: m.replace("Success@", "found@") for m in MEASURES}


@dataclass
class Layout:
    """The conversations as memories: the turns each memory holds (filled in as the
    memories are written or synced), and the workspace's folders if any."""

    granularity: str
    holds: dict[str, frozenset[str]] = field(default_factory=dict)
    written: dict[str, Any] = field(default_factory=dict)  # namespace -> Written


@dataclass
class Tally:
    """What the searches found, question by question."""

    with_floor: dict[str, dict[str, float]] = field(default_factory=dict)
    without_floor: dict[str, dict[str, float]] = field(default_factory=dict)
    kept: int = 0
    foreign: int = 0
    answered: int = 0
    answered_by: Counter[str] = field(default_factory=Counter)  # per namespace asked
    samples: list[float] = field(default_factory=list)
    modes: Counter[str] = field(default_factory=Counter)
    fusions: set[str] = field(default_factory=set)
    blocks: dict[str, dict[str, bool]] = field(default_factory=dict)  # workspace: recall checks


def run_locomo(
    file: Path,
    *,
    granularity: str = "turn",
    case: str | None = None,
    names: bool = False,
    foreign: bool = True,
    depth: int = 100,
    spec: Spec | None = None,
    db: Path | str | None = None,
    progress: bool = True,
    separate: bool = False,
    embedder: Embedder | None = None,
    others: Sequence[Path] = (),
) -> dict[str, Any]:
    """The evaluation of ``file`` at ``granularity`` (see the module docstring), every
    question rewritten as ``case`` and ``names`` say; ``embedder``: this one rather than
    the spec's by name; ``others``: datasets whose queries are asked of every conversation
    (:func:`mnemex.eval.runner.foreign_queries`). All conversations share one store, a
    namespace each, or with ``separate`` each has a store of its own; a namespace ranks as
    it would alone, so both give the same numbers."""
    if granularity not in GRANULARITIES:
        raise InvalidInput(f"unknown granularity {granularity!r}: {', '.join(GRANULARITIES)}")
    if separate and db is not None:
        raise InvalidInput("--keep-db keeps one store: it cannot be used with --separate")
    if separate and granularity == "workspace":
        raise InvalidInput("--separate applies to the turn and session granularities")
    spec = spec or Spec()
    data = load_locomo(file)
    asked = [replace(q, text=variants.variant(q.text, case, names)) for q in data.questions]
    namespaces = list(dict.fromkeys(t.namespace for t in data.turns))
    groups = [[ns] for ns in namespaces] if separate else [namespaces]
    tally, layout = Tally(), Layout(granularity)
    outside = [foreign_queries(path) for path in others]
    answered: dict[str, Counter[str]] = {name: Counter() for name, _ in outside}
    ingest_seconds, described, memories = 0.0, dict[str, Any](), 0
    with tempfile.TemporaryDirectory(prefix="mnemex-locomo-") as tmp:
        for group in groups:
            with eval_store(db, spec, embedder=embedder) as store:
                started = time.perf_counter()
                memories += _write(store, data, group, layout, spec, Path(tmp), progress)
                ingest_seconds += time.perf_counter() - started
                mine = [q for q in asked if q.namespace in group]
                _ask(store, mine, layout, spec, depth, tally, progress)
                if foreign:
                    _ask_foreign(store, asked, group, spec, tally, progress)
                for name, texts in outside:
                    texts = [variants.variant(t, case, names) for t in texts]
                    found = ask_foreign(store, texts, group, spec, progress)
                    answered[name].update(
                        queries=found["queries"],
                        answered=round(found["answered"] * found["queries"]),
                    )
                described = spec.describe(store, tally.fusions)
    return _report(file, data, asked, layout, tally, described, memories, ingest_seconds, depth) | {
        "variant": variants.describe(case, names),
        "foreign": {
            name: {"queries": c["queries"], "answered": round(c["answered"] / c["queries"], 4)}
            for name, c in answered.items()
            if c["queries"]
        },
        "stores": "one per conversation" if separate else "one, a namespace per conversation",
    }


def sessions_of(turns: Sequence[Turn]) -> dict[str, list[Turn]]:
    """A conversation's turns by session, in order."""
    out: dict[str, list[Turn]] = defaultdict(list)
    for turn in turns:
        out[turn.session].append(turn)
    return dict(out)


def session_id(namespace: str, session: str) -> str:
    """A session memory's id: ``conv-26:S3`` for ``session_3``."""
    return f"{namespace}:S{session.removeprefix('session_')}"


def _write(
    store: Store,
    data: LocomoData,
    group: list[str],
    layout: Layout,
    spec: Spec,
    folder: Path,
    progress: bool,
) -> int:
    """Write ``group``'s conversations into ``store`` as the layout says; memories written."""
    by_ns: dict[str, list[Turn]] = defaultdict(list)
    for turn in data.turns:
        if turn.namespace in group:
            by_ns[turn.namespace].append(turn)
    if layout.granularity == "workspace":
        return _sync_workspaces(store, data, by_ns, layout, spec, folder, progress)
    written = 0
    for ns, turns in by_ns.items():
        items = []
        if layout.granularity == "turn":
            for t in turns:
                items.append(
                    {"id": t.id, "content": t.content, "created_at": t.created_at}
                    | {"kind": "dialogue", "source": t.session}  # a session is one thread
                )
                layout.holds[t.id] = frozenset([t.id])
        else:
            for session, held in sessions_of(turns).items():
                sid = session_id(ns, session)
                content = "\n".join(" ".join(t.content.split()) for t in held)
                items.append(
                    {"id": sid, "content": content, "created_at": held[0].created_at}
                    | {"kind": "dialogue", "source": ns}
                )
                layout.holds[sid] = frozenset(t.id for t in held)
        ingest(store, items, spec, namespace=ns, show=progress)
        written += len(items)
    return written


def _sync_workspaces(
    store: Store,
    data: LocomoData,
    by_ns: dict[str, list[Turn]],
    layout: Layout,
    spec: Spec,
    folder: Path,
    progress: bool,
) -> int:
    """Each conversation written as a workspace and synced; the chunks indexed."""
    from mnemex.eval.workspace import sync_all, write_workspace

    written = {ns: write_workspace(ns, turns, folder / ns) for ns, turns in by_ns.items()}
    chunks = sync_all(store, written, spec.vectors and store.embedder is not None, progress)
    layout.written.update(written)
    for ns, ws in written.items():
        at = defaultdict(set)
        for turn_id, (path, line) in ws.lines.items():
            at[path].add((line, turn_id))
        ids = [memory.id for memory in store.iter_memories(namespace=ns)]
        for memory in store.get(ids, namespace=ns).memories:  # with their places
            place = memory.location
            if place is None:
                continue
            layout.holds[memory.id] = frozenset(
                t for line, t in at[place.path] if place.start_line <= line <= place.end_line
            )
    return chunks


def _ask(
    store: Store,
    questions: list[Question],
    layout: Layout,
    spec: Spec,
    depth: int,
    tally: Tally,
    progress: bool,
) -> None:
    """Each question of its own conversation, with the floor and without it."""
    with progress_bar(len(questions), "searching", progress) as advance:
        for q in questions:
            started = time.perf_counter()
            result = spec.search(store, q.text, depth, q.namespace)
            tally.samples.append((time.perf_counter() - started) * 1000)
            tally.modes[result.mode_used] += 1
            tally.fusions.update([result.fusion_version] if result.fusion_version else [])
            tally.with_floor[q.id] = ranked_run([h.id for h in result.hits])
            tally.kept += bool(result.hits)
            off = spec.search(store, q.text, depth, q.namespace, floor=False)
            tally.without_floor[q.id] = ranked_run([h.id for h in off.hits])
            if layout.granularity == "workspace":
                from mnemex.eval.workspace import blocks_found

                written = layout.written[q.namespace]
                used, tally.blocks[q.id] = blocks_found(store, q, written, spec, result.hits)
                tally.modes[used] += 1
            advance(1)


def _ask_foreign(
    store: Store,
    questions: list[Question],
    group: list[str],
    spec: Spec,
    tally: Tally,
    progress: bool,
) -> None:
    """Every other conversation's questions, asked of each conversation of ``group``."""
    pairs = [(ns, q) for ns in group for q in questions if q.namespace != ns]
    with progress_bar(len(pairs), "foreign", progress) as advance:
        for ns, q in pairs:
            result = spec.search(store, q.text, FOREIGN_DEPTH, ns)
            tally.foreign += 1
            if result.hits:
                tally.answered += 1
                tally.answered_by[ns] += 1
            advance(1)


def _report(
    file: Path,
    data: LocomoData,
    asked: list[Question],
    layout: Layout,
    tally: Tally,
    described: dict[str, Any],
    memories: int,
    ingest_seconds: float,
    depth: int,
) -> dict[str, Any]:
    qrels = {
        q.id: {m: 1 for m, held in layout.holds.items() if held & set(q.evidence)} for q in asked
    }
    scores = per_query(qrels, tally.with_floor, MEASURES)
    unfloored = per_query(qrels, tally.without_floor, MEASURES)
    report: dict[str, Any] = {
        "dataset": file.stem,
        "granularity": layout.granularity,
        **described,
        "modes_used": dict(tally.modes),
        "lexical_fallbacks": lexical_fallbacks(tally.modes.elements(), described["mode"]),
        "memories": memories,
        "turns": len(data.turns),
        "conversations": len({t.namespace for t in data.turns}),
        "queries": len(asked),
        "dropped_evidence_ids": data.dropped_evidence,
        "questions_without_evidence": data.unanswerable,
        "depth": depth,
        "ingest_seconds": round(ingest_seconds, 3),
        "metrics": _labelled(mean(scores.values(), MEASURES)),
        "metrics_without_floor": _labelled(mean(unfloored.values(), MEASURES)),
        "floor": {
            "kept": round(tally.kept / len(asked), 4) if asked else 0.0,
            "foreign_queries": tally.foreign,
            "foreign_answered": round(tally.answered / tally.foreign, 4) if tally.foreign else 0.0,
            "foreign_answered_per_conversation": dict(sorted(tally.answered_by.items())),
        },
    }
    if tally.blocks:
        report["blocks"] = {
            m: round(sum(b[m] for b in tally.blocks.values()) / len(tally.blocks), 4)
            for m in next(iter(tally.blocks.values()))
        }
    return (
        report
        | _breakdown(asked, scores)
        | {
            "latency_ms": latency(tally.samples),
            "machine": machine(),
        }
    )


def _breakdown(questions: list[Question], scores: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The metrics per category and per conversation, each with its number of questions."""

    def summary(ids: list[str]) -> dict[str, Any]:
        return {"questions": len(ids), **_labelled(mean((scores[i] for i in ids), MEASURES))}

    return {
        "per_category": {
            str(category): summary([q.id for q in questions if q.category == category])
            for category in sorted({q.category for q in questions})
        },
        "per_conversation": {
            ns: summary([q.id for q in questions if q.namespace == ns])
            for ns in dict.fromkeys(q.namespace for q in questions)
        },
    }


def _labelled(values: dict[str, float]) -> dict[str, float]:
    return {LABELS[m]: v for m, v in values.items()}
