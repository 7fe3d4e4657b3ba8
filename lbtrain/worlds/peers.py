"""A bounded wait for the other tasks of a tf.distribute job, before TensorFlow's own.

TensorFlow connects to the tasks ``$TF_CONFIG`` lists without a deadline, holding Python's lock
the while: a peer that never comes (a wrong host or port, a node that did not start) leaves the
process silent for good. So a task first waits, at most ``$LBTRAIN_PEER_TIMEOUT`` seconds
(default ``DEFAULT_PEER_TIMEOUT``), until every peer accepts a TCP connection, and else ends
with one line naming the first peer that did not (``ConfigError``). A task whose peers connect
to it in turn (a multi-worker job's workers) listens on its own address meanwhile, so every
task of the job sees every other one before any starts TensorFlow's server.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections.abc import Iterator, Mapping

from lbtrain.errors import ConfigError

PEER_TIMEOUT_VARIABLE = "LBTRAIN_PEER_TIMEOUT"
DEFAULT_PEER_TIMEOUT = 60.0
_POLL_SECONDS = 0.5


def peer_timeout() -> float:
    """Seconds to wait for a job's peers: ``$LBTRAIN_PEER_TIMEOUT`` (a number > 0), else
    ``DEFAULT_PEER_TIMEOUT``."""
    text = os.environ.get(PEER_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_PEER_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"${PEER_TIMEOUT_VARIABLE} is {text[:50]!r} (allowed: seconds, a number > 0; default "
                          f"{DEFAULT_PEER_TIMEOUT:g})")
    return seconds


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"$TF_CONFIG: {address[:200]!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _reachable(address: str) -> bool:
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=_POLL_SECONDS):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _listening(address: str | None, what: str) -> Iterator[None]:
    """Listens on this task's own ``address`` while the block runs (its peers check it too); a
    port that is taken is a ``ConfigError``."""
    if address is None:
        yield
        return
    _, port = _host_port(address)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as own:
        own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            own.bind(("", port))
        except OSError as error:
            raise ConfigError(f"{what} cannot serve at {address} (is the port in use? {error.strerror})") from None
        own.listen()
        yield


def wait_for_peers(peers: Mapping[str, str], *, what: str, own: str | None = None, timeout: float | None = None) -> None:
    """Returns once every peer (``{"worker 1": "host:port", ...}``) accepts a TCP connection;
    after ``timeout`` seconds (default ``peer_timeout()``) a ``ConfigError`` names the first that
    did not. ``own``: this task's address, listened on meanwhile (see the module doc); ``what``
    names this task in messages (``mode: multiworker: worker 0``)."""
    timeout = peer_timeout() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    waiting = dict(peers)
    with _listening(own, what):
        while True:
            waiting = {name: address for name, address in waiting.items() if not _reachable(address)}
            if not waiting:
                return
            if time.monotonic() >= deadline:
                name, address = next(iter(waiting.items()))
                others = f" (and {len(waiting) - 1} more)" if len(waiting) > 1 else ""
                raise ConfigError(f"{what}: {name} at {address}{others} is unreachable after {timeout:g} s (nothing listens "
                                  f"there, or the network drops it): start it or fix $TF_CONFIG; "
                                  f"${PEER_TIMEOUT_VARIABLE}=SECONDS waits longer")
            time.sleep(_POLL_SECONDS)
