"""Durations and chunk labels as the core reads them (retention text, chunk folder names)."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Optional

from . import _core


def duration_us(text: str) -> int:
    """A duration such as "90d" or "36h" in microseconds (the core's parser: the same rules)."""
    return _core.duration_us(text)


@functools.lru_cache(maxsize=4096)  # labels repeat across every plan of a table
def chunk_start_us(chunk: Optional[str], label: str) -> Optional[int]:
    """The first instant of the chunk `label` names (see chunk_end_us); None if it names none."""
    formats = {"hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "month": "%Y-%m"}
    try:
        start = dt.datetime.strptime(label, formats[chunk or ""])
    except (KeyError, ValueError):
        return None
    return int(start.replace(tzinfo=dt.timezone.utc).timestamp()) * 1_000_000


@functools.lru_cache(maxsize=4096)
def chunk_end_us(chunk: Optional[str], label: str) -> Optional[int]:
    """The first instant (microseconds since the epoch, UTC) after the chunk `label` names:
    "2025-01-02T03" (hour), "2025-01-02" (day), "2025-01" (month). None if it names none."""
    try:
        if chunk == "hour":
            start = dt.datetime.strptime(label, "%Y-%m-%dT%H")
            end = start + dt.timedelta(hours=1)
        elif chunk == "day":
            start = dt.datetime.strptime(label, "%Y-%m-%d")
            end = start + dt.timedelta(days=1)
        elif chunk == "month":
            start = dt.datetime.strptime(label, "%Y-%m")
            end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
        else:
            return None
    except ValueError:
        return None
    return int(end.replace(tzinfo=dt.timezone.utc).timestamp()) * 1_000_000
