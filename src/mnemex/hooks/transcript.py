"""Turns out of an agent's transcript JSONL: the prompt, the final answer, the actions.

Claude Code writes one JSON object a line: ``type`` ``user`` or ``assistant``
lines whose ``message.content`` is a string or a list of blocks (``text``,
``thinking``, ``tool_use``, ``tool_result``), with ``uuid``, ``sessionId``,
``cwd`` and ``timestamp``; besides them meta lines (``isMeta``), side chains
(``isSidechain``, a subagent's work), summaries and snapshots. Codex writes
``{"timestamp", "type", "payload"}`` lines: ``session_meta``, then
``response_item`` payloads (``message`` with a ``role``, ``function_call``,
``reasoning``, ...) and ``event_msg`` echoes.

A turn is a user prompt and everything up to the next prompt. Its answer is
the assistant's text after the last tool call (the text before it was
narration); its actions are the files edited and the commands run. Lines that
are not conversation are skipped and lines that are not JSON are counted:
neither stops the reading. A turn whose answer is not written yet (the
transcript ends on a tool call) is left for the next read unless ``final``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from mnemex.hooks import AGENTS, CLAUDE_CODE, CODEX
from mnemex.hooks.injected import INJECTED_TAG, clean_text
from mnemex.records import dataclass

__all__ = [
    "AGENTS",
    "CLAUDE_CODE",
    "CODEX",
    "INJECTED_TAG",
    "Transcript",
    "Turn",
    "clean_text",
    "read",
]

MAX_COMMAND_CHARS = 160  # a command in the actions line
MAX_ACTIONS_CHARS = 1_000

# Prompts that are the agent's plumbing, not a request: slash-command wrappers,
# command output, interruption notices, Codex's environment and instructions.
_NOT_A_PROMPT = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "Caveat: The messages below were generated",
    "[Request interrupted by user",
    "<environment_context>",
    "<user_instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
    "# AGENTS.md instructions",
)
_EDIT_TOOLS = {"Edit", "Write", "MultiEdit", "NotebookEdit"}
_SHELL_TOOLS = {"Bash", "shell", "exec_command", "container.exec", "local_shell"}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Turn:
    """One prompt of a session and what came of it."""

    number: int  # 1-based within the session
    anchor: str  # stable within the agent: the prompt line's uuid, or file@offset
    prompt: str
    answer: str
    actions: str  # one compact line: files edited, commands run ("" when none)
    timestamp: str | None
    cwd: str | None


@dataclass(slots=True)
class Transcript:
    """What a read found: complete turns, and where the next read starts."""

    turns: list[Turn] = field(default_factory=list)
    next_offset: int = 0  # byte offset of the first line not yet part of a complete turn
    next_number: int = 1
    session_id: str | None = None
    cwd: str | None = None
    bad_lines: int = 0  # not JSON (or not an object)
    skipped_lines: int = 0  # JSON, but not conversation


@dataclass(slots=True)
class _Open:
    """A turn being read: where it starts, and what is known of it so far."""

    start: int
    anchor: str | None
    prompt: str | None  # None: a turn of the agent's plumbing, dropped
    timestamp: str | None
    cwd: str | None
    texts: list[str] = field(default_factory=list)  # since the last tool call
    earlier: list[str] = field(default_factory=list)  # before it
    actions: list[str] = field(default_factory=list)
    ends_on_text: bool = False

    def take(self, kind: str, value: str | None) -> None:
        """A text, a tool call (``value``: what it did) or a tool's result in this turn."""
        if kind == "text":
            assert value is not None
            self.texts.append(value)
            self.ends_on_text = True
            return
        if kind == "tool":
            if value:
                self.actions.append(value)
            self.earlier.extend(self.texts)
            self.texts = []
        self.ends_on_text = False  # a tool's result: the turn goes on


def read(
    path: str | Path,
    agent: str,
    *,
    start: int = 0,
    first_number: int = 1,
    final: bool = False,
) -> Transcript:
    """Read the turns of ``path`` from byte ``start`` (a line boundary) on."""
    out = Transcript(next_offset=start, next_number=first_number)
    parse = _claude_line if agent == CLAUDE_CODE else _codex_line
    stem = Path(path).stem
    current: _Open | None = None
    last_end = start
    for offset, raw in _lines(path, start):
        try:
            obj = json.loads(raw)
        except ValueError:
            if not raw.endswith(b"\n"):
                break  # a line still being written: read it next time
            obj = None
        last_end = offset + len(raw)
        if not isinstance(obj, dict):
            out.bad_lines += 1
            continue
        if agent == CODEX and obj.get("type") == "session_meta":
            meta = obj.get("payload") or {}
            if isinstance(meta, dict):
                out.session_id = _str(meta.get("id")) or out.session_id
                out.cwd = _str(meta.get("cwd")) or out.cwd
        event = parse(obj)
        if event is None:
            out.skipped_lines += 1
            continue
        kind, value = event
        if kind == "prompt":
            if current is not None:
                _close(out, current, first_number, stem)
            out.next_offset, out.next_number = offset, first_number + len(out.turns)
            current = _opened(out, obj, value, offset, agent)
        elif current is None:
            out.skipped_lines += 1  # an answer without a prompt (a resumed file's tail)
        else:
            current.take(kind, value)
        if current is None:
            out.next_offset = last_end
    if current is not None and (final or current.ends_on_text):
        _close(out, current, first_number, stem)
        out.next_offset, out.next_number = last_end, first_number + len(out.turns)
    return out


def _opened(
    out: Transcript, obj: dict[str, Any], value: str | None, offset: int, agent: str
) -> _Open:
    """The turn a prompt line opens; the session and folder it names go to ``out``."""
    cwd = _str(obj.get("cwd"))
    out.cwd = cwd or out.cwd
    if agent == CLAUDE_CODE:
        out.session_id = _str(obj.get("sessionId")) or out.session_id
    text = clean_text(value) if value is not None else None
    return _Open(
        start=offset,
        anchor=_str(obj.get("uuid")),
        prompt=text if text and not text.startswith(_NOT_A_PROMPT) else None,
        timestamp=_str(obj.get("timestamp")),
        cwd=cwd or out.cwd,
    )


def _close(out: Transcript, turn: _Open, first_number: int, stem: str) -> None:
    """Add the turn to ``out`` (numbered on from ``first_number``) unless it is plumbing."""
    if turn.prompt is None:
        return
    out.turns.append(
        Turn(
            number=first_number + len(out.turns),
            anchor=turn.anchor or f"{stem}@{turn.start}",
            prompt=turn.prompt,
            answer=clean_text("\n\n".join(turn.texts or turn.earlier)),
            actions=_actions_line(turn.actions),
            timestamp=turn.timestamp,
            cwd=turn.cwd,
        )
    )


def _lines(path: str | Path, start: int) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as stream:
        stream.seek(start)
        offset = start
        for raw in stream:
            yield offset, raw
            offset += len(raw)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


Event = tuple[str, str | None]


def _claude_line(obj: dict[str, Any]) -> Event | None:
    kind = obj.get("type")
    if kind not in ("user", "assistant") or obj.get("isSidechain") or obj.get("isMeta"):
        return None
    if any(
        obj.get(k) for k in ("isCompactSummary", "isApiErrorMessage", "isVisibleInTranscriptOnly")
    ):
        return None
    message = obj.get("message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if kind == "user":
        if "toolUseResult" in obj:
            return ("result", None)
        if isinstance(content, str):
            return ("prompt", content)
        if not isinstance(content, list):
            return None
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return ("result", None)
        return ("prompt", "\n".join(_texts(content, ("text",))))
    if isinstance(content, str):
        return ("text", content) if content.strip() else None
    if not isinstance(content, list):
        return None
    for block in content:  # Claude Code writes one block a line; take the first that counts
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            return ("tool", _claude_action(block))
        value = block.get("text")
        if block.get("type") == "text" and isinstance(value, str) and value.strip():
            return ("text", value)
    return None


def _texts(blocks: list[Any], types: tuple[str, ...]) -> list[str]:
    return [
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") in types and isinstance(b.get("text"), str)
    ]


def _claude_action(block: dict[str, Any]) -> str | None:
    name = block.get("name")
    tool_input = block.get("input")
    if not isinstance(tool_input, dict):
        return None
    if name in _EDIT_TOOLS:
        target = tool_input.get("file_path") or tool_input.get("notebook_path")
        return f"edit {target}" if isinstance(target, str) else None
    if name in _SHELL_TOOLS:
        return _command(tool_input.get("command"))
    return None


def _codex_line(obj: dict[str, Any]) -> Event | None:
    if obj.get("type") != "response_item":
        return None
    item = obj.get("payload")
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "message":
        content = item.get("content")
        if isinstance(content, str):
            content = [{"type": "input_text", "text": content}]
        if not isinstance(content, list):
            return None
        if item.get("role") == "user":
            return ("prompt", "\n".join(_texts(content, ("input_text", "text"))))
        if item.get("role") == "assistant":
            text = "\n".join(_texts(content, ("output_text", "text")))
            return ("text", text) if text.strip() else None
        return None
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        return ("tool", _codex_action(item))
    if kind in ("function_call_output", "custom_tool_call_output"):
        return ("result", None)
    return None


def _codex_action(item: dict[str, Any]) -> str | None:
    name = item.get("name")
    if item.get("type") == "local_shell_call":
        action = item.get("action")
        return _command(action.get("command")) if isinstance(action, dict) else None
    raw = item.get("arguments", item.get("input"))
    args: Any = raw
    if isinstance(raw, str) and item.get("type") == "function_call":
        try:
            args = json.loads(raw)
        except ValueError:
            args = raw
    if name == "apply_patch":
        patch = args.get("input") if isinstance(args, dict) else args
        if isinstance(patch, str):
            files = _PATCH_FILE.findall(patch)
            return "; ".join(f"edit {f.strip()}" for f in files) or None
        return None
    if name in _SHELL_TOOLS and isinstance(args, dict):
        command = args.get("command", args.get("cmd"))
        if isinstance(command, list) and command[:2] in (["bash", "-lc"], ["bash", "-c"]):
            command = command[2:]
        return _command(command)
    return None


def _command(command: Any) -> str | None:
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    if not isinstance(command, str) or not command.strip():
        return None
    line = " ".join(command.split())
    if len(line) > MAX_COMMAND_CHARS:
        line = line[: MAX_COMMAND_CHARS - 1] + "…"
    return f"run `{line}`"


def _actions_line(actions: list[str]) -> str:
    """``Edited a.py, b.py; ran `pytest -q`; ran `git status``` (each once, in order)."""
    edits: list[str] = []
    commands: list[str] = []
    for action in actions:
        for part in action.split("; edit "):
            part = part if part.startswith(("edit ", "run ")) else "edit " + part
            if part.startswith("edit "):
                edits.append(part[5:])
            else:
                commands.append(part[4:])
    pieces = []
    if edits:
        pieces.append("Edited " + ", ".join(dict.fromkeys(edits)))
    pieces.extend("ran " + c for c in dict.fromkeys(commands))
    line = "; ".join(pieces)
    if len(line) > MAX_ACTIONS_CHARS:
        line = line[: MAX_ACTIONS_CHARS - 1] + "…"
    return line
