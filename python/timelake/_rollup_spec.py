"""What a rollup is, as its table properties say (see _rollup for what rollups do).

Kept apart from _rollup, at the bottom of the package, so that modules below it (the one-series
reader, the catalog) can tell a rollup from a table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

PROPERTY_SOURCE = "timelake.rollup.source"
PROPERTY_SOURCE_ID = "timelake.rollup.sourceId"
PROPERTY_SPEC = "timelake.rollup.spec"
PROPERTY_QUERY = "timelake.rollup.query"
ROWS = "__rows"  # raw rows the (bucket, groups) pair holds

# What each aggregate function of a definition is stored as.
_FUNCTIONS = {
    "count_star": "count_star", "count": "count", "sum": "sum", "avg": "avg", "mean": "avg",
    "min": "min", "max": "max", "first": "first", "last": "last", "first_value": "first",
    "last_value": "last", "stddev": "stddev_samp", "stddev_samp": "stddev_samp",
    "stddev_pop": "stddev_pop", "variance": "var_samp", "var_samp": "var_samp", "var_pop": "var_pop",
}
_DEVIATIONS = ("stddev_samp", "stddev_pop", "var_samp", "var_pop")


@dataclass
class Aggregate:
    alias: str
    function: str  # a value of _FUNCTIONS
    column: Optional[str]  # None for count(*)


@dataclass
class Spec:
    """A rollup's definition, as its table properties keep it."""

    source: str  # "ns.table"
    source_id: str  # the source's Delta table id when the rollup was made
    time_column: str
    bucket: str  # the bucket column's name
    months: int  # the bucket width: months, or microseconds
    micros: int
    groups: List[str]
    aggregates: List[Aggregate] = field(default_factory=list)

    @property
    def width(self) -> str:
        return f"INTERVAL '{self.months} months'" if self.months else f"INTERVAL '{self.micros} microseconds'"

    @property
    def app_id(self) -> str:
        return f"rollup:{self.source_id}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Spec":
        raw = json.loads(text)
        raw["aggregates"] = [Aggregate(**a) for a in raw["aggregates"]]
        return Spec(**raw)

    def visible(self) -> List[str]:
        return [self.bucket] + self.groups + [a.alias for a in self.aggregates]


def spec_of(properties: Dict[str, str]) -> Optional[Spec]:
    """The rollup a table's properties describe, or None: a table whose description cannot be read
    (another engine may set any property) is read as the plain table it also is."""
    text = properties.get(PROPERTY_SPEC)
    if not text:
        return None
    try:
        return Spec.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
