"""Listening for connections: which addresses are this machine's alone, and a socket bound
before anything is served, so that a taken port fails at once with what to do
(``mnemex mcp --http``, ``mnemex ui``)."""

from __future__ import annotations

import ipaddress
import socket

from mnemex.errors import InvalidInput


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``*.localhost``, 127/8, ::1)."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: any free port), not yet listening; a name
    that does not resolve or a port in use raises :class:`~mnemex.errors.InvalidInput`."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InvalidInput(
            f"cannot bind {host}: {exc.strerror}; give an address with --host"
        ) from None
    bound = socket.socket(family, kind, proto)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        bound.bind(address)
    except OSError as exc:
        bound.close()
        raise InvalidInput(
            f"cannot listen on {host}:{port} ({exc.strerror}): another process may be "
            "using it; stop it or choose another port with --port"
        ) from None
    return bound
