"""A real PostgreSQL 16 with pgvector for the tests marked ``postgres``.

One server per test session, started by ``pgserver`` (its wheel ships the
binaries and pgvector) in a temporary folder, on a Unix socket: no network,
no system package, no container. Run as root, pgserver runs the server as a
``pgserver`` system user that it creates. Each test gets a database of its
own. Without the ``postgres`` extra the tests are skipped, except in CI
(``CI`` set), where they fail: CI installs every extra.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    try:
        import psycopg  # noqa: F401

        from mnemex.engine.postgres import start_server
        from mnemex.engine.postgres.server import load_pgserver

        load_pgserver()
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the postgres extra is not installed in CI: {exc}")
        pytest.skip("needs the postgres extra: pip install 'mnemex[postgres]'")

    # Not under pytest's basetemp: a pytest session started meanwhile (another checkout's)
    # prunes old basetemp folders, and would delete the data of a running server.
    root = Path(tempfile.mkdtemp(prefix="mnemex-pg-"))
    try:
        server = start_server(root / "data", delete=True)
        yield server
        server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """The URL of a new, empty database on the session's server, dropped afterwards."""
    from mnemex.engine.postgres import connect

    name = "test_" + uuid.uuid4().hex[:12]
    with connect(pg_server.url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    yield str(pg_server.url_for(name))
    with connect(pg_server.url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
