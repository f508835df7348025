"""The hooks' log: one line per failure or note in the data folder's ``hooks.log``."""

from __future__ import annotations

import time

# Not typing's TYPE_CHECKING: a hook process imports this module, and little else.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LOG_FILE = "hooks.log"
LOG_MAX_BYTES = 1_000_000


def log(home: str | None, event: Mapping[str, Any], message: str) -> None:
    """One line in the data folder's ``hooks.log``; never raises."""
    try:
        if home is None:
            from mnemex.config import default_home

            folder = default_home()
        else:
            from pathlib import Path

            folder = Path(home).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOG_FILE
        if path.exists() and path.stat().st_size > LOG_MAX_BYTES:
            path.replace(path.with_suffix(".log.1"))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        name = text_field(event.get("hook_event_name")) or "?"
        session = text_field(event.get("session_id")) or "-"
        line = " ".join(f"{stamp} {name} {session} {message}".split())
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(line[:2000] + "\n")
    except Exception:
        pass


def text_field(value: Any) -> str | None:
    """A field of a hook's event that holds text, or ``None``."""
    return value if isinstance(value, str) and value.strip() else None
