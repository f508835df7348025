"""Agent hooks: capture every session into the store, recall on every prompt.

Claude Code and Codex run a command per lifecycle event with a JSON object on
stdin. ``mnemex hook`` answers all of them (:mod:`mnemex.hooks.run`):
``SessionStart`` and ``UserPromptSubmit`` print a block of memories for the
model, ``Stop``, ``PreCompact`` and ``SessionEnd`` capture the new turns of the
session's transcript (:mod:`mnemex.hooks.transcript`, :mod:`mnemex.hooks.capture`)
after redacting secrets (:mod:`mnemex.hooks.redact`). ``mnemex hooks install``
writes the agent's config (:mod:`mnemex.hooks.install`); ``mnemex import
claude-code|codex`` backfills old sessions (:mod:`mnemex.hooks.backfill`).

This package is imported on every prompt, in a new process: modules here import
only what the hook path needs, and the rest inside the functions that use it.
"""

CLAUDE_CODE = "claude-code"
CODEX = "codex"
AGENTS = (CLAUDE_CODE, CODEX)
MIN_TIMEOUT, MAX_TIMEOUT = 0.01, 3600.0  # the bounds of `hook --timeout`

# The kinds of the memories a capture writes.
PROMPT = "prompt"
ANSWER = "answer"
ACTIONS = "actions"
KINDS = (PROMPT, ANSWER, ACTIONS)
