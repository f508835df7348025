"""``mnemex hook``: one command for every lifecycle event of Claude Code and Codex.

The agent passes a JSON object on stdin (``session_id``, ``transcript_path``,
``cwd``, ``hook_event_name``; ``prompt`` on ``UserPromptSubmit``; ``source``
on ``SessionStart``). ``SessionStart`` and ``UserPromptSubmit`` answer with
``hookSpecificOutput.additionalContext`` JSON on stdout, which both agents put
in front of the model; the capture events print nothing.

A hook never breaks the agent: whatever goes wrong (bad stdin, a locked or
broken store, a slow disk) it exits 0 with nothing on stdout and writes one
line to ``hooks.log`` in the data folder. Each event runs under a hard time
limit; past it the process exits at once (a write in progress rolls back).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from mnemex.hooks import CLAUDE_CODE, CODEX, MAX_TIMEOUT, MIN_TIMEOUT
from mnemex.hooks.log import log
from mnemex.hooks.log import text_field as _text

# Not typing's TYPE_CHECKING, and pathlib only where needed: a hook process that hands
# its event to a running server imports little more than json and socket.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from typing import Any

    from mnemex.models import RecallResult
    from mnemex.search.recall import Packed
    from mnemex.store import Store

SESSION_START = "SessionStart"
USER_PROMPT = "UserPromptSubmit"
CAPTURE_EVENTS = ("Stop", "PreCompact", "SessionEnd", "SubagentStop")
PROMPT_TIMEOUT = 2.0  # seconds, SessionStart and UserPromptSubmit
# Seconds before a prompt event's limit by which the query must be embedded; past it the
# prompt is answered from the lexical arm, in time (the rest of the search, the packing
# and the answer fit in what is left, under load too).
ANSWER_MARGIN = 0.5
NOTE = "note:"  # a line of hooks.log that is no error (the rest are)
LATE = "answered lexically"  # how hooks.log notes a prompt whose query was embedded too late
LOG_GRACE = 0.5  # seconds a prompt hook waits, after its answer, for the injection log
CAPTURE_TIMEOUT = 30.0  # seconds, the capture events (asynchronous where the agent allows)
MAX_STDIN = 4 * 1024 * 1024
MAX_PROMPT_CHARS = 4_000  # of a prompt, for the recall query
MIN_PROMPT_CHARS = 8
SESSION_EXTRA = 4  # memories recall may take beyond the limit, to skip the session's own
SERVE_FILE = "serve.json"  # where a running `mnemex serve` leaves its port
SERVE_LOCK = "serve.lock"  # held by the one `mnemex serve` of a data folder
SERVE_IDLE_EXIT = 1800.0  # seconds without an event before a server a hook started stops
# Prompts that ask for nothing to remember.
ACKNOWLEDGEMENTS = frozenset(
    "ok okay k yes no y n yep nope sure thanks thank you thx ty great nice cool good "
    "perfect done lgtm continue proceed go on go ahead next again retry".split()
)
GIST_PROMPTS = 5  # prompts of the last session shown on SessionStart
GIST_PROMPT_CHARS = 120
NOTABLE_CANDIDATES = 20  # memories considered for SessionStart besides the gist


def parse_argv(argv: list[str]) -> dict[str, Any] | None:
    """The options of ``[--db F] [-n NS] [--home D] hook [--agent A] [--timeout S]``, or
    ``None`` when ``argv`` is anything else (then the full CLI parses it)."""
    names = {"--db": "db", "-n": "namespace", "--namespace": "namespace", "--home": "home"}
    out: dict[str, Any] = {}
    args = list(argv)
    while args and args[0] != "hook":
        key, value, args = _option(args)
        if key not in names or value is None:
            return None
        out[names[key]] = value
    if not args:
        return None
    args = args[1:]
    while args:
        key, value, args = _option(args)
        if key == "--agent" and value in (CLAUDE_CODE, CODEX):
            out["agent"] = value
        elif key in ("--no-serve", "--background"):
            out["start_server" if key == "--no-serve" else "background"] = key == "--background"
            args = [value, *args] if value is not None else args
        elif key == "--timeout" and value is not None:
            try:
                seconds = float(value)
            except ValueError:
                return None
            if not MIN_TIMEOUT <= seconds <= MAX_TIMEOUT:
                return None  # click says what is wrong
            out["timeout"] = seconds
        else:
            return None
    if "namespace" not in out and os.environ.get("MNEMEX_NAMESPACE"):
        out["namespace"] = os.environ["MNEMEX_NAMESPACE"]
    return out


def _option(args: list[str]) -> tuple[str, str | None, list[str]]:
    key = args[0]
    if "=" in key and key.startswith("--"):
        key, value = key.split("=", 1)
        return key, value, args[1:]
    if len(args) < 2:
        return key, None, []
    return key, args[1], args[2:]


def main(
    *,
    agent: str | None = None,
    namespace: str | None = None,
    db: str | None = None,
    home: str | None = None,
    timeout: float | None = None,
    stdin: Any = None,
    start_server: bool = True,
    background: bool = False,
) -> None:
    """Run one hook event from stdin; print the agent's context, if any; always exit 0.

    A prompt event's answer is written as soon as it is known; the injection log is
    written after it, within :data:`LOG_GRACE` seconds, or not at all.
    """
    quiet_blas(threads="1")  # a hook's products are small
    limit = None if timeout is None else min(timeout, threading.TIMEOUT_MAX)  # --timeout 1e400
    deadline = time.monotonic() + (PROMPT_TIMEOUT if limit is None else limit)
    result: dict[str, Any] = {}
    event: dict[str, Any] = {}
    source = stdin if stdin is not None else sys.stdin.buffer
    ready = threading.Event()  # the answer (or the error) is known
    started: list[Path] = []  # the data folder of the background server this event started

    def answered(out: str) -> None:
        if started:
            said = (agent or guess_agent(event)) == CLAUDE_CODE  # it shows systemMessage
            out = announce(out, started[0], event, tell=said)
        result["out"] = out
        ready.set()

    def work() -> None:
        try:
            raw = source.read(MAX_STDIN)
            parsed = json.loads(raw)
            if not isinstance(parsed, dict):
                raise ValueError(f"the hook input is JSON {type(parsed).__name__}, not an object")
            event.update(parsed)
            if background and event.get("hook_event_name") in CAPTURE_EVENTS:
                detach(raw, agent or guess_agent(event), namespace, db, home)
                return
            forwarded = None if namespace is not None else forward(raw, agent, db, home)
            if forwarded is not None:
                result["out"] = forwarded
                return
            prompt_event = event.get("hook_event_name") in (SESSION_START, USER_PROMPT)
            if start_server and namespace is None and prompt_event:
                try:  # before answering: the next prompt gains even if this one runs late
                    server = start_background_server(db, home)
                    started.extend([server] if server is not None else [])
                except Exception as exc:
                    log(home, event, f"could not start mnemex serve: {type(exc).__name__}: {exc}")
            out = handle(
                event,
                agent=agent,
                namespace=namespace,
                db=db,
                home=home,
                deadline=deadline,
                answer=answered,
            )
            if not ready.is_set():
                answered(out)
        except BaseException as exc:
            if not ready.is_set():
                result["error"] = exc
        finally:
            ready.set()

    worker = threading.Thread(target=work, daemon=True, name="mnemex-hook")
    worker.start()
    _answer(worker, ready, result, event, home, limit)


def _answer(
    worker: threading.Thread,
    ready: threading.Event,
    result: dict[str, Any],
    event: Mapping[str, Any],
    home: str | None,
    limit: float | None,
) -> None:
    """Wait for the answer within the event's limit (else log and exit at once), write it,
    then give the injection log :data:`LOG_GRACE` seconds."""
    capture = event.get("hook_event_name") in CAPTURE_EVENTS
    ready.wait(PROMPT_TIMEOUT if limit is None else limit)
    if limit is None and not ready.is_set() and capture:
        ready.wait(CAPTURE_TIMEOUT - PROMPT_TIMEOUT)
    if not ready.is_set():
        waited = limit or (CAPTURE_TIMEOUT if capture else PROMPT_TIMEOUT)
        log(home, event, f"timed out after {waited:g} s")
        os._exit(0)
    if "error" in result:
        error = result["error"]
        log(home, event, f"{type(error).__name__}: {error}")
        return
    out = result.get("out")
    if out:
        try:
            sys.stdout.write(out)
            sys.stdout.flush()
        except OSError as exc:  # the agent stopped reading
            log(home, event, f"could not write the answer: {exc}")
    worker.join(LOG_GRACE)  # the injection log, written after the answer
    if worker.is_alive():
        log(home, event, f"the injection log was not written within {LOG_GRACE:g} s")


_blas_defaults: dict[str, str] = {}  # what quiet_blas set (not the user)


def quiet_blas(threads: str | None = None) -> None:
    """Before numpy loads: OpenBLAS threads that sleep as soon as a product is done (by
    default they spin for a tenth of a second or more, on the cores the model's threads
    need), and with ``threads``, that many. Values the user set are kept."""
    if "numpy" in sys.modules:
        return
    wanted = {"OPENBLAS_THREAD_TIMEOUT": "4"}  # the shortest: 2**4 cycles
    if threads is not None:
        wanted["OPENBLAS_NUM_THREADS"] = threads
    for key, value in wanted.items():
        if key not in os.environ:
            os.environ[key] = _blas_defaults[key] = value


def child_env(home: str | os.PathLike[str]) -> dict[str, str]:
    """The environment of a background process for the data folder ``home``: this one's,
    less the BLAS thread count chosen for this process alone."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if "OPENBLAS_NUM_THREADS" not in _blas_defaults and "OPENBLAS_NUM_THREADS" in os.environ:
        env["OPENBLAS_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"]
    return {**env, "MNEMEX_HOME": str(home)}


def detach(raw: bytes, agent: str, namespace: str | None, db: str | None, home: str | None) -> None:
    """Hand a capture event to a new background ``mnemex hook`` and return at once.

    For agents that wait for their hooks (Codex): the agent goes on while the
    transcript is read and stored.
    """
    import subprocess

    command = [sys.executable, "-m", "mnemex"]
    for option, value in (("--db", db), ("--home", home), ("--namespace", namespace)):
        if value is not None:
            command += [option, value]
    child = subprocess.Popen(
        [*command, "hook", "--agent", agent, "--no-serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert child.stdin is not None
    child.stdin.write(raw)
    child.stdin.close()


def forward(raw: bytes, agent: str | None, db: str | None, home: str | None) -> str | None:
    """The answer of a running ``mnemex serve`` on the same store, or ``None`` when there is
    none: the event is then handled in this process.

    ``mnemex serve`` leaves its port and store in ``serve.json`` in the data
    folder; the store and model it keeps loaded save a new process their
    loading time. Checking costs a file read (no settings, no HTTP library).
    """
    folder = os.path.expanduser(home or os.environ.get("MNEMEX_HOME") or _default_home())
    try:
        with open(os.path.join(folder, SERVE_FILE), encoding="utf-8") as stream:
            info = json.load(stream)
        port = int(info["port"])
        served = str(info["db"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    target = db or os.environ.get("MNEMEX_DB")
    configured = os.path.exists(os.path.join(folder, "config.toml")) or os.environ.get(
        "MNEMEX_CONFIG"
    )
    if target is None and configured:
        from mnemex.config import load_settings

        target = str(load_settings(db, home=home).db_path)
    mine = os.path.normpath(os.path.expanduser(target or os.path.join(folder, "memories.db")))
    if mine != os.path.normpath(served):
        return None
    return _post(port, "/hook" if agent is None else f"/hook?agent={agent}", raw)


def _default_home() -> str:
    from platformdirs import user_data_dir

    return str(user_data_dir("mnemex", appauthor=False))


def _post(port: int, path: str, body: bytes) -> str | None:
    """POST ``body`` to 127.0.0.1:port; the response's body, or ``None`` on any failure."""
    import socket

    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    chunks = []
    try:
        # Not socket.create_connection: its name lookup imports the IDNA codec.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as connection:
            connection.settimeout(0.2)
            connection.connect(("127.0.0.1", port))
            connection.settimeout(PROMPT_TIMEOUT)
            connection.sendall(head + body)
            while chunk := connection.recv(65536):
                chunks.append(chunk)
    except OSError:
        return None
    response = b"".join(chunks)
    status, _, rest = response.partition(b"\r\n")
    if status.split(b" ")[1:2] != [b"200"]:
        return None
    text = rest.partition(b"\r\n\r\n")[2].decode("utf-8", "replace").strip()
    return "" if text in ("", "{}") else text + "\n"


def handle(
    event: Mapping[str, Any],
    *,
    agent: str | None = None,
    namespace: str | None = None,
    db: str | None = None,
    home: str | None = None,
    store: Store | None = None,
    deadline: float | None = None,
    answer: Callable[[str], None] | None = None,
) -> str:
    """What to print for ``event`` (``""`` for nothing); captures on the capture events.

    A prompt whose query is not embedded ``ANSWER_MARGIN`` seconds before the
    ``deadline`` (``time.monotonic()``; default: ``PROMPT_TIMEOUT`` from now) is
    answered from the lexical arm, and ``hooks.log`` says so. A prompt the store was
    asked about is recorded in the injection log (:func:`record_injection`), after
    ``answer`` is called with what to print. A capture embeds what it stored before it
    returns: the next prompt finds it by both arms.
    """
    name = event.get("hook_event_name")
    if name not in (SESSION_START, USER_PROMPT, *CAPTURE_EVENTS):
        return ""
    cwd = _text(event.get("cwd")) or os.getcwd()
    if namespace is None:
        from mnemex.hooks.project import project_namespace

        namespace = project_namespace(cwd, home)
    agent = agent or guess_agent(event)
    if name == USER_PROMPT:
        prompt = _text(event.get("prompt"))
        if prompt is None or not worth_recalling(prompt):
            return ""
        until = (
            time.monotonic() + PROMPT_TIMEOUT if deadline is None else deadline
        ) - ANSWER_MARGIN
        with _opened(store, db, home, namespace, embedder=True, until=until) as opened:
            session = _text(event.get("session_id"))
            decision = prompt_decision(opened, prompt, session, namespace, until)
            out = _context(name, decision.block)
            if answer is not None:
                answer(out)
            if decision.late:
                log(home or str(opened.settings.home), event, f"{NOTE} {LATE}: {decision.late}")
            record_injection(opened, event, agent, namespace, decision, home)
        return out
    if name == SESSION_START:
        with _opened(store, db, home, namespace, embedder=False) as opened:
            block = session_context(opened, namespace)
        return _context(name, block)
    session_id = _text(event.get("session_id"))
    path = _text(event.get("transcript_path"))
    if session_id is None or path is None:
        raise ValueError(f"{name} without session_id and transcript_path: nothing to capture")
    from mnemex.hooks.capture import capture

    with _opened(store, db, home, namespace, embedder=True) as opened:
        final = name == "SessionEnd"
        capture(opened, agent, session_id, path, final=final, namespace=namespace, embed=True)
        if opened.last_embedding_error:  # stored without vectors: a background process retries
            embed_later(opened)
    return ""


def guess_agent(event: Mapping[str, Any]) -> str:
    path = _text(event.get("transcript_path")) or ""
    from pathlib import Path

    if ".codex" in Path(path).parts or Path(path).name.startswith("rollout-"):
        return CODEX
    return CLAUDE_CODE


def worth_recalling(prompt: str) -> bool:
    """False for prompts that ask for nothing: "ok", "thanks", a slash command."""
    from mnemex.hooks.injected import clean_text

    text = clean_text(prompt)
    if len(text) < MIN_PROMPT_CHARS or text.startswith("/"):
        return False
    words = "".join(c if c.isalnum() else " " for c in text.lower()).split()
    return not all(w in ACKNOWLEDGEMENTS for w in words)


class Decision:
    """What the prompt hook decided for a prompt: the block (``""``: nothing), the task
    recalled for, the recall behind it, the ids that went into the block, the session's
    own ids left out, the block's tokens, and why it was answered lexically (``""``: it
    was not). (A plain class: a hook process that hands
    its event to a server does not import typing.)"""

    __slots__ = ("block", "found", "injected", "late", "own", "task", "tokens")

    def __init__(
        self,
        block: str,
        task: str,
        found: RecallResult,
        injected: tuple[str, ...],
        own: frozenset[str],
        tokens: int,
        late: str = "",
    ) -> None:
        self.block, self.task, self.found = block, task, found
        self.injected, self.own, self.tokens, self.late = injected, own, tokens, late


def prompt_decision(
    store: Store,
    prompt: str,
    session_id: str | None,
    namespace: str | None = None,
    until: float | None = None,
) -> Decision:
    """The block for a prompt, and how it was decided (:class:`Decision`).

    The memories of the session itself are left out: they are in the
    conversation already.
    """
    from mnemex.hooks.injected import clean_text
    from mnemex.search.pipeline import kept_query_vectors

    task = clean_text(prompt)[:MAX_PROMPT_CHARS]
    with kept_query_vectors(store.session):  # a second recall does not embed the prompt again
        return _decide(store, task, session_id, namespace, until)


def _decide(
    store: Store, task: str, session_id: str | None, namespace: str | None, until: float | None
) -> Decision:
    found = store.recall(task, namespace=namespace)  # what `recall` answers, exactly
    late = _late(store, found, until)
    if not found.memories or not _own(store, found, session_id, namespace):
        block = found.markdown if found.memories else ""
        return Decision(block, task, found, found.ids, frozenset(), found.tokens, late)
    # The session's own memories are in the conversation already: ask for more, leave them out.
    found = store.recall(
        task,
        max_memories=found.max_memories + SESSION_EXTRA,  # the first recall's RecallOptions
        namespace=namespace,
        mode="lexical" if late else None,  # no second wait for the model
    )
    own = frozenset(_own(store, found, session_id, namespace))
    kept = [m for m in found.memories if m.id not in own]
    if not kept:
        return Decision("", task, found, (), own, 0, late)
    packed = _pack(store, [m.line for m in kept])
    chosen = tuple(kept[i].id for i in packed.chosen)
    return Decision(packed.markdown, task, found, chosen, own, packed.tokens, late)


def _late(store: Store, found: Any, until: float | None) -> str:
    """Why a recall that should have been hybrid was answered lexically (``""``: it was not):
    the note of a query embedded too late, or that failed."""
    if found.mode_used != "lexical" or until is None or store.embedder is None:
        return ""
    return next((n for n in found.notes if "answered from the lexical arm" in n), "")


def _own(store: Store, found: Any, session_id: str | None, namespace: str | None) -> set[str]:
    """The ids of ``found``'s memories that the session ``session_id`` itself captured
    (tagged ``session:<id>``, as :mod:`mnemex.hooks.capture` tags them)."""
    if not session_id:
        return set()
    tag = f"session:{session_id}"[:64].lower()
    return {m.id for m in found.memories if tag in m.tags}


def record_injection(
    store: Store,
    event: Mapping[str, Any],
    agent: str,
    namespace: str,
    decision: Decision,
    home: str | None,
) -> None:
    """Write the prompt's entry in the injection log (:meth:`Store.log_injection`), its
    texts redacted as captured turns are; never raises (a failure goes to ``hooks.log``).

    Plain values all the way (no value classes to create): this runs on every prompt."""
    if not store.settings.injection_log:
        return
    from mnemex.hooks.redact import redact

    found, injected = decision.found, set(decision.injected)

    def why(ident: str) -> str:
        if ident in injected:
            return ""
        if ident in decision.own:
            return "this session's own (in the conversation already)"
        return "did not fit the budget"

    weighed = [
        {
            "id": m.id,
            "kind": m.kind,
            "score": m.score,
            "injected": m.id in injected,
            "line": redact(m.line),
            "reason": why(m.id),
        }
        for m in found.memories
    ]
    try:
        store.log_injection(
            redact(decision.task),
            "injected" if decision.block else "nothing",
            agent=agent,
            session_id=_text(event.get("session_id")) or "",
            event=USER_PROMPT,
            block=redact(decision.block),
            tokens=decision.tokens,
            budget_tokens=found.budget_tokens,
            mode_used=found.mode_used,
            notes=found.notes,
            memories=weighed,
            floor=found.floor,
            namespace=namespace,
        )
    except Exception as exc:
        log(home or str(store.settings.home), event, f"injection log: {type(exc).__name__}: {exc}")


def session_context(store: Store, namespace: str | None = None) -> str:
    """What a new session should know: the last session's gist and the notable memories."""
    from mnemex.hooks import KINDS, PROMPT
    from mnemex.search import recall as packing
    from mnemex.search.rank import age_days
    from mnemex.text import format_time, utcnow

    lines: list[str] = []
    prompts = store.last_thread(PROMPT, limit=GIST_PROMPTS, namespace=namespace)
    if prompts:
        asked = "; ".join(
            _clip(" ".join(m.content.split()), GIST_PROMPT_CHARS) for m in reversed(prompts)
        )
        lines.append(f"- [last session, {format_time(prompts[0].created_at)[:10]}] asked: {asked}")
    now = utcnow()
    skip = (*KINDS, "chunk")
    for m in store.notable(limit=NOTABLE_CANDIDATES, skip_kinds=skip, namespace=namespace):
        age = packing.format_age(age_days(m.created_at, now))
        lines.append(packing.render_line(m.kind, m.content, m.confidence, age))
    return _pack(store, lines).markdown


def _pack(store: Store, lines: list[str]) -> Packed:
    """``lines`` packed into a block as a recall packs its memories (the store's
    :class:`~mnemex.config.RecallOptions`: budget, most memories, token counter)."""
    from mnemex.config import RecallOptions
    from mnemex.search import recall as packing

    options = RecallOptions.of(store.settings)
    count = packing.counter(options.token_counter)[1]
    return packing.pack(lines, options.budget, options.most, count)


def _context(event_name: str, block: str) -> str:
    if not block:
        return ""
    from mnemex.hooks.injected import wrap

    output = {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": wrap(block)}}
    return json.dumps(output, ensure_ascii=False) + "\n"


class _opened:
    """The given store, or one opened (and closed) for this event."""

    def __init__(
        self,
        store: Store | None,
        db: str | None,
        home: str | None,
        ns: str,
        *,
        embedder: bool,
        until: float | None = None,
    ) -> None:
        self.given = store
        self.args = (db, home, ns, embedder)
        self.until = until  # embedding a query must be done by then (time.monotonic())
        self.store: Store | None = None

    def __enter__(self) -> Store:
        if self.given is not None:
            return self.given
        from mnemex.config import load_settings
        from mnemex.engine.embedding import FROM_SETTINGS
        from mnemex.store import Store

        db, home, ns, embedder = self.args
        settings = load_settings(db, home=home, namespace=ns)
        if self.until is not None:
            left = max(0.05, self.until - time.monotonic())
            settings = settings.replace(query_timeout=min(settings.query_timeout, left))
        chosen: Any = None
        if embedder:
            from mnemex.embed import resolve
            from mnemex.errors import MnemexError

            try:  # this process embeds one query: load the model fast
                chosen = resolve(settings, few_queries=True)
            except MnemexError:
                chosen = FROM_SETTINGS  # the store reports it as for any search
        self.store = Store(settings, embedder=chosen)
        return self.store

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()


SERVE_ANNOUNCED = "serve.announced"  # in the data folder once the server was announced
ANNOUNCEMENT = (
    "mnemex started a background server (mnemex serve, about 150 MB) that keeps the "
    "embedding model loaded, so that later prompts are answered in milliseconds; it stops "
    "after {minutes:.0f} idle minutes. `mnemex hooks status` shows it, `mnemex hooks stop` "
    "stops it, and `mnemex hook --no-serve` in the agent's settings never starts it."
)


def announce(out: str, home: Path, event: Mapping[str, Any], *, tell: bool = True) -> str:
    """The answer ``out`` of the prompt that started the background server, with the
    server announced to the person (with ``tell``: Claude Code shows a hook's
    ``systemMessage``) the first time one starts for the data folder; every start is a
    line in ``hooks.log``."""
    minutes = SERVE_IDLE_EXIT / 60
    log(
        str(home),
        event,
        f"{NOTE} started a background mnemex serve (stops after {minutes:.0f} idle minutes)",
    )
    marker = home / SERVE_ANNOUNCED
    if not tell or marker.exists():
        return out
    try:
        marker.touch()
    except OSError:
        return out
    answer = json.loads(out) if out.strip() else {}
    answer["systemMessage"] = ANNOUNCEMENT.format(minutes=minutes)
    return json.dumps(answer, ensure_ascii=False) + "\n"


def start_background_server(db: str | None, home: str | None) -> Path | None:
    """In hybrid mode, start ``mnemex serve`` (any free port, stops after 30 idle minutes)
    so that the next prompts skip loading the model and the vectors; the data folder when
    one was started.

    Nothing happens in lexical mode (a new process is fast enough), or when a
    server already answers for the data folder.
    """
    from mnemex.config import load_settings

    settings = load_settings(db, home=home)
    if settings.embedder == "none":
        return None
    if settings.embedder == "auto":
        from mnemex.embed import local_available

        if not local_available():
            return None
    if server_running(settings.home):
        return None
    import subprocess

    subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mnemex",
            "--db",
            str(settings.db_path),
            "serve",
            "--port",
            "0",
            "--idle-exit",
            str(SERVE_IDLE_EXIT),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=child_env(settings.home),
    )
    return settings.home


def server_info(home: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``mnemex serve`` answering hook events for the data folder ``home`` (its pid,
    port, store, resident memory in MB, seconds up, idle minutes before it stops), or
    ``None`` when none runs."""
    from pathlib import Path

    if not server_running(home):
        return None
    try:
        info = json.loads((Path(home) / SERVE_FILE).read_text(encoding="utf-8"))
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    started = info.get("started")
    return {
        "pid": pid,
        "port": info.get("port"),
        "db": info.get("db"),
        "rss_mb": _rss_mb(pid),
        "uptime": None if started is None else max(0.0, time.time() - float(started)),
        "idle_exit": float(info.get("idle_exit") or SERVE_IDLE_EXIT),
    }


def _rss_mb(pid: int) -> float | None:
    """A process's resident memory in MB (``/proc`` on Linux, else ``ps``)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import subprocess

    try:
        out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True)
        return int(out.stdout.strip()) / 1024
    except (OSError, ValueError):
        return None


def stop_server(home: str | os.PathLike[str]) -> int | None:
    """Stop the data folder's ``mnemex serve`` (SIGTERM: it removes serve.json and exits);
    its pid, or ``None`` when none runs."""
    import signal

    info = server_info(home)
    if info is None:
        return None
    os.kill(info["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 10
    while server_running(home) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(info["pid"])


def server_running(home: str | os.PathLike[str]) -> bool:
    """Whether a ``mnemex serve`` answers hook events for the data folder ``home``."""
    from pathlib import Path

    lock = server_lock(Path(home))
    if lock is None:
        return True
    lock.close()
    return False


def server_lock(home: Path) -> Any:
    """The data folder's ``serve.lock``, held; ``None`` when another process holds it."""
    import fcntl

    home.mkdir(parents=True, exist_ok=True)
    handle = open(home / SERVE_LOCK, "a")  # noqa: SIM115 - held for the server's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def embed_later(store: Store) -> None:
    """Start :mod:`mnemex.hooks.embedder` in the background when the settings name an embedder.

    Capture stores without vectors so that it returns at once; the model
    loads in a process of its own, which the agent does not wait for. At most
    one such process runs per store: while one holds the lock, none is started.
    """
    name = store.settings.embedder
    if name == "none":
        return
    if name == "auto":
        from mnemex.embed import local_available

        if not local_available():
            return
    from mnemex.hooks import embedder

    url = store.settings.db_url
    if embedder.running(url or store.path):
        return
    import subprocess

    env = {**child_env(store.settings.home), "MNEMEX_EMBEDDER": name}  # this store's choice
    command = [sys.executable, "-m", "mnemex.hooks.embedder"]
    if url is None:
        command.append(str(store.path))
    else:  # a URL may hold a password: not on the command line
        env["MNEMEX_DB"] = url
    subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
