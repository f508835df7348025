"""The agent hook's latency: ``mnemex hook`` in a new process, as Claude Code runs it.

On a store of ``--size`` memories (SciFact sentences and LoCoMo turns, with
the local model's vectors) in the project's namespace, beside a tenth as many in another
project's, each run starts, one after the other:

- ``python -c pass``: the floor any new Python process pays;
- ``mnemex hook`` fed a ``UserPromptSubmit`` event, lexical (``MNEMEX_EMBEDDER=none``);
- the same, hybrid (the local model loads in the process);
- ``mnemex hook`` fed a ``Stop`` event for a new one-turn session (capture);
- ``mnemex search PROMPT`` and ``mnemex add TEXT`` typed in the project, hybrid, output piped
  (as an agent runs them), and ``mnemex search`` drawing its hits on a terminal (a pty).

It prints the medians and their ratio to ``python -c pass``, and the modules
that take the most import time on the hook's path (``python -X importtime``).

With ``--against REF`` each run also starts the prompt hook (lexical and
hybrid) and the two commands of commit REF on the same store, and POSTs the event to REF's two
servers too: a before/after measured side by side.

    python benchmarks/bench_hooks.py [--size 10000] [--runs 21] [--against main] [--no-write]
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.hook_fixtures
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.hook_fixtures import ClaudeSession

import mnemex
from common import (
    add_texts,
    build_sqlite,
    checkout,
    child_env,
    data_dir,
    heading,
    memories,
    parser,
    publish,
    queries,
    real_embeddings,
    run_checked,
    short_ref,
)

# What the `mnemex` console script pip writes does: import re and sys, import the entry
# point, call it (no runpy, unlike `python -m mnemex`).
ENTRY = "import re, sys; from mnemex.entry import main; sys.argv[0] = 'mnemex'; sys.exit(main())"
SCRIPT = [sys.executable, "-c", ENTRY]


def build(path: Path, namespace: str, texts: list[str]) -> None:
    """A store of ``texts`` in ``namespace``, after a tenth as many of them in another
    project's (one store, as the hooks share it between projects: a namespace is searched
    with its own statistics), with the local model's vectors, written as `mnemex embed`
    leaves it: the vectors, and the record of the embedder the store is indexed with."""
    import numpy as np

    from mnemex.embed.local import LocalEmbedder

    vectors, _ = real_embeddings(texts, "bench")
    model_id = LocalEmbedder().model_id
    other = texts[: len(texts) // 10]
    with mnemex.open(path, embedder=None, namespace=f"{namespace}-other") as store:
        add_texts(store, other, kind="answer")
    every = np.concatenate([vectors[: len(other)], vectors])  # by seq: the other's first
    build_sqlite(path, texts, every, model_id, True, namespace, kind="answer")


def timed(
    command: list[str], env: dict[str, str], payload: bytes = b"", cwd: Path | None = None
) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = run_checked(command, str(command), input=payload, env=env, cwd=cwd)
    return (time.perf_counter() - started) * 1000, done.stdout


def timed_terminal(command: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """:func:`timed` with standard output a terminal (a pseudo-terminal of 120 columns), as
    when a person types the command."""
    import fcntl
    import pty
    import struct
    import termios
    import threading

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

    def drain() -> None:  # the child never waits for the terminal to be read
        with contextlib.suppress(OSError):  # EIO once the child has exited
            while os.read(master, 65536):
                pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    started = time.perf_counter()
    child = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    os.close(slave)
    code = child.wait()
    elapsed = (time.perf_counter() - started) * 1000
    reader.join(timeout=5)
    os.close(master)
    if code:
        sys.exit(f"{command} exited {code} on a terminal")
    return elapsed


def landed(db: Path, session: str, wait: float = 30.0) -> None:
    """Wait until a background capture of ``session`` has stored its turn."""
    import sqlite3

    tag = f"session:{session}"[:64].lower()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        with contextlib.closing(sqlite3.connect(db, timeout=wait)) as conn:
            query = "SELECT count(*) FROM memory_tags WHERE tag = ?"
            if conn.execute(query, (tag,)).fetchone()[0]:
                return
        time.sleep(0.01)
    sys.exit(f"the background capture of {session} stored nothing in {wait:g} s")


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """A running ``mnemex serve`` on a free port (a fixed one may be another's), and its port,
    once it answers."""
    command = [sys.executable, "-m", "mnemex", "serve", "--port", "0"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert server.stderr is not None
    line = server.stderr.readline().decode()  # "answering hook events on http://127.0.0.1:P/hook"
    match = re.search(r":(\d+)/hook", line)
    if match is None:
        server.kill()
        sys.exit(f"mnemex serve did not start: {line}{server.stderr.read().decode()}")
    server.stderr.close()
    return server, int(match.group(1))


def post(port: int, payload: bytes) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Content-Type": "application/json"}
        connection.request("POST", "/hook", body=payload, headers=headers)
        return connection.getresponse().read()
    finally:
        connection.close()


def import_profile(env: dict[str, str], payload: bytes) -> list[tuple[str, float]]:
    """The modules with the largest cumulative import time on the hook's path (ms)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *SCRIPT[1:], "hook", "--no-serve"],
        input=payload,
        capture_output=True,
        env=env,
    )
    rows = []
    for line in done.stderr.decode().splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if match and len(match.group(3)) <= 3:  # top-level imports and their direct children
            rows.append((match.group(4), int(match.group(2)) / 1000))
    return sorted(rows, key=lambda r: -r[1])[:12]


def injection_log_cost(db: Path, writes: int = 200) -> tuple[int, float]:
    """The entries the runs logged, and the median ms of one more ``Store.log_injection``
    (a copy of the last entry) on that store, in this process."""
    with mnemex.open(db, embedder=None) as store:
        entries = store.injections(namespace=mnemex.ALL, limit=1000)
        if not entries:
            sys.exit("the prompt hooks logged no injection")
        last = entries[0]
        fields = ("agent", "session_id", "block", "floor", "namespace")
        again = {name: getattr(last, name) for name in fields}
        again["memories"] = [
            {"id": m.id, "kind": m.kind, "score": m.score, "injected": m.injected, "line": m.line}
            for m in last.memories
        ]
        samples = []
        for _ in range(writes):
            started = time.perf_counter()
            store.log_injection(last.prompt, last.outcome, **again)
            samples.append((time.perf_counter() - started) * 1000)
    return len(entries), statistics.median(samples)


# In a new process, as the prompt hook runs: the store opened, the prompt's decision made,
# then the injection log's part alone timed (redaction, the entry, its write and pruning).
COLD_LOG = """
import json, sys, time
import mnemex
from mnemex.hooks.project import project_namespace
from mnemex.hooks.run import prompt_decision, record_injection
event = json.loads(sys.argv[1])
namespace = project_namespace(event["cwd"])
with mnemex.open(namespace=namespace, embedder=None) as store:
    decision = prompt_decision(store, event["prompt"], event["session_id"], namespace)
    started = time.perf_counter()
    record_injection(store, event, "claude-code", namespace, decision, None)
    print((time.perf_counter() - started) * 1000)
"""


def cold_log_cost(env: dict[str, str], events: list[dict[str, str]]) -> list[float]:
    """Milliseconds the injection log adds to a new prompt hook process, one process per
    event: its imports, the redaction (patterns compiled only when a text could hold a
    secret), the entry and its write."""
    out = []
    for event in events:
        command = [sys.executable, "-c", COLD_LOG, json.dumps(event)]
        done = run_checked(command, "the cold injection log run", text=True, env=env)
        out.append(float(done.stdout.strip()))
    return out


# Where the served prompt hook's time goes: the functions of one event, as `mnemex serve`
# calls them (module attributes, wrapped in this process by served_profile).
PROFILED = [
    ("mnemex.hooks.project", "project_namespace", "the project's namespace"),
    ("mnemex.search.pipeline", "plan_arms", "plan: the query cleaned, the lexical plan, spelling"),
    ("mnemex.search.pipeline", "embed_checked", "the query's embedding (on a worker thread)"),
    ("mnemex.search.pipeline", "retrieve_arms", "both arms (waits for the embedding)"),
    ("mnemex.search.pipeline", "complete_scores", "each candidate's score in the other arm"),
    ("mnemex.search.pipeline", "fuse", "fusion"),
    ("mnemex.search.pipeline", "rank_candidates", "the relevance floor, thresholds, stages"),
    ("mnemex.search.pipeline", "build_hits", "the hits"),
    ("mnemex.search.recall", "read_bodies", "recall: the memories' text"),
    ("mnemex.search.recall", "recall", "recall: the block packed"),
    ("mnemex.hooks.run", "record_injection", "the injection log (after the answer)"),
]


def served_profile(
    db: Path, home: Path, project: Path, prompts: list[str], rounds: int = 3
) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Each step's median wall time (ms) over ``rounds`` passes of the prompts through
    ``handle`` on a store opened and warmed as `mnemex serve` opens it, and the medians of
    the whole event: its wall time to the answer, the CPU time of its thread and of the
    process (the model's threads too) to the answer."""
    import gc
    import importlib

    from mnemex.hooks.run import handle

    spent: dict[str, float] = {}
    wrapped = []
    for module_name, name, label in PROFILED:
        module = importlib.import_module(module_name)
        original = getattr(module, name)

        def timed_call(*a: object, _f=original, _label=label, **k: object) -> object:  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                spent[_label] = spent.get(_label, 0.0) + (time.perf_counter() - started) * 1000

        wrapped.append((module, name, original))
        setattr(module, name, timed_call)
    steps: dict[str, list[float]] = {label: [] for _, _, label in PROFILED}
    whole: dict[str, list[float]] = {"wall": [], "thread CPU": [], "process CPU": []}
    try:
        with mnemex.open(db, embedder="local") as store:
            store.search("warm up", limit=1, namespace=mnemex.ALL)
            gc.freeze()
            for _ in range(rounds):
                for prompt in prompts:
                    event = {"session_id": "profile", "cwd": str(project)}
                    event.update(hook_event_name="UserPromptSubmit", prompt=prompt)
                    spent.clear()
                    marks: list[tuple[float, float, float]] = []
                    now = (time.perf_counter(), time.thread_time(), time.process_time())

                    def answer(_: str, marks=marks) -> None:  # type: ignore[no-untyped-def]
                        marks.append((time.perf_counter(), time.thread_time(), time.process_time()))

                    handle(event, store=store, home=str(home), answer=answer)
                    for key, start, end in zip(whole, now, marks[0], strict=True):
                        whole[key].append((end - start) * 1000)
                    for label in steps:
                        steps[label].append(spent.get(label, 0.0))
    finally:
        for module, name, original in wrapped:
            setattr(module, name, original)
    return [(k, statistics.median(v)) for k, v in steps.items()], {
        k: statistics.median(v) for k, v in whole.items()
    }


# served_profile in a new process, set up as `mnemex serve` sets itself up: BLAS threads that
# sleep as soon as a product is done, set before numpy loads.
PROFILE = """
import json, sys
from pathlib import Path
from mnemex.hooks.run import quiet_blas
quiet_blas()
sys.path.insert(0, sys.argv[1])
from bench_hooks import served_profile
steps, whole = served_profile(*map(Path, sys.argv[2:5]), json.loads(sys.argv[5]))
print(json.dumps([steps, whole]))
"""


def profile_served(
    env: dict[str, str], db: Path, home: Path, project: Path, prompts: list[str]
) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """:func:`served_profile` in a new process, as `mnemex serve` runs."""
    bench = str(Path(__file__).resolve().parent)
    args = [bench, str(db), str(home), str(project), json.dumps(prompts)]
    command = [sys.executable, "-c", PROFILE, *args]
    done = run_checked(command, "the served hook's profile", text=True, env=env)
    steps, whole = json.loads(done.stdout)
    return [(label, ms) for label, ms in steps], whole


def typed_commands(samples, modes, prompt: str, text: str, cwd: Path) -> None:  # type: ignore[no-untyped-def]
    """`mnemex search` and `mnemex add` as a person types them in the project, timed with
    the code of each hybrid mode (this checkout's, and the commit before's)."""
    for mode, env in modes:
        if mode.startswith("hybrid"):
            for command, args in (("search", [prompt]), ("add", [f"{text} ({mode})"])):
                key = mode.replace("hybrid", f"cli {command}")
                samples.setdefault(key, []).append(
                    timed([*SCRIPT, command, *args], env, cwd=cwd)[0]
                )
            key = mode.replace("hybrid", "cli search, terminal")
            samples.setdefault(key, []).append(
                timed_terminal([*SCRIPT, "search", prompt], env, cwd=cwd)
            )


def table_rows(against: str | None, before: str) -> list[tuple[str, str]]:
    """The table's rows: what each is, and the key of its samples."""
    prompt, served = "`UserPromptSubmit`", "`UserPromptSubmit` POSTed to a running `mnemex serve`"

    def old(label: str, key: str) -> list[tuple[str, str]]:  # the commit before's row
        return [(f"{label}, before: commit {before}", f"{key} ({against})")] if against else []

    rows = [row for m in ("lexical", "hybrid") for row in old(f"{prompt}, {m}", m)]
    rows += [(f"{prompt}, lexical", "lexical"), (f"{prompt}, hybrid (loads the model)", "hybrid")]
    rows += [("`Stop`: capture of a one-turn session", "capture")]
    rows += [
        (
            "`Stop` with `--background` (as installed for Codex): hands the capture to a new process and returns",
            "background",
        )
    ]
    rows += [row for m in ("lexical", "hybrid") for row in old(f"{served}, {m}", f"serve {m}")]
    rows += [(f"{served}, lexical", "serve lexical"), (f"{served}, hybrid", "serve hybrid")]
    rows += [
        (
            f"{prompt} in a new `mnemex hook` process that hands it to the running hybrid `mnemex serve`",
            "forwarded",
        )
    ]
    rows += [
        (f"{prompt}, lexical, injection log off (`MNEMEX_INJECTION_LOG=false`)", "lexical, no log")
    ]
    for c in ("search", "add"):
        typed = f"`mnemex {c} ...` typed in the project, hybrid"
        rows += [*old(typed, f"cli {c}"), (typed, f"cli {c}")]
    typed = "`mnemex search ...` typed in the project, hybrid, its hits drawn on a terminal"
    rows += [*old(typed, "cli search, terminal"), (typed, "cli search, terminal")]
    return rows


def environments(tmp: Path, home: Path, against: str | None) -> tuple[dict[str, str], list, dict]:  # type: ignore[type-arg]
    """The plain environment, the hook's modes (name, environment) and the servers' (key,
    environment): lexical, hybrid, lexical without the injection log, and the same from
    commit ``against``'s source on the same store."""
    base = child_env(MNEMEX_HOME=str(home), PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    lexical, hybrid = {**base, "MNEMEX_EMBEDDER": "none"}, {**base, "MNEMEX_EMBEDDER": "local"}
    # The same lexical hook with the injection log off: what the log costs a prompt.
    modes = [("lexical", lexical), ("hybrid", hybrid)]
    served = [("serve lexical", lexical), ("serve hybrid", hybrid)]
    if against:
        other = {"PYTHONPATH": str(checkout(against, tmp / "against"))}
        other["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache-against")
        modes += [(f"{mode} ({against})", {**env, **other}) for mode, env in modes]
        served += [(f"{key} ({against})", {**env, **other}) for key, env in served]
    modes.insert(2, ("lexical, no log", {**lexical, "MNEMEX_INJECTION_LOG": "false"}))
    # Each server has a data folder of its own (where it leaves serve.json) and the store
    # by --db: the hook processes, on the store's own folder, do not see them.
    servers = {}
    for index, (key, env) in enumerate(served):
        (tmp / f"serve-{index}").mkdir()
        servers[key] = {"MNEMEX_DB": str(home / "memories.db"), **env}
        servers[key]["MNEMEX_HOME"] = str(tmp / f"serve-{index}")
    return base, modes, servers


def prompt_event(tmp: Path, project: Path, prompt: str) -> bytes:
    return json.dumps(
        {
            "session_id": "bench",
            "transcript_path": str(tmp / "none.jsonl"),
            "cwd": str(project),
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        }
    ).encode()


def one_run(
    tmp: Path, project: Path, prompt: str, state: dict[str, Any], i: int
) -> dict[str, bytes]:
    """Time every process and server on ``prompt`` (run ``i``); their answers."""
    samples, hook, env = state["samples"], state["hook"], state["base_env"]
    payload = prompt_event(tmp, project, prompt)
    samples["pass"].append(timed([sys.executable, "-c", "pass"], env)[0])
    answers = {}
    # Every other run in the reverse order: no process always follows the same one (the
    # first followed the servers, still writing their injection logs).
    modes = state["modes"] if i % 2 == 0 else state["modes"][::-1]
    for mode, env in modes:
        elapsed, out = timed(hook, env, payload)
        samples[mode].append(elapsed)
        answers[mode] = out.strip()
    # Every other run the commit before's servers first: neither commit always follows the
    # hook processes above.
    order = sorted(state["servers"].items(), key=lambda kv: (i % 2) != kv[0].endswith(")"))
    for key, (_, port) in order:
        started = time.perf_counter()
        answer = post(port, payload)
        samples[key].append((time.perf_counter() - started) * 1000)
        answers[key] = b"" if answer == b"{}" else answer.strip()
    # A new `mnemex hook` process that hands the event to the running hybrid server.
    elapsed, out = timed(hook, state["server_envs"]["serve hybrid"], payload)
    samples["forwarded"].append(elapsed)
    answers["forwarded"] = out.strip()
    return answers


def captures(tmp: Path, project: Path, home: Path, state: dict[str, Any]) -> None:
    """Time the `Stop` hook on a new one-turn session, in the process and handed to another."""
    lexical = dict(state["modes"])["lexical"]
    for key, extra in (("capture", []), ("background", ["--background"])):
        session = ClaudeSession(tmp / f"{uuid.uuid4()}.jsonl", str(project))
        session.turn("Where do we keep the retry policy?", "In config/retry.toml.")
        payload = json.dumps(session.event("Stop", stop_hook_active=False)).encode()
        state["samples"][key].append(timed([*state["hook"], *extra], lexical, payload)[0])
    # The process it started would otherwise still run during the next timings.
    landed(home / "memories.db", session.session_id)


def run_prompts(
    tmp: Path,
    project: Path,
    home: Path,
    prompts: list[str],
    typed: list[str],
    state: dict[str, Any],
) -> dict[str, Any]:
    """Every run, one prompt each; what the section says of the answers."""
    injected: dict[str, int] = {}  # prompts answered with a block (the floor leaves some)
    same_hybrid = 0  # prompts the hybrid server answers as the hybrid new process does
    load = os.getloadavg()[0]
    for i, prompt in enumerate(prompts):
        answers = one_run(tmp, project, prompt, state, i)
        for key, answer in answers.items():
            injected[key] = injected.get(key, 0) + bool(answer)
        ageless = {k: re.sub(rb"age: [^)]*", b"", v) for k, v in answers.items()}
        same_hybrid += ageless["serve hybrid"] == ageless["hybrid"]
        # An empty answer may be a hook stopped at its time limit (counted below).
        if ageless["serve lexical"] != ageless["lexical"] and ageless["lexical"]:
            return {
                "failure": f"serve lexical and hook lexical answer differently for {prompt!r}:\n"
                f"{answers['serve lexical'].decode()}\n{answers['lexical'].decode()}"
            }
        modes = state["modes"] if i % 2 == 0 else state["modes"][::-1]  # as in one_run
        typed_commands(state["samples"], modes, prompt, typed[i], project)
        captures(tmp, project, home, state)
        print(f"  run {i + 1}/{len(prompts)}", file=sys.stderr, flush=True)
    load = max(load, os.getloadavg()[0])
    return {"failure": "", "injected": injected, "same_hybrid": same_hybrid, "load": load}


def hook_logs(home: Path, server_envs: dict[str, dict[str, str]]) -> tuple[list[str], int]:
    """Lines of the hooks.log files that are errors, and the hooks stopped at their time limit
    (a loaded machine: a result, counted)."""
    logs, timeouts = [], 0
    for folder in (home, *(Path(e["MNEMEX_HOME"]) for e in server_envs.values())):
        if (log := folder / "hooks.log").exists():
            lines = log.read_text().splitlines()
            timeouts += sum("timed out after" in line for line in lines)
            logs += [f"{folder.name}: {x}" for x in lines if "timed out after" not in x]
    return logs, timeouts


def measure(
    args: Any, tmp: Path, prompts: list[str], texts: list[str], typed: list[str]
) -> dict[str, Any]:
    project, home = tmp / "project", tmp / "home"
    (project / ".git").mkdir(parents=True)
    home.mkdir()
    started = time.perf_counter()
    build(home / "memories.db", str(project), texts)
    print(f"built {args.size:,} memories in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    base_env, modes, server_envs = environments(tmp, home, args.against)
    hook = [*SCRIPT, "hook", "--agent", "claude-code", "--no-serve"]
    samples: dict[str, list[float]] = {
        k: [] for k in ("pass", "capture", "background", "forwarded")
    }
    samples |= {k: [] for k in [*dict(modes), *server_envs]}
    servers = {key: start_server(env) for key, env in server_envs.items()}
    state = {"samples": samples, "hook": hook, "base_env": base_env, "modes": modes}
    state |= {"servers": servers, "server_envs": server_envs, "against": args.against}
    try:
        # Compiles the bytecode into the cache; the hybrid run also writes the vector snapshot
        # and the model's checksum stamp, as the first prompt of a session does.
        warm_up = {"cwd": str(project), "hook_event_name": "UserPromptSubmit", "prompt": prompts[0]}
        for _, env in modes:
            timed([*hook, "--timeout", "60"], env, json.dumps(warm_up).encode())
        ran = run_prompts(tmp, project, home, prompts, typed, state)
    finally:  # a failed run leaves no server behind
        for server, _ in servers.values():
            server.terminate()
            server.wait()
    logs, ran["timeouts"] = hook_logs(home, server_envs)
    if ran["failure"] or logs:
        sys.exit("\n".join([ran["failure"], *logs]).strip())
    lexical = dict(modes)["lexical"]
    ran["profile"] = import_profile(lexical, prompt_event(tmp, project, prompts[-1]))
    ran["logged"], ran["write_ms"] = injection_log_cost(home / "memories.db")
    events = [{"session_id": "cold", "cwd": str(project), "prompt": p} for p in prompts]
    ran["cold"] = statistics.median(cold_log_cost(lexical, events))
    (tmp / "profile").mkdir()
    hybrid = dict(modes)["hybrid"]
    ran["steps"], ran["whole"] = profile_served(
        hybrid, home / "memories.db", tmp / "profile", project, prompts
    )
    return ran | {"samples": samples}


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--size", type=int, default=10_000)
    arguments.add_argument("--runs", type=int, default=21)
    arguments.add_argument(
        "--against", metavar="REF", help="also time the hooks of this git commit (e.g. main)"
    )
    args = arguments.parse_args()
    folder = data_dir(args.data)
    texts = memories(folder, args.size + args.runs)
    texts, typed = texts[: args.size], texts[args.size :]  # typed: what `mnemex add` adds
    prompts = [q for q in queries(folder) if len(q) >= 20][: args.runs]
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as tmp:
        ran = measure(args, Path(tmp), prompts, texts, typed)
    publish("bench_hooks", section(args, ran, prompts), args.no_write)


def served_differences(samples: dict[str, list[float]], against: str | None) -> dict[str, float]:
    """The served rows' paired differences with the commit before (the same prompt in the
    same run, this checkout's less the other's; none without one): steadier than two
    medians on a loaded machine."""
    if not against:
        return {}
    return {
        key: statistics.median(
            a - b for a, b in zip(samples[key], samples[f"{key} ({against})"], strict=True)
        )
        for key in ("serve lexical", "serve hybrid")
    }


def served_lines(pairs: dict[str, float]) -> list[str]:
    """RESULTS.md's paragraph on :func:`served_differences` (none without them)."""
    if not pairs:
        return []
    said = ", ".join(f"{k.removeprefix('serve ')} {v:+.2f} ms" for k, v in pairs.items())
    return [
        "Served, the medians of the paired differences with the commit before (the same "
        f"prompt in the same run, this checkout's less the commit before's): {said}.",
        "",
    ]


def profile_lines(
    steps: list[tuple[str, float]], whole: dict[str, float], prompts: int
) -> list[str]:
    """RESULTS.md's lines on where the served prompt hook's time goes."""
    return [
        "",
        "Where a served hybrid prompt's time goes (`handle`, as `mnemex serve` calls it, in "
        f"a process set up as the server is, on the same store, after the runs: {prompts} prompts, 3 "
        "rounds, medians of each step's wall time; the embedding runs on a worker thread "
        "while the plan and the lexical arm run, and the arms wait for it). To the answer: "
        f"{whole['wall']:.2f} ms of wall time, {whole['thread CPU']:.2f} ms of CPU in the "
        f"event's thread, {whole['process CPU']:.2f} ms in the process (the model's threads "
        "too). The HTTP round trip adds the difference between the served row above and "
        "this wall time.",
        "",
        "| step | median |",
        "| --- | ---: |",
        *(f"| {label} | {ms:.2f} ms |" for label, ms in steps),
    ]


def section(args: Any, ran: dict[str, Any], prompts: list[str]) -> str:
    samples, profile, cold, write_ms = ran["samples"], ran["profile"], ran["cold"], ran["write_ms"]
    med = {k: statistics.median(v) for k, v in samples.items()}
    paired = statistics.median(
        a - b for a, b in zip(samples["lexical"], samples["lexical, no log"], strict=True)
    )
    base, rows = (
        med["pass"],
        table_rows(args.against, short_ref(args.against) if args.against else ""),
    )
    answered = ", ".join(f"{k} {v}/{len(prompts)}" for k, v in ran["injected"].items())
    lines = [
        *heading(
            "## Agent hook latency (`benchmarks/bench_hooks.py`)",
            f"; load average {ran['load']:.1f}",
        ),
        f"`mnemex hook` in a new process, as the agent runs it (stdin JSON in, stdout out), on a "
        f"store of {args.size:,} memories in the project's namespace beside "
        f"{args.size // 10:,} of another project's (a namespace is searched with its own "
        "statistics), with the local model's vectors (SciFact sentences and "
        f"LoCoMo turns), {len(prompts)} runs of 5-10-word prompts (SciFact claims, LoCoMo "
        "questions), each run starting the processes below one after the other (in the reverse order every "
        "other run), then "
        "POSTing the prompt event to running `mnemex serve` (one lexical, one hybrid, and the "
        "same two of the commit before when there is one; started and warmed up before the "
        "runs, the commit before's POSTed first every other run); wall time of the whole "
        "process (or of the HTTP round trip), median. The hook runs as the `mnemex` console script does (import "
        "`mnemex.entry`, call `main`); bytecode compiled and cached, as after `pip install` "
        "(`PYTHONPYCACHEPREFIX`). One hook run before the timed runs, as the first prompt of "
        "a session, writes the store's vector snapshot (`<db>.<model>.vectors`) and background "
        "levels (`.background`), the model file's checksum stamp and the folded model "
        "(`models/` in the data folder), which the hybrid runs then read.",
        "",
        "| process | median | × `python -c pass` |",
        "| --- | ---: | ---: |",
        f"| `python -c pass` | {base:.1f} ms | 1.0 |",
        *(f"| {label} | {med[key]:.1f} ms | {med[key] / base:.2f} |" for label, key in rows),
        "",
        *served_lines(served_differences(samples, args.against)),
        f"The injection log costs the prompt hook {paired:+.1f} ms (the median of the "
        "paired differences between the lexical hook with the log, the default, and "
        "without it, in the same runs; whole processes, so within their noise). Timed "
        f"alone in {len(prompts)} new hook processes (after the answer: the log's imports, "
        "the redaction, the entry, its insert and pruning in one transaction) it takes "
        f"{cold:.2f} ms at the median, and `Store.log_injection` in a warm process "
        f"{write_ms:.2f} ms on a log of {ran['logged']:,} entries. A server (`mnemex serve`) sends "
        "its answer before it writes the entry.",
        "",
        "Prompts with a block injected (the relevance floor answers the others with "
        "nothing): "
        + answered
        + f". Hook processes stopped at their time limit (2 s): {ran['timeouts']}. "
        "The lexical answer of `mnemex serve` is checked equal to the new process's; the "
        f"hybrid answers are the same for {ran['same_hybrid']} of {len(prompts)} prompts (the server "
        "runs the optimized graph, the hook process the folded model: the same memories "
        "unless two are within float rounding of each other). "
        "Largest imports on the lexical path "
        "(`python -X importtime` of the same command, cumulative): "
        + ", ".join(f"`{m}` {t:.0f} ms" for m, t in profile[:8])
        + ".",
        *profile_lines(ran["steps"], ran["whole"], len(prompts)),
    ]
    print("largest imports (cumulative ms):", ", ".join(f"{m} {t:.0f}" for m, t in profile))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
