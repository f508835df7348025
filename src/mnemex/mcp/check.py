"""``mnemex mcp --check``: start the server as an agent does, over stdio, and use it.

The check runs ``python -m mnemex [--db ...] [--namespace ...] mcp`` in a process of its
own with this environment, as a client's configuration would start it, completes the
MCP handshake, lists the tools and calls ``memory_stats``: a missing SDK, a store that
cannot be opened or a server that does not answer fails it, with the reason (the
server's own error line goes to standard error, as it would to the client's log).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from mnemex.errors import MnemexError
from mnemex.records import dataclass

CHECK_SECONDS = 60.0  # the server's start (imports, the store, the model) on a loaded machine


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What the server said: its name, its tools and the namespace's counts."""

    command: tuple[str, ...]
    server: str
    tools: tuple[str, ...]
    stats: dict[str, Any]


def server_command(global_options: Sequence[str]) -> list[str]:
    """The command that starts this installation's server, with the CLI's global options."""
    return [sys.executable, "-m", "mnemex", *global_options, "mcp"]


def check(global_options: Sequence[str], timeout: float = CHECK_SECONDS) -> CheckReport:
    """Start the stdio server, list its tools and call ``memory_stats``; raise
    :class:`MnemexError` saying what failed."""
    import anyio

    command = server_command(global_options)
    try:
        return anyio.run(_talk, command, timeout)
    except MnemexError:
        raise
    except TimeoutError:
        raise MnemexError(
            f"the MCP server did not answer within {timeout:g} s: {' '.join(command)}"
        ) from None
    except Exception as exc:  # the SDK's and the process's errors, whatever their type
        raise MnemexError(f"the MCP server failed: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """The innermost message of an exception group, else the exception's own."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


async def _talk(command: list[str], timeout: float) -> CheckReport:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    # The SDK passes a child only a few variables unless told: give it this environment,
    # as a client configured with the same variables would.
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    with anyio.fail_after(timeout):
        async with Client(params) as client:
            tools = tuple(tool.name for tool in (await client.list_tools()).tools)
            result = await client.call_tool("memory_stats", {})
            info = client.server_info
    if result.is_error or result.structured_content is None:
        raise MnemexError(f"memory_stats failed: {result.content}")
    server = f"{info.name} {info.version}" if info is not None else "an MCP server"
    return CheckReport(tuple(command), server, tools, dict(result.structured_content))
