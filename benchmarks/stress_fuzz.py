"""Fuzz the public API at scale: only ``MnemexError`` ever escapes, and imports lose nothing.

The fuzzing of ``tests/test_hostile.py`` scaled up, without Hypothesis (plain
``random`` with a seed, so that a run can be repeated):

- ``--calls`` random calls of the public ``Store`` methods, each parameter
  either a value of the right type (often valid, so later checks are reached)
  or a hostile one (the test's specials: huge and NaN numbers, lone
  surrogates, NUL bytes, 70,000-character text, dates of year 1 and 9999,
  bytes, objects, nested lists and dicts). Any exception that is not a
  ``mnemex.MnemexError`` is counted as undocumented and the first ones are
  printed with the call. After every call that raised, the store must still
  search.
- ``--imports`` JSONL files of good lines with hostile lines (the test's
  ``HOSTILE_LINES``, truncated JSON, invalid UTF-8, wrong types) at random
  places, across import batch boundaries: every good line must be stored,
  every bad one reported with its line number, and no import aborted.

    python benchmarks/stress_fuzz.py                          # 200,000 calls, 200 files
    python benchmarks/stress_fuzz.py --calls 5000 --imports 10 --no-write

Results go to RELIABILITY.md (section stress_fuzz).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import ROOT, machine, write_section

sys.path.insert(0, str(ROOT))
os.environ.setdefault("MNEMEX_EMBEDDER", "none")

from tests.test_hostile import _API, _SPECIALS, HOSTILE_LINES

import mnemex
from mnemex.store import ALL
from mnemex.transfer import IMPORT_BATCH, import_jsonl

RELIABILITY = ROOT / "RELIABILITY.md"
SHOWN = 5

_TEXTS = ["deploy", "NEAR(a b)", '"', "*", "memory 1", "the deploy to production", "x"]
_IDS = ["m0", "m1", "o1", "nope"]
_TIMES = ["2025-01-01", "7d", "1700000000", "0999-01-01", datetime(2020, 5, 1, tzinfo=UTC)]
_LABELS: list[Any] = [["fact"], ["t"], ["fact", "t"], [], "fact", "t"]


def _text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_TEXTS)
    return "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 20)))


_PLAUSIBLE: dict[str, Any] = {  # name -> rng -> a value of the right type
    **dict.fromkeys(
        ("content", "query", "task", "subject", "predicate", "object", "entity", "source"), _text
    ),
    **dict.fromkeys(("id", "around", "source_memory"), lambda r: r.choice(_IDS)),
    "ids": lambda r: r.sample(_IDS, r.randint(1, 3)) if r.random() < 0.7 else r.choice(_IDS),
    **dict.fromkeys(
        ("limit", "before", "after", "max_memories", "relations", "batch"),
        lambda r: r.randint(0, 60),
    ),
    "budget_tokens": lambda r: r.randint(0, 2_000),
    **dict.fromkeys(
        ("since", "until", "start", "end", "created_at", "now"), lambda r: r.choice(_TIMES)
    ),
    **dict.fromkeys(("kinds", "tags"), lambda r: r.choice(_LABELS)),
    "kind": lambda r: r.choice(["fact", "note"]),
    "namespace": lambda r: r.choice(["default", "other", ALL, None]),
    "mode": lambda r: r.choice(["lexical", "vector", "hybrid", None]),
    "fusion": lambda r: r.choice(["rrf", "weighted", None]),
    "token_counter": lambda r: r.choice(["chars", None]),
    "weights": lambda r: (r.random(), r.random()),
    "confidence": lambda r: r.choice([r.random(), True, False]),
    "pinned": lambda r: r.random() < 0.5,
    "metadata": lambda r: {_text(r)[:3]: r.randint(-5, 5) for _ in range(r.randint(0, 2))},
    "items": lambda r: [
        _text(r) if r.random() < 0.5 else {"content": _text(r)} for _ in range(r.randint(0, 3))
    ],
}


def hostile(rng: random.Random, depth: int = 0) -> Any:
    """A scalar of any type (often a special) or a small list, dict or tuple of them."""
    roll = rng.random()
    if roll < 0.7 or depth > 2:
        return rng.choice(
            [
                None,
                rng.random() < 0.5,
                rng.randint(-(2**70), 2**70),
                rng.choice([rng.uniform(-1e9, 1e9), math.nan, -math.inf, 0.0, 1e308]),
                "".join(chr(rng.randint(1, 0x10FFFF)) for _ in range(rng.randint(0, 12))),
                rng.randbytes(rng.randint(0, 6)),
                rng.choice(_SPECIALS),
                rng.choice(_SPECIALS),
            ]
        )
    if roll < 0.8:
        return [hostile(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.9:
        return {str(hostile(rng, depth + 1))[:3]: hostile(rng, depth + 1) for _ in range(2)}
    return (hostile(rng, depth + 1), hostile(rng, depth + 1))


def seed(store: mnemex.Store) -> None:
    for i in range(3):
        store.add(f"memory {i} about deploys", id=f"m{i}", tags=["t"], kind="fact")
    store.add("another namespace's memory", id="o1", namespace="other")
    store.relate("api", "uses", "postgres", source_memory="m0")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def fuzz_calls(
    store: mnemex.Store, rng: random.Random, calls: int, seconds: float
) -> dict[str, Any]:
    signatures = {
        m: [
            (name, p)
            for name, p in inspect.signature(getattr(store, m)).parameters.items()
            if name != "embed"
        ]
        for m in _API
    }
    undocumented: list[str] = []
    kinds: dict[str, int] = {}
    mnemex_errors = done = broken = 0
    deadline = time.time() + seconds
    while done < calls and time.time() < deadline:
        method = rng.choice(_API)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for name, parameter in signatures[method]:
            required = parameter.default is inspect.Parameter.empty
            if not required and rng.random() < 0.5:
                continue
            plausible = name in _PLAUSIBLE and rng.random() < 0.75
            value = _PLAUSIBLE[name](rng) if plausible else hostile(rng)
            if required and parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
                args.append(value)
            else:
                kwargs[name] = value
        done += 1
        try:
            result = getattr(store, method)(*args, **kwargs)
            if inspect.isgenerator(result):
                for _ in result:
                    pass
            continue
        except mnemex.MnemexError:
            mnemex_errors += 1
        except Exception as exc:
            key = f"{method}: {type(exc).__name__}: {str(exc)[:100]}"
            kinds[key] = kinds.get(key, 0) + 1
            if len(undocumented) < SHOWN * 4:
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                undocumented.append(
                    f"store.{method}(*{_short(args)}, **{_short(kwargs)}) -> "
                    f"{type(exc).__name__}: {str(exc)[:160]} "
                    f"(at {Path(frame.filename).name}:{frame.lineno})"
                )
        try:  # after any error the store must still work
            store.search("memory deploys", namespace=ALL)
        except Exception:
            broken += 1
    return {
        "calls": done,
        "mnemex_errors": mnemex_errors,
        "undocumented": sum(kinds.values()),
        "kinds": kinds,
        "examples": undocumented,
        "broken": broken,
    }


def calls_in_own_store(seed_value: int, calls: int, seconds: float) -> dict[str, Any]:
    """:func:`fuzz_calls` on a fresh store of its own, with its own seed."""
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-fuzz-") as tmp,
        mnemex.open(Path(tmp) / "fuzz.db", embedder=None) as store,
    ):
        seed(store)
        return fuzz_calls(store, random.Random(seed_value), calls, seconds)


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several :func:`fuzz_calls` runs, added up."""
    total: dict[str, Any] = {"kinds": {}, "examples": []}
    for part in parts:
        for key in ("calls", "mnemex_errors", "undocumented", "broken"):
            total[key] = total.get(key, 0) + part[key]
        for kind, count in part["kinds"].items():
            total["kinds"][kind] = total["kinds"].get(kind, 0) + count
        total["examples"] += part["examples"]
    return total


def _bad_line(rng: random.Random, good: str) -> str | bytes:
    roll = rng.randrange(5)
    if roll == 0:
        return rng.choice(HOSTILE_LINES)
    if roll == 1:
        return good[: rng.randint(1, len(good) - 1)]  # truncated JSON
    if roll == 2:
        return b'{"content": "' + rng.randbytes(4) + b'\xff\xfe"}'  # invalid UTF-8
    if roll == 3:
        return json.dumps({"content": rng.choice([5, None, ["a"], {"a": 1}, True, ""])})
    field = rng.choice(["confidence", "tags", "created_at"])  # a single tag text is valid
    value = rng.choice([math.inf, {"x": 1}, 10**30])  # and so are negative epoch seconds
    return json.dumps({"content": "bad field", field: value})


def fuzz_imports(store: mnemex.Store, rng: random.Random, files: int) -> dict[str, Any]:
    aborted = lost = unreported = misreported = good_total = bad_total = 0
    examples: list[str] = []
    for f in range(files):
        n_good = rng.choice(
            [rng.randint(1, 300), rng.randint(IMPORT_BATCH - 50, IMPORT_BATCH + 500)]
        )
        good = [
            json.dumps({"id": f"f{f}-{i}", "content": f"file {f} good memory {i} {rng.random()}"})
            for i in range(n_good)
        ]
        lines: list[str | bytes] = list(good)
        for _ in range(rng.randint(1, 12)):
            lines.insert(rng.randint(0, len(lines)), _bad_line(rng, rng.choice(good)))
        good_set = set(good)
        bad_at = [n for n, line in enumerate(lines, 1) if line not in good_set]
        good_total += n_good
        bad_total += len(bad_at)
        payload = [line if isinstance(line, bytes) else line.encode("utf-8") for line in lines]
        try:
            report = import_jsonl(store, payload, namespace=f"imp{f % 7}")
        except Exception as exc:
            aborted += 1
            if len(examples) < SHOWN:
                examples.append(f"file {f}: {type(exc).__name__}: {str(exc)[:160]}")
        else:
            reported = sorted(e.line for e in report.errors)
            unreported += len(set(bad_at) - set(reported))
            misreported += len(set(reported) - set(bad_at))
            if reported != bad_at and len(examples) < SHOWN:
                examples.append(f"file {f}: bad lines {bad_at[:12]}, reported {reported[:12]}")
        ids = [f"f{f}-{i}" for i in range(n_good)]
        lost += len(store.get(ids, namespace=f"imp{f % 7}").missing)
    return {
        "files": files,
        "good": good_total,
        "bad": bad_total,
        "aborted": aborted,
        "lost": lost,
        "unreported": unreported,
        "misreported": misreported,
        "examples": examples,
    }


def report(
    args: argparse.Namespace, calls: dict[str, Any], imports: dict[str, Any], took: float
) -> str:
    kinds = sorted(calls["kinds"].items(), key=lambda kv: -kv[1])
    rows = [
        ("random API calls", f"{calls['calls']:,}"),
        ("answered with a MnemexError", f"{calls['mnemex_errors']:,}"),
        ("undocumented exceptions (not a MnemexError)", f"{calls['undocumented']:,}"),
        ("distinct undocumented (method, exception, message)", f"{len(kinds):,}"),
        ("calls after which the store could not search", f"{calls['broken']:,}"),
        ("import files", f"{imports['files']:,}"),
        ("good / hostile lines in them", f"{imports['good']:,} / {imports['bad']:,}"),
        ("imports aborted", f"{imports['aborted']:,}"),
        ("good lines lost", f"{imports['lost']:,}"),
        (
            "bad lines not reported / good lines reported bad",
            f"{imports['unreported']:,} / {imports['misreported']:,}",
        ),
        ("time", f"{took:.0f} s"),
    ]
    lines = [
        "## Fuzzed API calls and imports",
        "",
        f"`python benchmarks/stress_fuzz.py --calls {args.calls} --seconds {args.seconds:g} "
        f"--imports {args.imports} --seed {args.seed} --jobs {args.jobs}` on {machine()}.",
        "Random calls of the public `Store` methods (the generators of "
        "`tests/test_hostile.py`, plain `random`, lexical only), each parameter of the right "
        "type 3 times in 4 and hostile otherwise; import files of good lines with 1-12 "
        "hostile ones at random places (some files span two import batches). "
        "Target: 0 undocumented exceptions, 0 aborted imports, 0 good lines lost, every bad "
        "line reported.",
        "",
        "| measure | value |",
        "| --- | --- |",
        *(f"| {name} | {value} |" for name, value in rows),
    ]
    if kinds:
        lines += ["", "Undocumented exceptions (count, method: exception):", ""]
        lines += [f"- {count:,} × `{key}`" for key, count in kinds[:20]]
        lines += ["", "First calls that raised them:", ""]
        lines += [f"- `{example}`" for example in calls["examples"][:SHOWN]]
    if imports["examples"]:
        lines += ["", "Imports that went wrong:", ""]
        lines += [f"- {example}" for example in imports["examples"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop the calls after this")
    parser.add_argument("--imports", type=int, default=200, help="import files")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes, each with its own store and seed"
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print, do not touch RELIABILITY.md"
    )
    args = parser.parse_args()
    began = time.time()
    jobs = max(1, args.jobs)
    shares = [
        (args.seed + i, args.calls // jobs + (i < args.calls % jobs), args.seconds)
        for i in range(jobs)
    ]
    if jobs == 1:
        calls = calls_in_own_store(*shares[0])
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            calls = merged(list(pool.map(calls_in_own_store, *zip(*shares, strict=True))))
    rng = random.Random(args.seed)
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-fuzz-") as tmp,
        mnemex.open(Path(tmp) / "import.db", embedder=None) as store,
    ):
        imports = fuzz_imports(store, rng, args.imports)
    body = report(args, calls, imports, time.time() - began)
    print(body)
    if not args.no_write:
        write_section("stress_fuzz", body, RELIABILITY)


if __name__ == "__main__":
    main()
