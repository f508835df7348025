"""``mnemex hooks install|uninstall|status``: the agent's own config files, merged.

Claude Code reads hooks from ``.claude/settings.json`` (project) or
``~/.claude/settings.json`` (user) and MCP servers from the project's
``.mcp.json``; Codex reads hooks from ``.codex/hooks.json`` or
``~/.codex/hooks.json`` (with ``codex_hooks = true`` under ``[features]`` in
``config.toml``) and MCP servers from ``config.toml``. Both hook files share
one envelope: ``hooks`` → event name → matcher groups → handlers.

Installing adds one matcher group per event holding mnemex's handler and
leaves every other key, event, group and handler as it was; a file that
changes is first copied to ``<name>.mnemex.bak``; a second install changes
nothing. Uninstalling removes only mnemex's handlers and MCP entry.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tomllib
from dataclasses import field
from pathlib import Path
from typing import Any

from mnemex.errors import InvalidInput
from mnemex.hooks.transcript import CLAUDE_CODE, CODEX
from mnemex.records import dataclass

PROMPT_EVENTS = ("SessionStart", "UserPromptSubmit")
EVENTS = {
    CLAUDE_CODE: ("SessionStart", "UserPromptSubmit", "Stop", "PreCompact", "SessionEnd"),
    CODEX: ("SessionStart", "UserPromptSubmit", "Stop"),
}
PROMPT_HOOK_TIMEOUT = 10  # seconds the agent waits; the hook itself stops at 2
CAPTURE_HOOK_TIMEOUT = 60
MCP_NAME = "mnemex"
BACKUP_SUFFIX = ".mnemex.bak"
_OUR_URL = re.compile(r"^http://(127\.0\.0\.1|localhost):\d+/hook$")
_OURS = re.compile(r"(^|[\s/\\])mnemex(\.exe)?['\"]?\s.*\bhook\b|-m mnemex\b.*\bhook\b")


@dataclass
class Change:
    """What install or uninstall did to one file."""

    path: Path
    changed: bool
    backup: Path | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "changed": self.changed,
            "backup": str(self.backup) if self.backup else None,
            "notes": self.notes,
        }


def paths(agent: str, scope: str, root: Path | None = None) -> dict[str, Path]:
    """The agent's config files for a scope: ``hooks``, ``mcp`` (and ``config`` for Codex)."""
    base = (root or Path.cwd()) if scope == "project" else Path.home()
    if agent == CLAUDE_CODE:
        out = {"hooks": base / ".claude" / "settings.json"}
        if scope == "project":
            out["mcp"] = base / ".mcp.json"
        return out
    if agent == CODEX:
        return {"hooks": base / ".codex" / "hooks.json", "config": base / ".codex" / "config.toml"}
    raise InvalidInput(f"unknown agent {agent!r}; use claude-code or codex")


def hook_command(agent: str, global_args: list[str] | None = None) -> str:
    """The command line the agent runs: ``mnemex [--db ...] hook --agent AGENT``."""
    found = shutil.which("mnemex")
    head = ["mnemex"] if found else [sys.executable, "-m", "mnemex"]
    return shlex.join([*head, *(global_args or []), "hook", "--agent", agent])


def is_ours(handler: Any) -> bool:
    """A handler that runs ``mnemex hook`` or posts to a local ``mnemex serve``."""
    if not isinstance(handler, dict):
        return False
    if isinstance(handler.get("command"), str):
        return bool(_OURS.search(handler["command"]))
    return isinstance(handler.get("url"), str) and bool(_OUR_URL.match(handler["url"]))


def merged_hooks(
    config: dict[str, Any], agent: str, command: str | None, url: str | None = None
) -> dict[str, Any]:
    """``config`` with mnemex's handlers removed, then (with a command) added once per event.

    With ``url`` (Claude Code), the prompt events post to a running ``mnemex serve``
    there; capture stays a command, run asynchronously.
    """
    config = json.loads(json.dumps(config))  # a deep copy that keeps key order
    hooks = config.get("hooks")
    if hooks is None:
        hooks = {}
    if not isinstance(hooks, dict):
        raise InvalidInput("the 'hooks' key of the config is not an object; fix it by hand first")
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                handlers = [h for h in group["hooks"] if not is_ours(h)]
                if not handlers and group["hooks"]:
                    continue  # a group that held only ours
                group["hooks"] = handlers
            kept_groups.append(group)
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if command is not None:
        for event in EVENTS[agent]:
            handler: dict[str, Any] = {"type": "command", "command": command}
            if url is not None and event in PROMPT_EVENTS:
                handler = {"type": "http", "url": url}
            elif agent == CODEX and event not in PROMPT_EVENTS:  # Codex waits for its hooks
                handler["command"] = f"{command} --background"
            if event in PROMPT_EVENTS:
                handler["timeout"] = PROMPT_HOOK_TIMEOUT
            else:
                handler["timeout"] = CAPTURE_HOOK_TIMEOUT
                if agent == CLAUDE_CODE:
                    handler["async"] = True
            hooks.setdefault(event, []).append({"hooks": [handler]})
    if hooks:
        config["hooks"] = hooks
    else:
        config.pop("hooks", None)
    return config


def install(
    agent: str,
    scope: str,
    *,
    root: Path | None = None,
    global_args: list[str] | None = None,
    namespace: str | None = None,
    mcp: bool = True,
    url: str | None = None,
    hooks: bool = True,
) -> list[Change]:
    """Merge mnemex's hooks (and, for a project, its MCP server) into the agent's config;
    without ``hooks``, only the MCP server (beside hooks installed for the user)."""
    files = paths(agent, scope, root)
    if not hooks and (scope != "project" or not mcp):
        raise InvalidInput("--mcp-only writes a project's MCP server entry: run it in a project")
    if not hooks and not _mcp_installed():
        raise InvalidInput("--mcp-only writes the MCP server entry: install mnemex[mcp] first")
    if url is not None:
        if agent != CLAUDE_CODE:
            raise InvalidInput("--url is for Claude Code's http hooks; Codex runs commands only")
        if not _OUR_URL.match(url):
            raise InvalidInput(
                f"--url {url!r}: give the local `mnemex serve` address, "
                "e.g. http://127.0.0.1:8767/hook"
            )
    command = hook_command(agent, global_args)
    changes = []
    if hooks:
        changes.append(_update_json(files["hooks"], lambda c: merged_hooks(c, agent, command, url)))
    mcp_ok = mcp and _mcp_installed()
    entry: dict[str, Any] | None = None
    if scope == "project" and mcp_ok:
        from mnemex.hooks.capture import project_namespace

        ns = namespace or project_namespace(root or Path.cwd())
        entry = {"command": shlex.split(command)[0], "args": _mcp_args(command, ns)}
        if agent == CLAUDE_CODE:
            server = entry
            changes.append(_update_json(files["mcp"], lambda c: _with_mcp(c, server)))
    if agent == CODEX:
        changes.append(_update_codex_config(files["config"], entry))
    note = None
    if not mcp:
        pass
    elif not mcp_ok:
        note = "MCP server entry not written: install mnemex[mcp] first"
    elif scope == "user":
        note = (
            "MCP server entry not written for --user (each project has its own namespace): "
            f"run `mnemex hooks install {agent} --mcp-only` in a project to add it there"
        )
    if note:
        changes[0].notes.append(note)
    return changes


def uninstall(agent: str, scope: str, *, root: Path | None = None) -> list[Change]:
    """Remove mnemex's handlers and MCP entry; everything else stays."""
    files = paths(agent, scope, root)
    changes = [_update_json(files["hooks"], lambda c: merged_hooks(c, agent, None), create=False)]
    if "mcp" in files:
        changes.append(_update_json(files["mcp"], _without_mcp, create=False))
    if agent == CODEX:
        changes.append(_remove_codex_mcp(files["config"]))
        changes[-1].notes.append("left `codex_hooks = true` in [features]: other hooks may need it")
    return changes


def status(agent: str, scope: str, *, root: Path | None = None) -> dict[str, Any]:
    """Which events run mnemex, and whether the MCP entry (and Codex's feature flag) is there."""
    files = paths(agent, scope, root)
    config = _read_json(files["hooks"])
    hooks = config.get("hooks") if isinstance(config.get("hooks"), dict) else {}
    events = [
        event
        for event, groups in (hooks or {}).items()
        if isinstance(groups, list)
        and any(
            isinstance(g, dict) and any(is_ours(h) for h in g.get("hooks") or []) for g in groups
        )
    ]
    out: dict[str, Any] = {
        "agent": agent,
        "scope": scope,
        "hooks_file": str(files["hooks"]),
        "events": events,
        "missing_events": [e for e in EVENTS[agent] if e not in events],
        "installed": all(e in events for e in EVENTS[agent]),
    }
    if "mcp" in files:
        servers = _read_json(files["mcp"]).get("mcpServers")
        out["mcp_file"] = str(files["mcp"])
        out["mcp"] = isinstance(servers, dict) and MCP_NAME in servers
    if agent == CODEX:
        data = _read_toml(files["config"])
        features = data.get("features")
        out["config_file"] = str(files["config"])
        out["codex_hooks_enabled"] = (
            isinstance(features, dict) and features.get("codex_hooks") is True
        )
        servers = data.get("mcp_servers")
        out["mcp"] = isinstance(servers, dict) and MCP_NAME in servers
    return out


# -- files ---------------------------------------------------------------------


def _mcp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("mcp") is not None


def _mcp_args(command: str, namespace: str) -> list[str]:
    rest = shlex.split(command)[1:]
    rest = rest[: rest.index("hook")]  # python's -m mnemex, then the global options
    return [*rest, "--namespace", namespace, "mcp"]


def _with_mcp(config: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(config))
    servers = config.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InvalidInput(
            "the 'mcpServers' key of .mcp.json is not an object; fix it by hand first"
        )
    servers[MCP_NAME] = entry
    return config


def _without_mcp(config: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(config))
    servers = config.get("mcpServers")
    if isinstance(servers, dict) and MCP_NAME in servers:
        del servers[MCP_NAME]
    return config


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(
            f"{path} is not valid JSON ({exc}); fix it, then run this again"
        ) from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} does not hold a JSON object; fix it, then run this again")
    return data


def _update_json(path: Path, change: Any, *, create: bool = True) -> Change:
    if not path.exists() and not create:
        return Change(path, changed=False)
    before = _read_json(path)
    after = change(before)
    if after == before and path.exists():
        return Change(path, changed=False)
    if not after and not path.exists():
        return Change(path, changed=False)
    text = json.dumps(after, indent=2, ensure_ascii=False) + "\n"
    return _write(path, text)


def _write(path: Path, text: str) -> Change:
    backup = None
    if path.exists():
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        shutil.copy2(path, backup)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return Change(path, changed=True, backup=backup)


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"{path} is not valid TOML ({exc}); fix it, then run this again"
        ) from None


def _update_codex_config(path: Path, server: dict[str, Any] | None) -> Change:
    """``codex_hooks = true`` under ``[features]``, and the MCP server table, by text edits.

    Only lines are added: comments and layout of the file stay as they were.
    """
    data = _read_toml(path)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    original = text
    features = data.get("features")
    if not (isinstance(features, dict) and features.get("codex_hooks") is True):
        if isinstance(features, dict) and "codex_hooks" in features:
            raise InvalidInput(
                f"{path} sets [features] codex_hooks to {features['codex_hooks']!r}; "
                "set it to true by hand to run hooks"
            )
        header = re.search(r"^\[features\][ \t]*(#.*)?$", text, re.MULTILINE)
        if header:
            cut = header.end()
            text = text[:cut] + "\ncodex_hooks = true" + text[cut:]
        elif isinstance(features, dict):
            raise InvalidInput(f"{path}: add `codex_hooks = true` under [features] by hand")
        else:
            text = _append(text, "[features]\ncodex_hooks = true\n")
    servers = data.get("mcp_servers")
    if server is not None and not (isinstance(servers, dict) and MCP_NAME in servers):
        args = ", ".join(json.dumps(a) for a in server["args"])
        text = _append(
            text,
            f"[mcp_servers.{MCP_NAME}]\ncommand = {json.dumps(server['command'])}\nargs = [{args}]\n",
        )
    if text == original:
        return Change(path, changed=False)
    tomllib.loads(text)  # never write a file Codex cannot read
    return _write(path, text)


def _remove_codex_mcp(path: Path) -> Change:
    if not path.exists():
        return Change(path, changed=False)
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(rf"^\[mcp_servers\.{MCP_NAME}\][ \t]*\n(?:(?!\[)[^\n]*\n?)*", re.MULTILINE)
    new = pattern.sub("", text)
    if new == text:
        return Change(path, changed=False)
    tomllib.loads(new)
    return _write(path, new)


def _append(text: str, block: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return text + ("\n" if text else "") + block
