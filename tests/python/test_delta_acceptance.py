"""timelake reads Delta tables written by Apache Spark (the delta-acceptance reference cases).

Each case is copied into a temporary lake as default.<case>; the rows a correct reader returns are
in the case's expected/latest/table_content.
"""

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import timelake

# The reference tables live in shared/ beside the repository (TIMELAKE_DELTA_ACCEPTANCE overrides).
ACCEPTANCE = Path(
    os.environ.get(
        "TIMELAKE_DELTA_ACCEPTANCE",
        Path(__file__).resolve().parents[3] / "shared" / "delta-acceptance",
    )
)
if not ACCEPTANCE.is_dir():
    raise RuntimeError(
        f"delta-acceptance reference tables not found at {ACCEPTANCE}; "
        "set TIMELAKE_DELTA_ACCEPTANCE to their folder"
    )
CASES = sorted(p.name for p in ACCEPTANCE.iterdir() if (p / "delta" / "_delta_log").is_dir())


def normalize(value):
    """A comparable form: aware datetimes as naive UTC, containers element-wise."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, dict):
        return tuple(sorted((k, normalize(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(normalize(v) for v in value)
    return value


def comparable_rows(table: pa.Table, columns) -> list:
    rows = [tuple(normalize(r[c]) for c in columns) for r in table.select(columns).to_pylist()]
    return sorted(rows, key=repr)


def expected_table(case: str) -> pa.Table:
    table = ds.dataset(ACCEPTANCE / case / "expected" / "latest" / "table_content", format="parquet").to_table()
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            table = table.set_column(i, field.name, table.column(i).cast(pa.timestamp("us", tz=field.type.tz)))
    return table


def expected_version(case: str) -> int:
    meta = json.loads((ACCEPTANCE / case / "expected" / "latest" / "table_version_metadata.json").read_text())
    return meta["version"]


@pytest.fixture
def spark_lake(lake_path):
    def install(case: str):
        shutil.copytree(ACCEPTANCE / case / "delta", lake_path / "default" / case)
        return timelake.Lake(str(lake_path))

    return install


@pytest.mark.parametrize("case", CASES)
def test_spark_table_is_listed(spark_lake, case):
    assert spark_lake(case).tables() == [f"default.{case}"]


@pytest.mark.parametrize("case", CASES)
def test_spark_table_opens_at_its_latest_version(spark_lake, case):
    assert spark_lake(case).table(case).version == expected_version(case)


@pytest.mark.parametrize("case", CASES)
def test_spark_table_query_returns_expected_rows(spark_lake, case):
    lake = spark_lake(case)
    expected = expected_table(case)
    got = lake.sql(f"SELECT * FROM {case}")
    assert sorted(got.column_names) == sorted(expected.column_names)
    assert comparable_rows(got, expected.column_names) == comparable_rows(expected, expected.column_names)
