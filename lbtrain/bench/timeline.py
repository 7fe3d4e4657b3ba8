"""Horovod's timeline (Chrome trace JSON), read back: how long an allreduce was in progress
during the measured steps of a ``horovod:N`` world (``lbtrain bench --timeline``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable

# Horovod's timeline activities that move gradient bytes (per controller / library).
ALLREDUCE_ACTIVITIES = ("ALLREDUCE", "NCCL_ALLREDUCE", "MPI_ALLREDUCE", "GLOO_ALLREDUCE")


def read_timeline(path: str | os.PathLike) -> list[dict]:
    """The events of a Horovod timeline (Chrome trace JSON: an array Horovod may leave
    unclosed)."""
    text = Path(path).read_text().strip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    return json.loads(text)


def allreduce_seconds(events: Iterable[dict]) -> float:
    """Seconds during which at least one allreduce activity (``ALLREDUCE_ACTIVITIES``) was in
    progress: the union of their begin/end intervals over all tensors (fused tensors overlap).

    >>> allreduce_seconds([{"ph": "B", "name": "ALLREDUCE", "pid": 1, "ts": 0},
    ...                    {"ph": "B", "name": "ALLREDUCE", "pid": 2, "ts": 500},
    ...                    {"ph": "E", "pid": 1, "ts": 1000}, {"ph": "E", "pid": 2, "ts": 1500},
    ...                    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "pid": 1, "ts": 2000},
    ...                    {"ph": "E", "pid": 1, "ts": 9000}])
    0.0015
    """
    open_events: dict[tuple, list[tuple[str, float]]] = {}
    intervals: list[tuple[float, float]] = []
    for event in sorted(events, key=lambda e: e.get("ts", 0)):
        key = (event.get("pid"), event.get("tid"))
        if event.get("ph") == "B":
            open_events.setdefault(key, []).append((event.get("name", ""), event["ts"]))
        elif event.get("ph") == "E" and open_events.get(key):
            name, start = open_events[key].pop()
            if name in ALLREDUCE_ACTIVITIES:
                intervals.append((start, event["ts"]))
        elif event.get("ph") == "X" and event.get("name") in ALLREDUCE_ACTIVITIES:
            intervals.append((event["ts"], event["ts"] + event.get("dur", 0)))
    return _union_length(intervals) / 1e6


def _union_length(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total
