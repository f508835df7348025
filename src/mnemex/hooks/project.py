"""The namespace of a project: where a session's memories go."""

from __future__ import annotations

import os

from mnemex.config import where


def project_namespace(
    cwd: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> str:
    """The namespace of a session working in ``cwd``, by the rule every command follows
    (:func:`mnemex.config.where`): ``$MNEMEX_NAMESPACE``, the config file's ``namespace``,
    the git repository's root (its path), else ``default``."""
    return where(None, cwd, home=home).namespace
