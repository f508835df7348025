"""How the inspector shows values: escaped text with visible control characters,
highlighted snippets, times, scores, addresses.

Memory text is hostile: every function here that returns markup escapes the
text first, then adds only tags of its own. Bidirectional controls (the
"Trojan Source" characters) and other invisible controls are shown as
``⟨U+202E⟩`` instead of acting on the page.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlencode

from markupsafe import Markup, escape

HIGHLIGHT_START: Final = "\ue000"  # snippet markers: private-use characters, not markup
HIGHLIGHT_END: Final = "\ue001"
# Bidirectional controls, and the C0/C1 controls and zero-width characters a browser
# would not show; a tab and a newline are kept.
_INVISIBLE: Final = re.compile(
    "[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u200b-\u200d\u2060\ufeff"
    "\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def _visible(match: re.Match[str]) -> str:
    return f'<span class="ctl" title="an invisible character">⟨U+{ord(match.group()):04X}⟩</span>'


def shown(value: object) -> Markup:
    """``value`` as text: escaped, with invisible and bidirectional controls visible."""
    text = str(escape("" if value is None else str(value)))
    return Markup(_INVISIBLE.sub(_visible, text))


def plain(value: object, limit: int = 200) -> str:
    """One line of text without controls (for a ``<title>``), at most ``limit`` characters."""
    text = _INVISIBLE.sub("", " ".join(str(value).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def snippet(text: str) -> Markup:
    """A search snippet with its highlighted words in ``<mark>``: the text escaped, then
    each marker pair made a tag (a marker without its pair is dropped)."""
    out: list[str] = []
    open_mark = False
    for part in re.split(f"([{HIGHLIGHT_START}{HIGHLIGHT_END}])", text):
        if part == HIGHLIGHT_START:
            if not open_mark:
                out.append("<mark>")
                open_mark = True
        elif part == HIGHLIGHT_END:
            if open_mark:
                out.append("</mark>")
                open_mark = False
        else:
            out.append(str(shown(part)))
    if open_mark:
        out.append("</mark>")
    return Markup("".join(out))


def when(value: datetime | None) -> str:
    """A time in UTC to the minute: ``2026-11-27 10:45``."""
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M")


def day(value: datetime) -> str:
    return value.strftime("%Y-%m-%d")


def weekday(value: datetime) -> str:
    return value.strftime("%A %d %B %Y")


def score(value: float | None, places: int = 3) -> str:
    return "–" if value is None else f"{value:.{places}f}"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def href(path: str, **params: Any) -> str:
    """``path`` with the query ``params`` that have a value (lists repeat their key)."""
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        pairs += [(key, str(v)) for v in values if v is not None and v != ""]
    return path + (f"?{urlencode(pairs)}" if pairs else "")


FILTERS: Final = {
    "shown": shown,
    "snippet": snippet,
    "when": when,
    "day": day,
    "weekday": weekday,
    "score": score,
    "pretty_json": pretty_json,
    "plain": plain,
}
