"""What the rollup tests share: comparing answers with the raw rows', and watching routing."""

from __future__ import annotations

import math

import pyarrow as pa

NO_REFRESH = {"timelake_rollup_refresh_interval": "off"}


def canonical(table: pa.Table) -> list:
    """The rows in an order that does not depend on the query's (None last per value)."""
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r.values()))


def assert_same(got: pa.Table, want: pa.Table, rel: float = 1e-9) -> None:
    """Same schema, same rows in any order; floats equal to `rel` (sums in another order)."""
    assert got.schema == want.schema, f"{got.schema} != {want.schema}"
    a, b = canonical(got), canonical(want)
    assert len(a) == len(b), f"{len(a)} rows != {len(b)} rows: {a[:5]} vs {b[:5]}"
    for x, y in zip(a, b):
        for k in x:
            u, v = x[k], y[k]
            if isinstance(u, float) and isinstance(v, float):
                assert math.isclose(u, v, rel_tol=rel, abs_tol=1e-9), f"{k}: {u} != {v} in {x} vs {y}"
            else:
                assert u == v, f"{k}: {u!r} != {v!r} in {x} vs {y}"


class RouteSpy:
    """Records what each routing decision returned (True: the query read a rollup)."""

    def __init__(self, monkeypatch):
        import timelake

        self.decisions = []
        real = timelake._route.route

        def spy(*args, **kwargs):
            out = real(*args, **kwargs)
            self.decisions.append(out is not None)
            return out

        monkeypatch.setattr(timelake._route, "route", spy)

    def last(self) -> bool:
        return self.decisions[-1]
