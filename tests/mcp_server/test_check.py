"""`mnemex mcp --check`: a real stdio server started as an agent starts it, and used."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import mnemex
from tests.conftest import PYTHON, python_env


def run_check(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = python_env()
    env["MNEMEX_HOME"] = str(home)
    return subprocess.run(
        [PYTHON, "-m", "mnemex", *args, "mcp", "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_working_server_lists_its_tools_and_counts(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with mnemex.open(db, namespace="ledgerly") as store:
        store.add_many(["Deploys need FLY_API_TOKEN", "Invoices render with WeasyPrint"])
    done = run_check("--db", str(db), "-n", "ledgerly", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert "tools     9: memory_search," in done.stdout
    assert "namespace 'ledgerly': 2 memories" in done.stdout
    assert f"--db {db} --namespace ledgerly mcp" in done.stdout
    assert done.stdout.rstrip().endswith("gets these tools")


@pytest.mark.slow
def test_a_store_that_cannot_open_fails_with_the_servers_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the store's folder would be")
    done = run_check("--db", str(blocker / "agent.db"), home=tmp_path / "home")
    assert done.returncode == 1
    assert "cannot create the folder for the store" in done.stderr  # the server's own line
    assert "error: the MCP server failed" in done.stderr
    assert "ok:" not in done.stdout


def test_check_is_for_the_stdio_server(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mnemex.cli import cli

    result = CliRunner().invoke(cli, ["--home", str(tmp_path), "mcp", "--http", "--check"])
    assert result.exit_code == 2
    assert "--check starts the stdio server" in result.output
