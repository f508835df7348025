"""Redaction: secrets of the common shapes and ``<private>`` spans never reach the store.

Applied to every text a hook or a backfill writes (prompts, answers, the
actions line). A ``<private>…</private>`` span (or an unclosed ``<private>``
to the end of the text) becomes ``[private]``; a token, key or password
becomes ``[REDACTED]``, keeping the name it was assigned to so that the
memory still says *which* secret was used.
"""

from __future__ import annotations

import functools
import re

REDACTED = "[REDACTED]"
PRIVATE = "[private]"

# The patterns are compiled the first time a text could match them (each needs one of
# its trigger strings, below): a prompt without any of them costs a few substring tests,
# not the 2-4 ms of compiling them, on every prompt the hook logs.
_PRIVATE_SOURCE = (r"<private>.*?(?:</private>|\Z)", re.DOTALL | re.IGNORECASE)

# Tokens recognizable by their shape alone.
_TOKENS_SOURCE = (
    "|".join(
        (
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",  # AWS access key ids
            r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",  # GitHub tokens
            r"\bgithub_pat_[A-Za-z0-9_]{30,}\b",
            r"\bglpat-[A-Za-z0-9_-]{20,}\b",  # GitLab
            r"\bsk-(?:ant-|proj-|svcacct-|admin-|or-)?[A-Za-z0-9_-]{20,}",  # OpenAI, Anthropic, ...
            r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}\b",  # Stripe
            r"\bxox[abposre]-[A-Za-z0-9-]{10,}",  # Slack
            r"\bAIza[0-9A-Za-z_-]{35}\b",  # Google API keys
            r"\bhf_[A-Za-z0-9]{30,}\b",  # Hugging Face
            r"\bnpm_[A-Za-z0-9]{36}\b",
            r"\bpypi-[A-Za-z0-9_-]{50,}",
            r"\bSG\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}",  # SendGrid
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
        )
    ),
    re.DOTALL,
)
# What a text holds when one of those tokens is in it (each alternative above starts so).
_TOKEN_TRIGGERS = (
    "-----BEGIN",
    "AKIA",
    "ASIA",
    "AGPA",
    "AIDA",
    "AROA",
    "ANPA",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "k_live_",
    "k_test_",
    "xox",
    "AIza",
    "hf_",
    "npm_",
    "pypi-",
    "SG.",
    "eyJ",
)
# A value assigned to a name that says it is secret: API_KEY=..., "password": "...".
_ASSIGNED_SOURCE = (
    r"""(?ix)
    (\b[\w.-]*?(?:api[_-]?key|secret(?:[_-]?key)?|token|passw(?:or)?d|pwd|access[_-]?key|credentials?)
     ["']?\s*[:=]\s*)
    (["']?)
    ([^\s"',;]{6,})
    \2
    """,
    0,
)
_ASSIGNED_TRIGGERS = ("key", "secret", "token", "passw", "pwd", "credential")  # lower case
_BEARER_SOURCE = (r"(?i)\b(bearer|basic|token)(\s+)([A-Za-z0-9._~+/=-]{12,})", 0)
_URL_PASSWORD_SOURCE = (r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)(@)", re.IGNORECASE)


@functools.cache
def _compiled(source: tuple[str, int]) -> re.Pattern[str]:
    return re.compile(*source)


# What ``re.IGNORECASE`` takes for an ASCII letter besides its two cases: the dotted and
# dotless i (casefold makes the first "i" and a combining dot), the long s and the Kelvin
# sign (casefold makes them "s" and "k").
_FOLD_MORE = {0x131: "i", 0x307: None}


def _folded(text: str) -> str:
    """``text`` in the case every case-insensitive pattern here matches it in."""
    return text.casefold().translate(_FOLD_MORE)


def redact(text: str) -> str:
    """``text`` with private spans and secrets replaced."""
    if not text:
        return text
    lowered = _folded(text)
    if "<private" in lowered:
        text = _compiled(_PRIVATE_SOURCE).sub(PRIVATE, text)
    if any(trigger in text for trigger in _TOKEN_TRIGGERS):
        text = _compiled(_TOKENS_SOURCE).sub(REDACTED, text)
    if "://" in text and "@" in text:
        text = _compiled(_URL_PASSWORD_SOURCE).sub(
            lambda m: m.group(1) + REDACTED + m.group(3), text
        )
    if "bearer" in lowered or "basic" in lowered or "token" in lowered:
        text = _compiled(_BEARER_SOURCE).sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    if any(trigger in lowered for trigger in _ASSIGNED_TRIGGERS):
        text = _compiled(_ASSIGNED_SOURCE).sub(_assigned, text)
    return text


def redact_eagerly(text: str) -> str:
    """:func:`redact` with every pattern applied, whatever the text holds (what the
    triggers must never change: the tests hold the two equal)."""
    if not text:
        return text
    text = _compiled(_PRIVATE_SOURCE).sub(PRIVATE, text)
    text = _compiled(_TOKENS_SOURCE).sub(REDACTED, text)
    text = _compiled(_URL_PASSWORD_SOURCE).sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    text = _compiled(_BEARER_SOURCE).sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _compiled(_ASSIGNED_SOURCE).sub(_assigned, text)


def _assigned(match: re.Match[str]) -> str:
    value = match.group(3)
    if value == REDACTED or value.startswith(("[REDACTED", "$", "${", "<", "os.environ")):
        return match.group(0)  # already redacted, or a reference to a secret, not the secret
    quote = match.group(2)
    return f"{match.group(1)}{quote}{REDACTED}{quote}"
