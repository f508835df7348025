"""Quality through the hooks: LoCoMo conversations replayed as agent sessions.

Each LoCoMo dev conversation becomes a project; each of its sessions a Claude
Code transcript (the first speaker's turns as user prompts, the second's as
assistant answers, at the session's date), captured by the ``Stop`` hook.
Then every question (categories 1-4) is sent as a ``UserPromptSubmit`` from a
new session, and we check whether the turns named in its evidence are inside
the injected block. Beside it, ``Store.recall`` for the same question on the
same memories: the hook path should lose nothing against it.

    python benchmarks/eval_hooks.py [--mode lexical|hybrid] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import data_dir, machine, write_section
from mnemex.eval.data import load_locomo, parse_session_time
from mnemex.hooks.capture import memory_id
from mnemex.hooks.run import handle


def write_sessions(
    sample: dict[str, Any], folder: Path, cwd: str
) -> tuple[list[Path], dict[str, list[str]]]:
    """One transcript per session; returns the files and, per memory id, the dia ids it holds."""
    conv = sample["conversation"]
    first = conv["speaker_a"]
    holds: dict[str, list[str]] = defaultdict(list)
    files = []
    n = 1
    while f"session_{n}" in conv:
        start = parse_session_time(conv[f"session_{n}_date_time"])
        session = str(uuid.uuid4())
        path = folder / f"{sample['sample_id']}-s{n}.jsonl"
        lines = []
        anchor = None
        for index, turn in enumerate(conv[f"session_{n}"]):
            content = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                content += f" [shares an image: {turn['blip_caption']}]"
            stamp = (start + timedelta(seconds=30 * index)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            line_id = str(uuid.uuid4())
            base = {
                "uuid": line_id,
                "sessionId": session,
                "cwd": cwd,
                "timestamp": stamp,
                "isSidechain": False,
            }
            if turn["speaker"] == first or anchor is None:
                anchor = line_id
                lines.append(
                    {**base, "type": "user", "message": {"role": "user", "content": content}}
                )
                holds[memory_id("claude-code", anchor, "prompt")].append(str(turn["dia_id"]))
            else:
                lines.append(
                    {
                        **base,
                        "type": "assistant",
                        "message": {
                            "role": "assistant",
                            "content": [{"type": "text", "text": content}],
                        },
                    }
                )
                holds[memory_id("claude-code", anchor, "answer")].append(str(turn["dia_id"]))
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        files.append(path)
        n += 1
    return files, holds


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("lexical", "hybrid"), default="lexical")
    parser.add_argument("--data")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    folder = data_dir(args.data)
    path = folder / "locomo" / "locomo10-dev.json"
    samples = json.loads(path.read_text(encoding="utf-8"))
    questions = load_locomo(path).questions
    # Capture stores without vectors (a hook would start `mnemex.hooks.embedder`; here the
    # store is embedded once, after every session is captured).
    os.environ["MNEMEX_EMBEDDER"] = "none"

    with tempfile.TemporaryDirectory(prefix="eval-hooks-") as tmp_name:
        tmp = Path(tmp_name)
        home, db = tmp / "home", tmp / "home" / "memories.db"
        home.mkdir()
        projects: dict[str, str] = {}
        holds: dict[str, list[str]] = {}
        started = time.perf_counter()
        sessions = 0
        for sample in samples:
            project = tmp / str(sample["sample_id"])
            (project / ".git").mkdir(parents=True)
            projects[str(sample["sample_id"])] = str(project)
            files, held = write_sessions(sample, tmp, str(project))
            holds.update(held)
            for file in files:
                event = {
                    "session_id": file.stem,
                    "transcript_path": str(file),
                    "cwd": str(project),
                    "hook_event_name": "Stop",
                    "stop_hook_active": False,
                }
                handle(event, db=str(db), home=str(home))
                sessions += 1
        capture_s = time.perf_counter() - started
        os.environ["MNEMEX_EMBEDDER"] = "none" if args.mode == "lexical" else "local"
        store = mnemex.open(db)
        if args.mode == "hybrid":
            store.embed()
        memories = store.count(namespace=mnemex.ALL)
        kinds = store.stats(namespace=mnemex.ALL).kinds
        stats = {"hook": [0, 0, 0], "recall": [0, 0, 0]}  # any evidence, all evidence, tokens
        by_category: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
        same = 0
        started = time.perf_counter()
        for q in questions:
            ns = projects[q.namespace]
            evidence = {e.split(":", 1)[1] for e in q.evidence}
            event = {
                "session_id": "eval-questions",
                "transcript_path": str(tmp / "q.jsonl"),
                "cwd": ns,
                "hook_event_name": "UserPromptSubmit",
                "prompt": q.text,
            }
            out = handle(event, store=store)  # the store stays open: the model loads once
            block = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""
            found = store.recall(q.text, namespace=ns)
            recalled = {m.id for m in found.memories}
            # A memory is in the block when its line (its excerpt, when recall cut it) is.
            flat = " ".join(block.split())
            in_block = {m.id for m in found.memories if " ".join(m.line.split()) in flat}
            hook_dias = {d for i in in_block for d in holds.get(i, [])}
            recall_dias = {d for i in recalled for d in holds.get(i, [])}
            for key, dias, size in (
                ("hook", hook_dias, tokens(block)),
                ("recall", recall_dias, found.tokens),
            ):
                stats[key][0] += bool(dias & evidence)
                stats[key][1] += evidence <= dias
                stats[key][2] += size
            by_category[q.category][0] += 1
            by_category[q.category][1] += bool(hook_dias & evidence)
            by_category[q.category][2] += bool(recall_dias & evidence)
            same += in_block == recalled
        query_s = time.perf_counter() - started
        store.close()
        log = home / "hooks.log"
        if log.exists():
            sys.exit(f"the hook logged errors:\n{log.read_text()}")

    n = len(questions)
    hook, rec = stats["hook"], stats["recall"]
    print(
        f"{len(samples)} conversations, {sessions} sessions captured into {memories:,} memories "
        f"({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}) in {capture_s:.1f} s"
    )
    print(
        f"{n} questions, {args.mode}: evidence inside the injected block {hook[0] / n:.3f} "
        f"(all of it {hook[1] / n:.3f}), {hook[2] / n:.0f} tokens; recall {rec[0] / n:.3f} "
        f"(all {rec[1] / n:.3f}), {rec[2] / n:.0f} tokens; identical memories {same}/{n}"
    )
    lines = [
        f"### {args.mode}",
        "",
        f"Machine: {machine()}",
        "",
        f"{len(samples)} conversations, {sessions} sessions captured by the `Stop` hook into "
        f"{memories:,} memories ({', '.join(f'{v:,} {k}' for k, v in sorted(kinds.items()))}) "
        f"in {capture_s:.1f} s; {n} questions (categories 1-4) sent as `UserPromptSubmit` in "
        f"{query_s:.1f} s ({query_s / n * 1000:.1f} ms each, in-process on one open store, as `mnemex serve` "
        "answers them).",
        "",
        "| path | evidence in the block (any) | all evidence in the block | tokens per block (len/4) |",
        "| --- | ---: | ---: | ---: |",
        f"| `UserPromptSubmit` hook | {hook[0] / n:.3f} | {hook[1] / n:.3f} | {hook[2] / n:.0f} |",
        f"| `Store.recall` | {rec[0] / n:.3f} | {rec[1] / n:.3f} | {rec[2] / n:.0f} |",
        "",
        f"The hook injected exactly recall's memories for {same}/{n} questions. Per category "
        "(questions; share with evidence in the block, hook / recall): "
        + "; ".join(
            f"{c}: {v[0]}, {v[1] / v[0]:.3f} / {v[2] / v[0]:.3f}"
            for c, v in sorted(by_category.items())
        )
        + ".",
    ]
    if not args.no_write:
        name = f"eval_hooks_{args.mode}"
        body = "\n".join(lines)
        if args.mode == "lexical":  # the first of the two sections carries the title
            body = (
                "## Recall through the hooks on LoCoMo-dev (`benchmarks/eval_hooks.py`)\n\n" + body
            )
        write_section(name, body)
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
