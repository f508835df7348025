"""``mnemex eval paraphrase``: small stores asked in other words.

A person or an agent asking about its own notes rarely uses the note's words:
"how do users sign in now?" for "Switched authentication from passwords to OIDC
via Okta". The bundled set (``paraphrase.json`` beside this module, written for
this evaluation) holds small stores (10-200 memories each) in the shapes agents
store: decisions, gotchas, facts, preferences, todos, long notes; English, Chinese,
and a store mixing Japanese, Korean, German, Spanish, French and Russian. Each
question is reworded (it shares at most one content word with its answer); each
store is also asked prompts that have nothing to do with any store.

Every store is a namespace of one evaluation store. The report gives, with the
relevance floor and without it, the share of questions whose answer is in the first
1, 3 and 5 hits, the share that keep any hit, and the share of unrelated prompts and
of other stores' questions that get a hit at all.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemex.errors import InvalidInput
from mnemex.eval.metrics import latency
from mnemex.eval.runner import (
    FOREIGN_DEPTH,
    Spec,
    eval_store,
    ingest,
    lexical_fallbacks,
    machine,
)
from mnemex.progress import progress_bar
from mnemex.records import dataclass
from mnemex.store import Store

BUNDLED = Path(__file__).with_name("paraphrase.json")
CUTOFFS = (1, 3, 5)
DEPTH = 10


@dataclass(frozen=True, slots=True)
class Asked:
    store: str
    id: str
    text: str
    answers: frozenset[str]


@dataclass(frozen=True, slots=True)
class ParaphraseSet:
    stores: dict[str, list[dict[str, Any]]]  # store name -> its memories
    languages: dict[str, str]
    questions: list[Asked]
    unrelated: list[str]


def load_paraphrase(path: Path | None = None) -> ParaphraseSet:
    """The set at ``path`` (default: the bundled one)."""
    path = path or BUNDLED
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot read a paraphrase set ({exc})") from None
    stores: dict[str, list[dict[str, Any]]] = {}
    languages: dict[str, str] = {}
    questions: list[Asked] = []
    for store in data["stores"]:
        name = str(store["name"])
        stores[name] = [
            {k: m[k] for k in ("id", "content", "kind", "tags") if k in m}
            for m in store["memories"]
        ]
        languages[name] = str(store.get("language", ""))
        questions += [
            Asked(name, str(q["id"]), str(q["text"]), frozenset(map(str, q["answers"])))
            for q in store["questions"]
        ]
    unrelated = [str(u["text"]) for u in data.get("unrelated", ())]
    return ParaphraseSet(stores, languages, questions, unrelated)


def run_paraphrase(
    file: Path | None = None,
    *,
    spec: Spec | None = None,
    db: Path | str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """The evaluation of the set at ``file`` (default: the bundled one)."""
    spec = spec or Spec()
    data = load_paraphrase(file)
    with eval_store(db, spec, dedup=False) as store:
        started = time.perf_counter()
        for name, memories in data.stores.items():
            ingest(store, memories, spec, namespace=name, show=progress)
        seconds = time.perf_counter() - started
        found, modes, samples = _ask(store, data.questions, spec, progress)
        unrelated = _answered(store, data, spec, progress, others=False)
        crossed = _answered(store, data, spec, progress, others=True)
        described = spec.describe(store)
    return {
        "dataset": (file or BUNDLED).stem,
        **described,
        "modes_used": dict(modes),
        "lexical_fallbacks": lexical_fallbacks(modes.elements(), described["mode"]),
        "stores": len(data.stores),
        "memories": sum(len(m) for m in data.stores.values()),
        "queries": len(data.questions),
        "ingest_seconds": round(seconds, 3),
        "metrics": _shares(found, "floor"),
        "metrics_without_floor": _shares(found, "open"),
        "unrelated": unrelated,
        "other_stores": crossed,
        "per_store": {
            name: {
                "language": data.languages[name],
                "memories": len(data.stores[name]),
                "questions": sum(q.store == name for q in data.questions),
                **_shares({k: v for k, v in found.items() if k[0] == name}, "floor"),
                "found@3 without floor": _shares(
                    {k: v for k, v in found.items() if k[0] == name}, "open"
                )["found@3"],
            }
            for name in data.stores
        },
        "latency_ms": latency(samples),
        "machine": machine(),
    }


Found = dict[tuple[str, str], dict[str, int | None]]  # (store, question) -> rank per setting


def _ask(
    store: Store, questions: Sequence[Asked], spec: Spec, progress: bool
) -> tuple[Found, Counter[str], list[float]]:
    """The rank of each question's first answer (``None``: not in the hits), with the floor
    and without it."""
    found: Found = {}
    modes: Counter[str] = Counter()
    samples: list[float] = []
    with progress_bar(len(questions), "searching", progress) as advance:
        for q in questions:
            ranks: dict[str, int | None] = {}
            for setting, floor in (("floor", True), ("open", False)):
                started = time.perf_counter()
                result = spec.search(store, q.text, DEPTH, q.store, floor=floor)
                if floor:
                    samples.append((time.perf_counter() - started) * 1000)
                    modes[result.mode_used] += 1
                ids = [h.id for h in result.hits]
                ranks[setting] = next((i for i, m in enumerate(ids, 1) if m in q.answers), None)
                ranks[f"{setting} hits"] = len(ids)
            found[(q.store, q.id)] = ranks
            advance(1)
    return found, modes, samples


def _shares(found: Found, setting: str) -> dict[str, float]:
    """found@k and the share of questions with any hit, for one setting."""
    n = len(found) or 1
    out = {
        f"found@{k}": round(sum(1 for r in found.values() if (r[setting] or k + 1) <= k) / n, 4)
        for k in CUTOFFS
    }
    out["kept"] = round(sum(1 for r in found.values() if r[f"{setting} hits"]) / n, 4)
    return out


def _answered(
    store: Store, data: ParaphraseSet, spec: Spec, progress: bool, others: bool
) -> dict[str, Any]:
    """The share of unrelated prompts (or, with ``others``, other stores' questions) that get
    any hit, over every store and per store."""
    per: dict[str, float] = {}
    total = answered = 0
    label = "other stores" if others else "unrelated"
    with progress_bar(len(data.stores), label, progress) as advance:
        for name in data.stores:
            texts = (
                [q.text for q in data.questions if q.store != name] if others else data.unrelated
            )
            got = sum(bool(spec.search(store, t, FOREIGN_DEPTH, name).hits) for t in texts)
            per[name] = round(got / len(texts), 4) if texts else 0.0
            total, answered = total + len(texts), answered + got
            advance(1)
    return {
        "queries": total,
        "answered": round(answered / total, 4) if total else 0.0,
        "per_store": per,
    }
