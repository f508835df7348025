"""The inspector's tests: a real ``mnemex ui`` process on a real store, driven by the
system's Chromium through Playwright (never a browser Playwright downloads).

Without Chromium (``apt-get install -y chromium``) or Playwright the browser tests are
skipped, except in CI (``CI`` set), where they fail: CI installs both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SRC

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "ui"


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the browser tests need {reason} in CI (.ci/run installs it)")
    pytest.skip(f"needs {reason}")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        _missing("Chromium from the system's packages: apt-get install -y chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright: pip install 'mnemex[browser]' (make test-ui)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@dataclass
class Watched:
    """A page, and what it did that a page of hostile memories must never do: open a
    dialog, ask for anything but the inspector's own files, break its CSP."""

    page: Any
    origin: str
    dialogs: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def clean(self) -> None:
        assert self.dialogs == [], f"a dialog opened: {self.dialogs}"
        assert self.foreign == [], f"requests that left the inspector: {self.foreign}"
        violations = [m for m in self.console if "Content Security Policy" in m]
        assert violations == [], violations


@dataclass
class Server:
    """A running ``mnemex ui``: its address and process."""

    url: str
    process: subprocess.Popen[str]
    home: Path
    db: str

    @property
    def origin(self) -> str:
        return self.url.split("/?")[0].rstrip("/")

    def open(self, browser: Any, path: str = "/", **context: Any) -> Watched:
        """A new browser context (its own cookies) on ``path``, watched."""
        page = browser.new_context(viewport={"width": 1100, "height": 900}, **context).new_page()
        watched = Watched(page, self.origin)
        page.on("dialog", lambda d: (watched.dialogs.append(d.message), d.dismiss()))
        page.on(
            "request",
            lambda r: (
                None if r.url.startswith(self.origin + "/") else watched.foreign.append(r.url)
            ),
        )
        page.on("console", lambda m: watched.console.append(m.text))
        page.goto(self.origin + path)
        return watched


def cli(
    db: str, home: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``mnemex --db DB ARGS`` in a new process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "MNEMEX_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "mnemex", "--db", db, *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
    )


def start(db: str, home: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    """``mnemex ui --port 0 ARGS`` on ``db``, once it prints its address."""
    environment = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "MNEMEX_HOME": str(home),
        **(env or {}),
    }
    errors = home / f"ui-{len(list(home.glob('ui-*.err')))}.err"
    with errors.open("w") as stderr:  # a file: a full pipe would stall the server
        process = subprocess.Popen(
            [sys.executable, "-m", "mnemex", "--db", db, "ui", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=environment,
        )
    assert process.stdout is not None
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(60)
    if not line or not line[0].startswith("http://"):
        process.kill()
        process.wait(timeout=10)
        raise AssertionError(f"mnemex ui did not start: {line} {errors.read_text()}")
    return Server(line[0].strip(), process, home, db)


def stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start ``mnemex ui`` processes (stopped after the test)."""
    started: list[Server] = []

    def run(db: str | Path, *args: str, env: dict[str, str] | None = None) -> Server:
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        server = start(str(db), home, *args, env=env)
        started.append(server)
        return server

    yield run
    for server in started:
        stop(server)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An agent's project folder (a git repository): its namespace is its path."""
    root = tmp_path / "ledgerly"
    (root / ".git").mkdir(parents=True)
    return root


def screenshot(page: Any, name: str, hide: tuple[str, ...] = (), under: str = "#fbfbfc") -> None:
    """Save the page as ``docs/ui/<name>.png``, which the README shows, with what changes
    from run to run (times, milliseconds) painted over in the colour ``under``: the file
    is rewritten only when the picture changed."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / f"{name}.png"
    page.wait_for_timeout(200)  # htmx settled, the caret blink aside
    masks = [page.locator(selector) for selector in hide]
    data = page.screenshot(full_page=False, mask=masks, mask_color=under, caret="hide")
    if not target.exists() or target.read_bytes() != data:
        target.write_bytes(data)
