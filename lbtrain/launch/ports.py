"""TCP ports for the jobs lbtrain starts on this machine: free ones, or a fixed range checked
before anything starts (one check for every job kind)."""

from __future__ import annotations

import socket
from typing import Sequence

from lbtrain.config import ConfigError

HIGHEST_PORT = 65535


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on this machine now (the kernel's choice for port 0)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("localhost", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def ports_in_use(ports: Sequence[int]) -> list[int]:
    """Those of ``ports`` that cannot be bound on localhost now."""
    taken = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("localhost", port))
            except OSError:
                taken.append(port)
    return taken


def job_ports(count: int, base_port: int | None, field: str) -> list[int]:
    """The ``count`` ports of a job: ``base_port .. base_port + count - 1`` when the setting
    ``field`` fixes them (a ``ConfigError`` names a port above 65535 or one in use), else free ones."""
    if base_port is None:
        return free_ports(count)
    ports = list(range(base_port, base_port + count))
    if ports[-1] > HIGHEST_PORT:
        raise ConfigError(f"{field} {base_port}: the job needs ports up to {ports[-1]}, above {HIGHEST_PORT}")
    taken = ports_in_use(ports)
    if taken:
        raise ConfigError(f"{field}: port {taken[0]} is in use (the job needs ports {ports[0]}-{ports[-1]})")
    return ports
