"""Settled names at the CLI: old spellings still work (hidden), help built from the constants,
the store and namespace taken from the environment by config alone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner

from mnemex.cli import cli
from mnemex.config import DEFAULT_SEARCH_LIMIT, RECALL_BUDGET_TOKENS, RECALL_MAX_MEMORIES
from tests.conftest import PYTHON, python_env


def mnemex(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "mnemex", *args],
        capture_output=True,
        text=True,
        env={**python_env(), **(env or {})},
        timeout=60,
    )


def _filled(db: Path) -> None:
    for n in range(4):
        added = mnemex("--db", str(db), "add", f"the deploy runbook step {n} needs the deploy key")
        assert added.returncode == 0, added.stderr


def test_recall_max_memories_is_m_and_the_old_n_still_works(tmp_path: Path) -> None:
    db = tmp_path / "names.db"
    _filled(db)
    counts = {}
    for flag in ("-m", "--max-memories", "-n"):
        out = mnemex("--db", str(db), "recall", "deploy runbook", flag, "2", "--json")
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        counts[flag] = (len(result["memories"]), result["max_memories"])
    assert counts == {"-m": (2, 2), "--max-memories": (2, 2), "-n": (2, 2)}
    bad = mnemex("--db", str(db), "recall", "deploy", "-n", "0")
    assert bad.returncode == 2 and "0 is not in the range" in bad.stderr


def test_the_hidden_alias_is_not_in_help() -> None:
    lines = CliRunner().invoke(cli, ["recall", "--help"]).output.splitlines()
    assert not [line for line in lines if line.strip().startswith("-n")]
    text = " ".join(" ".join(lines).split())
    assert "-m, --max-memories" in text
    assert f"default {RECALL_MAX_MEMORIES} (setting recall_max)" in text
    assert f"default {RECALL_BUDGET_TOKENS} (setting recall_budget)" in text
    search = " ".join(CliRunner().invoke(cli, ["search", "--help"]).output.split())
    for setting in ("search_limit", "fusion", "vector_weight", "search_relations", "search_mode"):
        assert f"(setting {setting})" in search, setting
    assert f"default {DEFAULT_SEARCH_LIMIT} (setting search_limit)" in search


def test_the_environment_names_the_store_and_namespace(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    env = {"MNEMEX_DB": str(db), "MNEMEX_NAMESPACE": "team"}
    added = mnemex("add", "the cache is warmed at nine", env=env)
    assert added.returncode == 0, added.stderr
    found = json.loads(mnemex("search", "cache warmed", "--json", env=env).stdout)
    assert found["namespace"] == "team" and len(found["hits"]) == 1
    other = mnemex("--db", str(db), "search", "cache warmed", "--json")
    assert json.loads(other.stdout)["hits"] == []  # the default namespace holds nothing
    given = mnemex("-n", "default", "search", "cache warmed", "--json", env=env)
    assert json.loads(given.stdout)["namespace"] == "default"  # an option beats the variable
    missing = mnemex("search", "x", env={"MNEMEX_DB": str(tmp_path / "none.db")})
    assert missing.returncode == 1
    assert "check the path given with --db (or MNEMEX_DB)" in missing.stderr


def test_a_setting_changes_the_default_the_help_names(tmp_path: Path) -> None:
    db = tmp_path / "cfg.db"
    _filled(db)
    (tmp_path / "config.toml").write_text("search_limit = 2\nrecall_max = 1\n")
    env = {"MNEMEX_CONFIG": str(tmp_path / "config.toml")}
    found = json.loads(mnemex("--db", str(db), "search", "deploy key", "--json", env=env).stdout)
    assert len(found["hits"]) == 2
    recalled = mnemex("--db", str(db), "recall", "deploy key", "--json", env=env)
    assert json.loads(recalled.stdout)["max_memories"] == 1
