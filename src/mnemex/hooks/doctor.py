"""``mnemex hooks doctor``: the agent hooks checked end to end, and what the first prompt needs.

Each check says what it found and, when something is wrong, what to do:

- the agent's settings hold mnemex's handler for every event (the project's
  file or the user's; for Codex also ``codex_hooks = true``);
- the program the handler runs exists;
- the store (or the folder it will be created in) can be written;
- the embedding model loads (:func:`prepare_model`, which ``hooks install`` runs
  too, so that the first prompt maps a model prepared for it);
- a test prompt, run through the very command the agent runs (with
  ``--no-serve``: the check leaves no server behind), is answered in time and
  logs no error;
- where ``hooks.log`` is, and whether a background ``mnemex serve`` runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.hooks import install as files
from mnemex.hooks.log import LOG_FILE
from mnemex.hooks.run import NOTE, USER_PROMPT, server_info
from mnemex.records import dataclass

if TYPE_CHECKING:
    from mnemex.config import Settings

TEST_PROMPT = "mnemex hooks doctor: does the memory hook answer this prompt?"


@dataclass(frozen=True)
class Check:
    """One thing the doctor looked at: ``ok``, what it found, and what to do when not ok."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def doctor(agent: str, settings: Settings, cwd: Path) -> list[Check]:
    """Every check of the module's list, in order; those that need an earlier one to
    pass (the program, the test prompt) are left out when it did not."""
    settings_check, handler = installed(agent, cwd)
    checks = [settings_check]
    program = _program(handler) if handler else None
    if program is not None:
        checks.append(program)
    checks += [writable(settings), prepare_model(settings)]
    if handler and (program is None or program.ok):
        checks.append(test_prompt(handler, cwd, settings))
    checks += [_log(settings), _server(settings)]
    return checks


def installed(agent: str, cwd: Path) -> tuple[Check, dict[str, Any] | None]:
    """Whether the agent's settings (the project's, else the user's) run mnemex on every
    event; and the handler of the prompt event, to try."""
    places = _places(cwd)
    found = _found(agent, cwd)
    if not found:
        where = " nor ".join(str(files.paths(agent, s, r)["hooks"]) for s, r in places)
        fix = f"run `mnemex hooks install {agent}` here (or with --user for every project)"
        return Check("settings", False, f"no mnemex hooks in {where}: {fix}"), None
    scope, state = found[0]
    problems = []
    if state["missing_events"]:
        problems.append(f"no handler for {', '.join(state['missing_events'])}")
    if state.get("codex_hooks_enabled") is False:
        problems.append(f"codex_hooks is not true under [features] in {state['config_file']}")
    handler = _handler(Path(state["hooks_file"]), USER_PROMPT)
    if problems:
        fix = f"run `mnemex hooks install {agent}{' --user' if scope == 'user' else ''}` again"
        return Check(
            "settings", False, f"{state['hooks_file']}: {'; '.join(problems)}: {fix}"
        ), handler
    events = ", ".join(state["events"])
    return Check("settings", True, f"{state['hooks_file']} ({scope}): {events}"), handler


def _places(cwd: Path) -> list[tuple[str, Path]]:
    """Where the agent's settings may be, first to last: the folder's, its project's, the
    user's."""
    from mnemex.config import project_root

    places = [("project", root) for root in dict.fromkeys([cwd, project_root(cwd) or cwd])]
    return [*places, ("user", cwd)]


def _found(agent: str, cwd: Path) -> list[tuple[str, dict[str, Any]]]:
    """(scope, status) of each settings file of :func:`_places` with a mnemex handler."""
    states = ((scope, files.status(agent, scope, root=root)) for scope, root in _places(cwd))
    return [(scope, state) for scope, state in states if state["events"]]


def has_hooks(agent: str, cwd: Path) -> bool:
    """Whether settings the agent reads in ``cwd`` run mnemex on any event."""
    return bool(_found(agent, cwd))


def _handler(path: Path, event: str) -> dict[str, Any] | None:
    """mnemex's handler of ``event`` in a hooks file."""
    groups = json.loads(path.read_text(encoding="utf-8")).get("hooks", {}).get(event) or []
    for group in groups:
        for handler in group.get("hooks") or [] if isinstance(group, dict) else []:
            if files.is_ours(handler):
                return dict(handler)
    return None


def _program(handler: dict[str, Any]) -> Check | None:
    """Whether the program a command handler runs exists (``None`` for an http handler)."""
    command = handler.get("command")
    if not isinstance(command, str):
        return None
    program = shlex.split(command)[0]
    if shutil.which(program) or Path(program).is_file():
        return Check("program", True, program)
    return Check(
        "program",
        False,
        f"{program} is not found: run `mnemex hooks install` again from the environment "
        "mnemex is installed in (it writes that environment's program)",
    )


def writable(settings: Settings) -> Check:
    """Whether the store can be written: a row written to its ``meta`` table (or, with no
    store yet, a file made and removed in the folder it will be created in)."""
    place = settings.db_url or str(settings.db_path)
    try:
        if settings.db_url is None and not Path(settings.db_path).exists():
            folder = _existing_parent(Path(settings.db_path))
            import tempfile

            with tempfile.NamedTemporaryFile(dir=folder, prefix=".mnemex-doctor-"):
                pass
            return Check("store", True, f"{place} (not created yet: the first capture creates it)")
        from mnemex.store import Store

        with Store(settings, embedder=None) as store:
            store.set_state("hooks_doctor", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}" if not str(exc).startswith(place) else str(exc)
        return Check(
            "store", False, f"{place} cannot be written ({reason}): the hooks capture nothing"
        )
    return Check("store", True, f"{place} (written)")


def _existing_parent(path: Path) -> Path:
    for folder in path.absolute().parents:
        if folder.exists():
            return folder
    return Path("/")


def prepare_model(settings: Settings) -> Check:
    """Load the embedding model the hooks use, as a prompt hook loads it: for the local
    model, its check and its prepared copies (folded, and optimized for the background
    server) are saved in the data folder, so that the first prompt only maps them. Lexical only is no problem, only said."""
    from mnemex.embed import local_available, resolve
    from mnemex.errors import MnemexError

    name = settings.embedder
    if name == "none" or (name == "auto" and not local_available()):
        why = "setting embedder = none" if name == "none" else "install mnemex[embed] for hybrid"
        return Check("model", True, f"none: lexical search only ({why})")
    try:
        embedder = resolve(settings, few_queries=True)
        if embedder is not None and name in ("auto", "local"):
            started = time.monotonic()
            embedder.load()  # type: ignore[attr-defined]
            # ... and the optimized copy the background server (and a long memory) loads.
            resolve(settings).load()  # type: ignore[union-attr]
            took = time.monotonic() - started
            cache = settings.home / "models"
            return Check("model", True, f"{embedder.model_id} ready ({took:.1f} s; {cache})")
    except (MnemexError, OSError) as exc:
        return Check("model", False, f"{exc}")
    return Check("model", True, f"{name}: {getattr(embedder, 'model_id', name)} (not called)")


def test_prompt(handler: dict[str, Any], cwd: Path, settings: Settings) -> Check:
    """Run the prompt event's handler as the agent does (the command through the shell, or
    a POST to its URL) on a test prompt: answered in time, with no new line in hooks.log."""
    log = settings.home / LOG_FILE
    before = log.stat().st_size if log.exists() else 0
    event = {
        "session_id": "mnemex-hooks-doctor",
        "transcript_path": "",
        "cwd": str(cwd),
        "hook_event_name": USER_PROMPT,
        "prompt": TEST_PROMPT,
    }
    limit = float(handler.get("timeout") or files.PROMPT_HOOK_TIMEOUT)
    started = time.monotonic()
    try:
        out = _run(handler, json.dumps(event).encode(), cwd, limit)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return Check("prompt", False, f"the test prompt was not answered: {exc}")
    took = (time.monotonic() - started) * 1000
    logged = log.read_bytes()[before:].decode("utf-8", "replace") if log.exists() else ""
    errors = [line for line in logged.splitlines() if line and f" {NOTE} " not in line]
    if errors:
        return Check("prompt", False, f"the test prompt logged an error: {errors[-1]}")
    answer = json.loads(out) if out.strip() else {}
    if not isinstance(answer, dict) or (
        answer and not {"hookSpecificOutput", "systemMessage"} & set(answer)
    ):
        return Check("prompt", False, f"the test prompt's answer is not a hook's: {out[:200]}")
    said = (
        "a block of memories" if "hookSpecificOutput" in answer else "nothing relevant, as expected"
    )
    told = f"; it told the person: {answer['systemMessage']}" if "systemMessage" in answer else ""
    return Check("prompt", True, f"answered in {took:.0f} ms ({said}){told}")


def _run(handler: dict[str, Any], payload: bytes, cwd: Path, limit: float) -> str:
    if isinstance(handler.get("url"), str):
        import urllib.request

        request = urllib.request.Request(
            handler["url"], payload, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=limit) as response:
            text = response.read().decode()
        return "" if text.strip() == "{}" else text
    done = subprocess.run(  # --no-serve: a check starts no lasting server
        ["/bin/sh", "-c", f"{handler['command']} --no-serve"],
        input=payload,
        cwd=cwd,
        capture_output=True,
        timeout=limit,
        env=os.environ.copy(),
    )
    if done.returncode != 0:
        raise ValueError(f"exit {done.returncode}: {done.stderr.decode()[-300:]}")
    return done.stdout.decode()


def _log(settings: Settings) -> Check:
    log = settings.home / LOG_FILE
    if not log.exists():
        return Check("log", True, f"{log} (no line yet: no error so far)")
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    last = lines[-1] if lines else ""
    return Check("log", True, f"{log} ({len(lines):,} lines; the last: {last[:160]})")


def _server(settings: Settings) -> Check:
    info = server_info(settings.home)
    if info is None:
        return Check("server", True, "no background mnemex serve runs (a prompt starts one)")
    return Check("server", True, describe_server(info))


def describe_server(info: Mapping[str, Any]) -> str:
    """One line on a running ``mnemex serve``: its pid, memory, age, and how to stop it."""
    memory = f"{info['rss_mb']:.0f} MB" if info.get("rss_mb") is not None else "memory unknown"
    up = _age(info.get("uptime"))
    return (
        f"mnemex serve, pid {info['pid']}, port {info['port']}, {memory}, up {up}; stops after "
        f"{info['idle_exit'] / 60:.0f} idle minutes (`mnemex hooks stop` stops it now)"
    )


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "for an unknown time"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
