"""The CLI of the agent hooks: ``mnemex hook``, ``mnemex hooks ...``, ``mnemex import AGENT``.

Registered onto the main click group by :func:`register`; each command parses
its options, calls one function of :mod:`mnemex.hooks`, formats.
"""

from __future__ import annotations

import contextlib
import gc
import json
import signal
import sys
from typing import Any

import click

from mnemex.hooks import AGENTS, MAX_TIMEOUT, MIN_TIMEOUT

agent_argument = click.argument("agent", type=click.Choice(AGENTS))


def _scope_options(func: Any) -> Any:
    func = click.option(
        "--user", "scope", flag_value="user", help="The user's config (every project)."
    )(func)
    return click.option(
        "--project",
        "scope",
        flag_value="project",
        default=True,
        help="The current project's config (the default).",
    )(func)


class _Seconds(click.FloatRange):
    """A finite number of seconds within the bounds (a float range lets NaN through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if seconds != seconds:
            self.fail(f"{value!r} is not a number of seconds.", param, ctx)
        return seconds


@click.command()
@click.option("--agent", type=click.Choice(AGENTS), help="The agent (default: from the input).")
@click.option(
    "--timeout",
    type=_Seconds(MIN_TIMEOUT, MAX_TIMEOUT),
    help="Seconds before the event gives up, 0.01 to 3600 "
    "(default: 2 s for prompt events, 30 s for capture).",
)
@click.option(
    "--no-serve",
    is_flag=True,
    help="Never start a background `mnemex serve` (hybrid mode starts one on SessionStart).",
)
@click.option(
    "--background",
    is_flag=True,
    help="Capture events return at once; a background process does the capture.",
)
@click.pass_obj
def hook(
    obj: Any, agent: str | None, timeout: float | None, no_serve: bool, background: bool
) -> None:
    """Answer one agent lifecycle event, read as JSON from standard input.

    SessionStart and UserPromptSubmit print the memories for the model;
    Stop, PreCompact and SessionEnd capture the session's new turns. Always
    exits 0; errors go to hooks.log in the data folder.
    """
    from mnemex.hooks.run import main

    main(
        agent=agent,
        namespace=obj.namespace,
        db=obj.db,
        home=obj.home,
        timeout=timeout,
        start_server=not no_serve,
        background=background,
    )


@click.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8767,
    show_default=True,
    help="0: any free port.",
)
@click.option("--idle-exit", type=float, help="Stop after this many seconds without an event.")
@click.pass_obj
def serve(obj: Any, port: int, idle_exit: float | None) -> None:
    """Answer hook events over HTTP on 127.0.0.1 (Claude Code's http hook type).

    The store (and the model, in hybrid mode) stays loaded between events.
    Install with `mnemex hooks install claude-code --url http://127.0.0.1:PORT/hook`.
    """
    from mnemex.hooks.run import quiet_blas
    from mnemex.hooks.serve import serve as run
    from mnemex.store import ALL

    def start() -> None:
        quiet_blas()  # before the store loads numpy
        store = obj.store(create=True)
        if store.embedder is not None:  # load the model and the vectors now, not on a prompt
            store.search("warm up", limit=1, namespace=ALL)
        # What is loaded now (modules, the model, the vectors) stays for the server's life:
        # keep it out of the garbage collector's full passes (12 ms each with the model loaded,
        # measured on two cores).
        gc.freeze()
        signal.signal(signal.SIGTERM, _interrupt)  # stop as on Ctrl-C: serve.json is removed

        def ready(server: Any) -> None:
            url = f"http://127.0.0.1:{server.server_address[1]}/hook"
            click.echo(f"answering hook events on {url}", err=True)

        with contextlib.suppress(KeyboardInterrupt):
            run(store, port, namespace=obj.namespace, idle_exit=idle_exit, ready=ready)

    _guard(start)


@click.group()
def hooks() -> None:
    """Install mnemex's hooks into Claude Code or Codex, check them, show them, remove them."""


@hooks.command()
@agent_argument
@_scope_options
@click.option("--no-mcp", is_flag=True, help="Only the hooks, not the MCP server entry.")
@click.option(
    "--mcp-only",
    is_flag=True,
    help="Only the project's MCP server entry (the hooks are installed with --user).",
)
@click.option(
    "--url",
    help="Claude Code: POST the prompt events to a running `mnemex serve` at this URL "
    "(http://127.0.0.1:8767/hook) instead of starting a process.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def install(
    obj: Any, agent: str, scope: str, no_mcp: bool, mcp_only: bool, url: str | None, as_json: bool
) -> None:
    """Add mnemex's hooks (and MCP server) to the agent's config, keeping everything else."""
    from mnemex.hooks import install as files

    def run() -> None:
        changes = files.install(
            agent,
            scope,
            global_args=_globals(obj),
            namespace=obj.namespace,
            mcp=not no_mcp,
            url=url,
            hooks=not mcp_only,
        )
        from mnemex.hooks.doctor import prepare_model

        model = None if mcp_only else prepare_model(obj.settings())  # what the first prompt loads
        _report(changes, as_json, model)
        if not as_json and not mcp_only:
            click.echo(f"check it with `mnemex hooks doctor {agent}`")

    _guard(run)


@hooks.command()
@agent_argument
@_scope_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def uninstall(agent: str, scope: str, as_json: bool) -> None:
    """Remove mnemex's hooks and MCP entry from the agent's config."""
    from mnemex.hooks import install as files

    _guard(lambda: _report(files.uninstall(agent, scope), as_json))


@hooks.command()
@click.argument("agent", type=click.Choice(AGENTS), required=False)
@_scope_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def status(obj: Any, agent: str | None, scope: str, as_json: bool) -> None:
    """Show which events of the agent (default: both) run mnemex, the background server
    (pid, memory, uptime, how to stop it) and the prompts answered lexically for lack of
    time."""
    from mnemex.hooks import install as files
    from mnemex.hooks.doctor import describe_server
    from mnemex.hooks.run import server_info

    def show() -> None:
        states = [files.status(a, scope) for a in ((agent,) if agent else AGENTS)]
        home = obj.settings().home
        server, late = server_info(home), _late_prompts(home)
        if as_json:
            data = states[0] if agent else {"agents": states}
            click.echo(json.dumps({**data, "server": server, "late_prompts": late}, indent=2))
            return
        for state in states:
            _print_state(state)
        click.echo(f"server      {describe_server(server) if server else 'not running'}")
        if late["count"]:
            click.echo(
                f"late        {late['count']} prompt(s) answered lexically, the query not "
                f"embedded in time; the last: {late['last']}"
            )

    _guard(show)


def _print_state(state: dict[str, Any]) -> None:
    click.echo(f"{state['agent']} ({state['scope']}): {state['hooks_file']}")
    click.echo(f"  hooks     {', '.join(state['events']) or 'none'}")
    if state["missing_events"]:
        click.echo(f"  missing   {', '.join(state['missing_events'])}")
    if "mcp" in state:
        click.echo(f"  mcp       {'yes' if state['mcp'] else 'no'}")
    if "codex_hooks_enabled" in state:
        flag = "yes" if state["codex_hooks_enabled"] else "no (hooks do not run)"
        click.echo(f"  [features] codex_hooks  {flag}")


def _late_prompts(home: Any) -> dict[str, Any]:
    """How many lines of hooks.log note a prompt answered lexically, and the last one."""
    from mnemex.hooks.log import LOG_FILE
    from mnemex.hooks.run import LATE

    path = home / LOG_FILE
    lines = path.read_text("utf-8", errors="replace").splitlines() if path.exists() else []
    noted = [line for line in lines if LATE in line]
    return {"count": len(noted), "last": noted[-1] if noted else None, "log": str(path)}


@hooks.command()
@click.argument("agent", type=click.Choice(AGENTS), required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def doctor(obj: Any, agent: str | None, as_json: bool) -> None:
    """Check the hooks end to end: the agent's settings, the program they run, the store,
    the model, a test prompt through the installed command, the log, the server.

    Exits 1 naming what to fix when a check fails. AGENT defaults to the one whose
    hooks are installed here (Claude Code when both or neither are).
    """
    from pathlib import Path

    from mnemex.hooks import doctor as checks

    def run() -> None:
        cwd = Path.cwd()
        chosen = agent or next((a for a in AGENTS if checks.has_hooks(a, cwd)), AGENTS[0])
        found = checks.doctor(chosen, obj.settings(), cwd)
        if as_json:
            ok = all(c.ok for c in found)
            click.echo(
                json.dumps(
                    {"agent": chosen, "ok": ok, "checks": [c.to_dict() for c in found]}, indent=2
                )
            )
        else:
            for check in found:
                click.echo(f"{'ok  ' if check.ok else 'FAIL'}  {check.name:<9} {check.detail}")
        if not all(c.ok for c in found):
            sys.exit(1)

    _guard(run)


@hooks.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def stop(obj: Any, as_json: bool) -> None:
    """Stop the background `mnemex serve` the hooks started (the next prompt starts
    another, unless the hooks run with --no-serve)."""
    from mnemex.hooks.run import stop_server

    def run() -> None:
        pid = stop_server(obj.settings().home)
        if as_json:
            click.echo(json.dumps({"stopped": pid}))
        else:
            click.echo(f"stopped mnemex serve (pid {pid})" if pid else "no mnemex serve runs")

    _guard(run)


def import_sessions(obj: Any, agent: str, folder: str | None, as_json: bool) -> None:
    """``mnemex import claude-code|codex [DIR]``: backfill the agent's sessions."""
    from mnemex.hooks.backfill import backfill, default_folder, transcripts
    from mnemex.progress import progress_bar

    def run() -> None:
        from pathlib import Path

        store = obj.store(create=True)
        root = Path(folder).expanduser() if folder else default_folder(agent)
        found = transcripts(agent, root) if root.is_dir() else None
        with progress_bar(len(found or ()), f"importing {agent}", enabled=not as_json) as advance:
            report = backfill(
                store, agent, root, namespace=obj.namespace, progress=advance, files=found
            )
        if as_json:
            click.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
        else:
            click.echo(
                f"imported {report.stored:,} memories from {report.turns:,} turns of "
                f"{report.sessions:,} sessions ({report.files:,} files); "
                f"{report.bad_lines:,} bad line(s), {len(report.bad_files):,} bad file(s)"
            )
            for ns, count in sorted(report.namespaces.items()):
                click.echo(f"  {count:,} in {ns}")
            for message in report.bad_files:
                click.echo(f"  skipped {message}", err=True)

    _guard(run)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def register(group: click.Group) -> None:
    group.add_command(hook)
    group.add_command(hooks)
    group.add_command(serve)


def _globals(obj: Any) -> list[str]:
    out = []
    if obj.db:
        out += ["--db", obj.db]
    if obj.home:
        out += ["--home", obj.home]
    return out


def _report(changes: list[Any], as_json: bool, model: Any = None) -> None:
    if as_json:
        data: dict[str, Any] = {"files": [c.to_dict() for c in changes]}
        if model is not None:
            data["model"] = model.to_dict()
        click.echo(json.dumps(data, indent=2))
        return
    for change in changes:
        what = "updated" if change.changed else "unchanged"
        backup = f" (backup: {change.backup})" if change.backup else ""
        click.echo(f"{what:9} {change.path}{backup}")
        for note in change.notes:
            click.echo(f"          note: {note}")
    if model is not None:
        click.echo(f"{'model' if model.ok else 'problem':9} {model.detail}")


def _guard(func: Any) -> None:
    from mnemex.errors import MnemexError

    try:
        func()
    except MnemexError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
