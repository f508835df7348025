"""The first prompt after a fresh install and a capture gets the captured fact, every time.

Real processes as an agent runs them: `mnemex hooks install`, then the commands its
settings hold, fed the events' JSON on stdin through the shell, half of the runs beside
a CPU-bound process on the machine's cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SRC
from tests.hook_fixtures import ClaudeSession

pytestmark = [pytest.mark.slow, pytest.mark.model]

# (the prompt of the captured turn, its answer, a later prompt in other words that shares
# a distinctive word with them, what the injected block must hold)
FACTS = [
    (
        "What did the vendor say about the Kestrel invoice export?",
        "The Kestrel exporter drops the VAT column when the currency is CHF; pin kestrel-export "
        "to 2.4.1 until they ship the fix.",
        "why is the VAT missing from Kestrel exports in Swiss francs?",
        "2.4.1",
    ),
    (
        "Why did the nightly backup fail?",
        "The Borgmatic backup failed because the repository passphrase expired; the new one is "
        "in 1Password under infra/borg.",
        "where do we keep the Borgmatic passphrase now?",
        "infra/borg",
    ),
    (
        "How do we rotate the Zephyr signing key?",
        "Zephyr signing keys rotate every 90 days with `make rotate-zephyr`, which also updates "
        "the JWKS endpoint.",
        "what command renews the Zephyr keys?",
        "rotate-zephyr",
    ),
    (
        "Which queue does the Ocelot importer use?",
        "The Ocelot importer reads from the SQS queue ocelot-ingest-prod with a visibility "
        "timeout of 300 seconds.",
        "what is the name of the SQS queue feeding Ocelot?",
        "ocelot-ingest-prod",
    ),
    (
        "What's the flaky test in the Marigold suite?",
        "test_marigold_refund_race is flaky because it depends on the wall clock; it is "
        "quarantined with the flaky marker.",
        "which Marigold test keeps failing at random?",
        "test_marigold_refund_race",
    ),
    (
        "Where is the Tamarind feature flag configured?",
        "The Tamarind rollout flag lives in config/flags/tamarind.yaml and LaunchDarkly reads it "
        "at startup.",
        "which file turns Tamarind on or off?",
        "tamarind.yaml",
    ),
    (
        "What broke the Quokka dashboard?",
        "The Quokka dashboard broke after Grafana 11 renamed the panel type; we pinned Grafana "
        "to 10.4.3.",
        "which Grafana version did we pin for Quokka?",
        "10.4.3",
    ),
    (
        "How big can a Heron upload be?",
        "Heron uploads are capped at 25 MB by client_max_body_size in deploy/heron.conf.",
        "what limits the size of the files people send to Heron?",
        "client_max_body_size",
    ),
    (
        "Who owns the Pelican billing cron?",
        "The Pelican billing cron belongs to Priya's team and runs at 03:15 UTC on worker-7.",
        "when does the Pelican job run each night?",
        "03:15",
    ),
    (
        "What's the Saffron API rate limit?",
        "The Saffron partner API allows 120 requests per minute per token; beyond that it "
        "answers 429 with Retry-After.",
        "how many calls a minute can we make to Saffron?",
        "120 requests",
    ),
]
RUNS = 20


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "HOME": str(home),
        "MNEMEX_HOME": str(home / "data"),
        "MNEMEX_EMBEDDER": "local",
    }


def _commands(project: Path) -> dict[str, str]:
    """The command the agent runs for each event, from the settings install wrote."""
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    return {event: groups[0]["hooks"][0]["command"] for event, groups in settings["hooks"].items()}


def _run(command: str, event: dict[str, Any], cwd: Path, env: dict[str, str]) -> tuple[str, float]:
    started = time.monotonic()
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(event).encode(),
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    if not done.stdout.strip():
        return "", took
    return str(json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]), took


def _stop_server(home: Path, env: dict[str, str]) -> None:
    """Wait for the server the first prompt started (it takes its lock once the model is
    loaded), then stop it."""
    deadline = time.monotonic() + 60
    while not (home / "data" / "serve.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    subprocess.run(
        [sys.executable, "-m", "mnemex", "hooks", "stop"], env=env, capture_output=True, timeout=60
    )


def test_the_first_prompt_gets_the_fact_the_stop_hook_captured_every_time(
    tmp_path: Path,
) -> None:
    timings = []
    for run in range(RUNS):
        asked, answer, later, wanted = FACTS[run % len(FACTS)]
        home, project = tmp_path / f"run{run}", tmp_path / f"run{run}" / "project"
        (project / ".git").mkdir(parents=True)
        env = _env(home)
        installed = subprocess.run(
            [sys.executable, "-m", "mnemex", "hooks", "install", "claude-code"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert installed.returncode == 0, installed.stderr
        commands = _commands(project)
        load = None
        if run % 2:  # a CPU-bound process beside the hooks
            load = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            first = ClaudeSession(home / "first.jsonl", str(project))
            first.turn(asked, answer)
            _, stop = _run(commands["Stop"], first.event("Stop"), project, env)
            second = ClaudeSession(home / "second.jsonl", str(project))
            prompt = second.event("UserPromptSubmit", prompt=later)
            block, took = _run(commands["UserPromptSubmit"], prompt, project, env)
        finally:
            if load is not None:
                load.kill()
                load.wait()
            _stop_server(home, env)
        log = home / "data" / "hooks.log"
        notes = log.read_text() if log.exists() else ""
        timings.append((run, bool(load), round(stop, 2), round(took, 2), "lexically" in notes))
        assert wanted in block, (run, later, block, notes)
        assert all(" note: " in line for line in notes.splitlines()), notes  # no error
    print("\n(run, loaded, Stop s, prompt s, answered lexically)")
    for row in timings:
        print(row)
