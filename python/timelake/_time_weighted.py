"""time_weighted_mean(time, value [, 'locf' | 'linear']): an aggregate for readings at irregular times.

A DuckDB macro (installed as a TEMP macro on every catalog connection, which the locked
configuration allows) over `list(... ORDER BY time)`, so the readings are sorted inside the
aggregate and the answer does not depend on file order. docs/api.md says what it computes.
"""

from __future__ import annotations

import duckdb

# time_weighted_mean(time, value [, 'locf' | 'linear']) ('forward_fill', the seed system's name,
# is 'locf'): the readings of the group, nulls left
# out, in time order (equal times in value order, so the answer does not depend on file order),
# as microseconds and doubles; each reading's value held until the next reading ('locf') or
# linear between consecutive readings ('linear'), over the span from the first to the last
# reading. All readings at one instant (one reading, say): their mean.
_TWM_LIST = (
    "list({'t': epoch_us(t), 'v': CAST(v AS DOUBLE)} ORDER BY epoch_us(t), CAST(v AS DOUBLE)) "
    "FILTER (WHERE t IS NOT NULL AND v IS NOT NULL)"
)
_TWM_BODY = (
    "(SELECT CASE WHEN len(r) = 0 THEN NULL "
    "WHEN r[len(r)].t = r[1].t THEN list_avg(list_transform(r, lambda x: x.v)) "
    "WHEN m IN ('locf', 'forward_fill') THEN list_sum(list_transform(range(1, len(r)), "
    "lambda i: r[i].v * (r[i + 1].t - r[i].t))) / (r[len(r)].t - r[1].t) "
    "WHEN m = 'linear' THEN list_sum(list_transform(range(1, len(r)), "
    "lambda i: (r[i].v + r[i + 1].v) / 2 * (r[i + 1].t - r[i].t))) / (r[len(r)].t - r[1].t) "
    "ELSE error('time_weighted_mean: the method must be ''locf'' or ''linear'', got ' || coalesce(m, 'NULL')) END "
    "FROM (SELECT " + _TWM_LIST + " AS r, CAST(method AS VARCHAR) AS m))"
)
MACROS = (
    "CREATE OR REPLACE TEMP MACRO time_weighted_mean(t, v) AS "
    + _TWM_BODY.replace("CAST(method AS VARCHAR)", "'locf'")
    + ", (t, v, method) AS "
    + _TWM_BODY
)


def install(con: duckdb.DuckDBPyConnection) -> None:
    """Creates the time_weighted_mean macro on a (locked) catalog connection."""
    con.execute(MACROS)
