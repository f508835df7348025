"""The inspector's pure parts: escaping and highlighting (hypothesis properties), the
host rules, the addresses, and the command's errors (no browser needed)."""

from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from tests.conftest import PYTHON, python_env

pytest.importorskip("jinja2", reason="needs the ui extra: pip install 'mnemex[ui]'")

from mnemex.listen import is_loopback
from mnemex.ui import present
from mnemex.ui.guard import Policy, host_name
from mnemex.ui.server import address, check_bind

OURS = re.compile(r'</?mark>|<span class="ctl" title="an invisible character">|</span>')
TEXT = st.text(
    alphabet=st.sampled_from(
        [*list("<>&\"' abc/="), present.HIGHLIGHT_START, present.HIGHLIGHT_END, "\u202e", "\x07"]
    )
)


@given(TEXT)
def test_a_snippet_holds_no_markup_but_ours(text: str) -> None:
    html = str(present.snippet(text))
    assert "<" not in OURS.sub("", html) and ">" not in OURS.sub("", html)
    assert html.count("<mark>") == html.count("</mark>")
    assert "\u202e" not in html and "\x07" not in html


@given(st.text())
def test_shown_text_is_escaped_and_its_controls_visible(text: str) -> None:
    html = str(present.shown(text))
    assert not re.search(r"<(?!span class=\"ctl\"|/span>)", html)
    assert not re.search("[\u202a-\u202e\u2066-\u2069]", html)


def test_shown_examples() -> None:
    assert str(present.shown("<b>a</b>\u202ez")) == (
        '&lt;b&gt;a&lt;/b&gt;<span class="ctl" title="an invisible character">⟨U+202E⟩</span>z'
    )
    assert str(present.snippet("x \ue000<i>\ue001 y")) == "x <mark>&lt;i&gt;</mark> y"
    assert present.plain("a\u202e\n b" * 3, 8) == "a ba ba…"


def test_addresses_leave_out_empty_fields() -> None:
    assert (
        present.href("/", q="a b&c", kind="", ns=None, tag=["x", "y"]) == "/?q=a+b%26c&tag=x&tag=y"
    )
    assert present.href("/timeline") == "/timeline"
    assert address("0.0.0.0", 8766, "t/k") == "http://127.0.0.1:8766/?token=t%2Fk"
    assert address("::1", 1, None) == "http://[::1]:1/"


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8766", "127.0.0.1"),
        ("[::1]:80", "::1"),
        ("LocalHost", "localhost"),
        ("::1", "::1"),
        ("", ""),
    ],
)
def test_host_names(header: str, name: str) -> None:
    assert host_name(header) == name


def test_which_hosts_a_server_answers_for() -> None:
    local = Policy(bind="127.0.0.1")
    assert all(
        local.host_allowed(h) for h in ("localhost:1", "127.0.0.1", "[::1]:9", "app.localhost")
    )
    assert not any(
        local.host_allowed(h) for h in ("evil.example", "10.0.0.5:80", "127.0.0.1.nip.io", "")
    )
    lan = Policy(bind="10.0.0.5", token="x" * 16, allow_hosts=("inspector.lan",))
    assert lan.host_allowed("10.0.0.5:8766") and lan.host_allowed("Inspector.LAN:8766")
    assert not lan.host_allowed("10.0.0.6") and not lan.host_allowed("evil.example")
    everywhere = Policy(bind="0.0.0.0", token="x" * 16)
    assert everywhere.host_allowed("192.168.1.9:8766") and not everywhere.host_allowed(
        "evil.example"
    )
    assert is_loopback("127.8.0.1") and not is_loopback("localhost.evil.example")


def test_off_loopback_needs_a_long_token() -> None:
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", "x" * 16)
    with pytest.raises(InvalidInput, match="not a loopback address"):
        check_bind("192.168.1.9", None)
    with pytest.raises(InvalidInput, match="at least 16"):
        check_bind("127.0.0.1", "short")


def test_csrf_tokens_are_per_session_and_per_server() -> None:
    one, two = Policy(bind="127.0.0.1"), Policy(bind="127.0.0.1")
    assert one.csrf("a" * 32) == one.csrf("a" * 32) != one.csrf("b" * 32)
    assert one.csrf("a" * 32) != two.csrf("a" * 32)


def test_without_the_extra_the_command_says_what_to_install(tmp_path: object) -> None:
    code = (
        "import sys\nsys.modules['starlette'] = None\nfrom mnemex.cli import main\nmain(['ui'])\n"
    )
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=python_env())
    assert done.returncode == 1
    assert "pip install 'mnemex[ui]'" in done.stderr


def test_a_missing_store_or_a_busy_port_fail_with_what_to_do(tmp_path: object) -> None:
    import socket
    from pathlib import Path

    folder = Path(str(tmp_path))
    env = {**python_env(), "MNEMEX_HOME": str(folder / "home")}
    missing = subprocess.run(
        [PYTHON, "-m", "mnemex", "--db", str(folder / "none.db"), "ui"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 1 and "no store at" in missing.stderr
    assert not (folder / "none.db").exists()
    subprocess.run(
        [PYTHON, "-m", "mnemex", "--db", str(folder / "m.db"), "add", "x"], env=env, check=True
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = subprocess.run(
            [PYTHON, "-m", "mnemex", "--db", str(folder / "m.db"), "ui", "--port", str(port)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    assert busy.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
