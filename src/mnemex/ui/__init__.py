"""``mnemex ui``: a local web page to see what agents remember, why a memory reached a
prompt, and to fix what is wrong (needs ``mnemex[ui]``: Starlette, uvicorn, Jinja2).

:func:`mnemex.ui.app.build_app` builds the application over a store;
:func:`mnemex.ui.server.run` serves it. Importing this package imports none of the
web libraries: ``mnemex --help`` stays fast.
"""

from __future__ import annotations


def require_extra() -> None:
    """Raise :class:`~mnemex.errors.MissingExtra` naming ``mnemex[ui]`` unless Starlette,
    uvicorn and Jinja2 are installed."""
    from mnemex.errors import MissingExtra

    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingExtra("ui", "mnemex ui", f"Starlette, uvicorn and Jinja2 ({exc})") from None
