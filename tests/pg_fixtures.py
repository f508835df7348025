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


# -- the backend-independent tests, on both engines ------------------------------------

both_engines = pytest.mark.both_engines
"""A test that must hold on every engine: it runs once per engine (``[sqlite]``,
``[postgres]``), its ``store`` / ``make_store`` being a SQLite file or a PostgreSQL
database of its own."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_engines: runs on SQLite and on PostgreSQL (store and make_store)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_engines"):
        metafunc.parametrize(
            "engine",
            [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)],
            indirect=True,
        )


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str:
    """The engine a test's stores use: SQLite unless the test is marked ``both_engines``."""
    return str(getattr(request, "param", "sqlite"))


# The tables a store's data lives in (emptied between tests; the schema stays).
DATA_TABLES = (
    "memories, postings, namespace_stats, term_stats, embeddings, vector_stats, "
    "vector_models, relations, relation_postings, relation_namespace_stats, relation_term_stats, "
    "workspaces, files, chunks, injections"
)


class PgDatabases:
    """Databases for the stores of the tests run on PostgreSQL: one per store name a test
    opens, made once from a migrated template and emptied before each test that uses it
    (creating and dropping a database per test took seconds on a loaded machine)."""

    def __init__(self, server: Any) -> None:
        from mnemex.engine.postgres import connect, migrate

        self.server = server
        self.urls: dict[str, str] = {}
        self.template = "mnemex_template_" + uuid.uuid4().hex[:8]
        with connect(server.url) as admin:
            admin.execute(f'CREATE DATABASE "{self.template}"'.encode())
        with connect(server.url_for(self.template)) as conn:
            migrate(conn)

    def fresh(self, name: str) -> str:
        """The URL of the database for ``name``, empty."""
        from mnemex.engine.postgres import connect

        if name not in self.urls:
            database = "test_" + uuid.uuid4().hex[:12]
            with connect(self.server.url) as admin:
                admin.execute(f'CREATE DATABASE "{database}" TEMPLATE "{self.template}"'.encode())
            self.urls[name] = str(self.server.url_for(database))
        else:
            with connect(self.urls[name]) as conn:
                conn.execute(f"TRUNCATE {DATA_TABLES} RESTART IDENTITY CASCADE".encode())
                conn.execute("DELETE FROM meta WHERE key = 'embedder'")
        return self.urls[name]


@pytest.fixture(scope="session")
def pg_databases(pg_server: Any) -> PgDatabases:
    return PgDatabases(pg_server)


@pytest.fixture
def store_place(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Where a test's store named ``name`` lives: ``place(name)``, a file path or a URL."""
    if engine == "sqlite":
        yield lambda name: tmp_path / name
        return
    databases: PgDatabases = request.getfixturevalue("pg_databases")
    urls: dict[str, str] = {}

    def place(name: str) -> str:
        if name not in urls:
            urls[name] = databases.fresh(name)
        return urls[name]

    yield place
