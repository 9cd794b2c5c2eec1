"""Lake.sql is read-only and confined: no statement, however wrapped, writes a file, replaces a
table's view, changes DuckDB's configuration, reads outside the lake or reaches the network, and
only ValueError, KeyError or RuntimeError come out of sql() and latest()."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import timelake
from helpers import T0, iot_series, iot_table, sorted_rows

SECRET = "TOP-SECRET-VALUE"
FORGED_ROWS = "SELECT TIMESTAMPTZ '2024-03-05 00:00:00+00' AS time, 'forged' AS device_id, -1.0 AS temp"

# {out}: a file in a scratch folder outside the lake; {outdir}: a folder there that does not
# exist yet; {data}: the table's data folder inside the lake; {log}: its next log file.
HOSTILE = {
    # writing files
    "copy_to": "COPY (SELECT * FROM readings) TO '{out}'",
    "copy_to_relative": "COPY (SELECT 1) TO 'relative.csv'",
    "copy_into_lake_data": "COPY (" + FORGED_ROWS + ") TO '{data}/forged.parquet'",
    "copy_forges_log": "COPY (SELECT '{{}}' AS a) TO '{log}' (FORMAT csv, HEADER false, QUOTE '')",
    "explain_analyze_copy": "EXPLAIN ANALYZE COPY (SELECT 1) TO '{out}'",
    "explain_analyze_copy_into_lake": "EXPLAIN ANALYZE COPY (" + FORGED_ROWS + ") TO '{data}/forged.parquet'",
    "explain_copy": "EXPLAIN COPY (SELECT 1) TO '{out}'",
    "query_function_copy": "SELECT * FROM query('COPY (SELECT 1) TO ''{out}''')",
    "nested_query_function_copy": "SELECT * FROM query('SELECT * FROM query(''COPY (SELECT 1) TO ''''{out}'''''')')",
    "select_then_copy": "SELECT 1; COPY (SELECT 1) TO '{out}'",
    "cte_then_copy": "WITH x AS (SELECT 1) SELECT * FROM x; COPY (SELECT 1) TO '{out}'",
    "export_database": "EXPORT DATABASE '{outdir}'",
    "explain_analyze_export": "EXPLAIN ANALYZE EXPORT DATABASE '{outdir}'",
    "attach_file": "ATTACH '{out}' AS evil",
    "explain_analyze_attach": "EXPLAIN ANALYZE ATTACH '{out}' AS evil",
    "attach_in_lake": "ATTACH '{data}/evil.duckdb' AS evil",
    "prepare_copy": "PREPARE p AS COPY (SELECT 1) TO '{out}'",
    "install_extension": "INSTALL httpfs",
    "load_extension": "LOAD httpfs",
    "explain_analyze_load": "EXPLAIN ANALYZE LOAD httpfs",
    "create_secret": "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')",
    # replacing what a name means
    "replace_view": "CREATE OR REPLACE VIEW readings AS " + FORGED_ROWS,
    "replace_view_qualified": 'CREATE OR REPLACE VIEW "default".readings AS ' + FORGED_ROWS,
    "explain_analyze_replace_view": "EXPLAIN ANALYZE CREATE OR REPLACE VIEW readings AS " + FORGED_ROWS,
    "temp_view_shadows": "CREATE TEMP VIEW readings AS " + FORGED_ROWS,
    "create_table": "CREATE TABLE readings2 AS SELECT * FROM readings",
    "macro": "CREATE OR REPLACE TEMP MACRO time_bucket(w, t) AS NULL",
    "table_macro": "CREATE MACRO readings() AS TABLE " + FORGED_ROWS,
    "drop_view": "DROP VIEW readings",
    "pivot_creates_type": "PIVOT readings ON device_id USING sum(temp)",
    # configuration
    "set_external_access": "SET enable_external_access = true",
    "reset_lock": "RESET lock_configuration",
    "set_allowed_directories": "SET allowed_directories = ['/']",
    "set_profiling_output": "SET profiling_output = '{out}'",
    "pragma_profiling": "PRAGMA enable_profiling = 'json'",
    "call_pragma": "CALL enable_profiling()",
    "set_search_path": "SET search_path = 'temp'",
    # reading outside the lake
    "read_csv_passwd": "SELECT * FROM read_csv('/etc/passwd')",
    "read_text_passwd": "SELECT * FROM read_text('/etc/passwd')",
    "read_blob_outside": "SELECT * FROM read_blob('{secret}')",
    "read_text_dotdot": "SELECT * FROM read_text('{data}/../../../../secret.txt')",
    "glob_root": "SELECT * FROM glob('/**')",
    "glob_outside": "SELECT * FROM glob('{scratch}/*')",
    "read_parquet_outside": "SELECT * FROM read_parquet('{outside_parquet}')",
    "parquet_metadata_outside": "SELECT * FROM parquet_metadata('{outside_parquet}')",
    "sniff_csv": "SELECT * FROM sniff_csv('/etc/passwd')",
    "query_function_read": "SELECT * FROM query('SELECT * FROM read_text(''/etc/passwd'')')",
    "cte_read": "WITH p AS (SELECT * FROM read_csv('/etc/passwd')) SELECT * FROM p",
    "summarize_outside": "SUMMARIZE SELECT * FROM read_csv('{secret}')",
    "describe_outside": "DESCRIBE SELECT * FROM read_csv('{secret}')",
    "read_duckdb_default_spill_folder": "SELECT * FROM read_text('{scratch}/.tmp/secret.txt')",
    "explain_analyze_read": "EXPLAIN ANALYZE SELECT * FROM read_text('{secret}')",
    # reading the lake's own log and index: only its data files are readable
    "read_log": "SELECT * FROM read_text('{log0}')",
    "read_log_json": "SELECT * FROM read_json_auto('{log0}')",
    "read_log_via_data_dotdot": "SELECT * FROM read_text('{data}/../_delta_log/{log0_name}')",
    "read_index": "SELECT * FROM read_parquet('{table}/_timelake/**/*.parquet')",
    "glob_table_folder": "SELECT * FROM glob('{table}/*')",
    "glob_lake": "SELECT * FROM glob('{lake}/**')",
    # the network
    "http": "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
    "https": "SELECT * FROM read_parquet('https://127.0.0.1:9/x.parquet')",
    "s3": "SELECT * FROM read_parquet('s3://bucket/x.parquet')",
}


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def scene(lake, lake_path, readings, tmp_path, monkeypatch):
    """A table with rows, a scratch folder with a secret outside the lake, and cwd in scratch."""
    readings.append(iot_table(iot_series(T0, 2)))
    # The append's index record is written after it returns (upkeep thread): wait for it, so that
    # the tests' listings of the lake see only what the hostile statements might write.
    readings.info()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "secret.txt").write_text(f"name,value\nkey,{SECRET}\n")
    (scratch / ".tmp").mkdir()
    (scratch / ".tmp" / "secret.txt").write_text(SECRET)
    pq.write_table(pa.table({"secret": ["outside"]}), scratch / "outside.parquet")
    monkeypatch.chdir(scratch)
    table_dir = lake_path / "default" / "readings"
    values = {
        "out": scratch / "out.csv",
        "outdir": scratch / "exported",
        "secret": scratch / "secret.txt",
        "outside_parquet": scratch / "outside.parquet",
        "scratch": scratch,
        "data": table_dir / "data",
        "log": table_dir / "_delta_log" / f"{2:020d}.json",
        "log0": table_dir / "_delta_log" / f"{0:020d}.json",
        "log0_name": f"{0:020d}.json",
        "table": table_dir,
        "lake": lake_path,
    }
    return lake, scratch, {k: str(v) for k, v in values.items()}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_statement_fails_and_changes_nothing(scene, lake_path, kind):
    lake, scratch, values = scene
    rows = sorted_rows(lake.sql("SELECT * FROM readings"))
    lake_files, scratch_files = _listing(lake_path), _listing(scratch)
    with pytest.raises((ValueError, RuntimeError)) as caught:
        lake.sql(HOSTILE[kind].format(**values))
    assert type(caught.value).__module__ == "builtins", type(caught.value)
    assert SECRET not in str(caught.value)
    assert _listing(lake_path) == lake_files
    assert _listing(scratch) == scratch_files
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == rows
    assert lake.table("readings").version == 1


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_confinement_holds_without_the_statement_check(scene, lake_path, monkeypatch, kind):
    """The statement-type check is a courtesy: with it gone, DuckDB still refuses everything."""
    from timelake import _sql

    monkeypatch.setattr(_sql, "_read_statement", lambda con, query: ("", query))
    lake, scratch, values = scene
    rows = sorted_rows(lake.sql("SELECT * FROM readings"))
    lake_files, scratch_files = _listing(lake_path), _listing(scratch)
    with pytest.raises((ValueError, RuntimeError)):
        lake.sql(HOSTILE[kind].format(**values))
    assert _listing(lake_path) == lake_files
    assert _listing(scratch) == scratch_files
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == rows


@pytest.mark.parametrize("kind", ["replace_view", "temp_view_shadows", "macro", "set_search_path"])
def test_hostile_statement_leaves_next_queries_alone(scene, kind):
    lake, _, values = scene
    expected = lake.sql("SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(*) AS n FROM readings GROUP BY 1")
    with pytest.raises((ValueError, RuntimeError)):
        lake.sql(HOSTILE[kind].format(**values))
    got = lake.sql("SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(*) AS n FROM readings GROUP BY 1")
    assert sorted_rows(got) == sorted_rows(expected)
    assert lake.sql("SELECT count(*) AS n FROM readings WHERE device_id = 'forged'").to_pylist() == [{"n": 0}]


def test_configuration_is_locked_and_external_access_off(scene):
    lake, _, _ = scene
    got = lake.sql(
        "SELECT current_setting('enable_external_access') AS ext, current_setting('lock_configuration') AS locked, "
        "current_setting('autoload_known_extensions') AS autoload, current_setting('autoinstall_known_extensions') AS autoinstall, "
        "current_setting('python_enable_replacements') AS replacements"
    )
    assert got.to_pylist() == [
        {"ext": False, "locked": True, "autoload": False, "autoinstall": False, "replacements": False}
    ]


def test_file_path_is_not_a_table(scene):
    lake, _, values = scene
    with pytest.raises((KeyError, RuntimeError)) as caught:
        lake.sql(f"SELECT * FROM '{values['secret']}'")
    assert SECRET not in str(caught.value)


def test_only_the_tables_data_folders_and_a_private_spill_folder_are_reachable(scene, lake_path):
    lake, _, _ = scene
    allowed = lake.sql("SELECT unnest(current_setting('allowed_directories')) AS d").column("d").to_pylist()
    data_dir = str(lake_path / "default" / "readings" / "data") + "/"
    spill = [d for d in allowed if d != data_dir]
    assert data_dir in allowed
    assert len(spill) == 1 and os.path.basename(spill[0].rstrip("/")).startswith("timelake-duckdb-")
    assert lake.sql("SELECT unnest(current_setting('allowed_paths')) AS p").num_rows == 0


def test_a_table_created_after_the_first_query_is_readable(scene, lake_path):
    lake, _, values = scene
    assert lake.sql("SELECT count(*) AS n FROM readings").to_pylist() == [{"n": 6}]
    later = lake.create_table("later", iot_table(iot_series(T0, 1)).schema, series_key="device_id")
    later.append(iot_table(iot_series(T0, 1)))
    got = lake.sql("SELECT (SELECT count(*) FROM readings) AS a, (SELECT count(*) FROM later) AS b")
    assert got.to_pylist() == [{"a": 6, "b": 3}]
    # Its log stays out of reach like every other.
    with pytest.raises(RuntimeError):
        lake.sql(f"SELECT * FROM read_text('{lake_path}/default/later/_delta_log/{0:020d}.json')")


def test_a_foreign_table_with_files_beside_its_log_is_readable_and_its_log_is_not(lake, lake_path, tmp_path):
    from deltalake import write_deltalake

    rows = pa.table({"x": [1, 2, 3]})
    write_deltalake(str(lake_path / "default" / "plain"), rows)  # files at the table's root
    assert lake.sql("SELECT sum(x) AS s FROM plain").to_pylist() == [{"s": 6}]
    with pytest.raises(RuntimeError):
        lake.sql(f"SELECT * FROM read_text('{lake_path}/default/plain/_delta_log/{0:020d}.json')")


def test_python_variables_are_not_tables(scene):
    lake, _, _ = scene
    secret_rows = pa.table({"s": ["python-local"]})  # noqa: F841  (what a replacement scan would find)
    with pytest.raises((KeyError, RuntimeError)) as caught:
        lake.sql("SELECT * FROM secret_rows")
    assert "python-local" not in str(caught.value)


@pytest.mark.parametrize(
    "query",
    [
        "SUMMARIZE readings",
        "DESCRIBE readings",
        "SELECT * FROM (PIVOT readings ON device_id IN ('a', 'b') USING count(*))",
        "WITH r AS (SELECT * FROM readings) SELECT count(*) FROM r",
        "EXPLAIN SELECT count(*) FROM readings",
        "EXPLAIN ANALYZE SELECT count(*) FROM readings",
        "FROM readings SELECT count(*)",
    ],
)
def test_reading_forms_still_work(scene, query):
    lake, _, _ = scene
    assert lake.sql(query).num_rows > 0


def test_query_can_read_the_lakes_data_files(scene):
    lake, _, values = scene
    got = lake.sql(f"SELECT count(*) AS n FROM read_parquet('{values['data']}/**/*.parquet')")
    assert got.to_pylist() == [{"n": 6}]


def test_explain_of_a_write_is_value_error(scene):
    lake, _, values = scene
    with pytest.raises(ValueError, match="COPY"):
        lake.sql(HOSTILE["explain_analyze_copy"].format(**values))


def test_statement_with_parameters_is_value_error(scene):
    lake, _, _ = scene
    with pytest.raises(ValueError, match="parameters"):
        lake.sql("SELECT ? AS x")


# ------------------------------------------------------------------ only documented exceptions


ODD_QUERIES = {
    "surrogate": "SELECT '\ud800' AS x",
    "surrogate_in_name": 'SELECT * FROM "\udcff"',
    "bytes": b"SELECT 1",
    "none": None,
    "number": 42,
    "empty": "",
    "semicolon": ";",
    "comment_only": "-- nothing",
    "nul": "SELECT 1\x00",
    "bad_cast": "SELECT 'abc'::BIT AS b",
    "invalid_utf8_blob_cast": "SELECT '\\xff'::BLOB::VARCHAR AS v",
    "time_out_of_range": "SELECT TIMESTAMP '294247-01-10 04:00:54.775807' AS t",
    "bad_time_literal": "SELECT * FROM readings WHERE time > 'not a time'",
    "named_parameter": "SELECT $x",
    "default_keyword_alone": "SELECT default",
    "unterminated_string": "SELECT 'abc",
    "explain_options": "EXPLAIN (FORMAT json) SELECT 1",
    "explain_nothing": "EXPLAIN",
}


@pytest.mark.parametrize("kind", list(ODD_QUERIES))
def test_odd_query_raises_only_documented_errors(scene, kind):
    lake, _, _ = scene
    try:
        lake.sql(ODD_QUERIES[kind])
    except (ValueError, KeyError, RuntimeError) as e:
        assert type(e).__module__ == "builtins", type(e)


@pytest.mark.parametrize("namespace", [None, "\ud800", "a.b", "", 3, "default; DROP"])
def test_odd_namespace_is_value_error(scene, namespace):
    lake, _, _ = scene
    with pytest.raises(ValueError):
        lake.sql("SELECT 1", namespace=namespace)


@pytest.mark.parametrize("name", ["\ud800", "readings\x00x", "de\udcfffault.readings"])
def test_latest_with_odd_name_is_value_error(lake, readings, name):
    readings.append(iot_table(iot_series(T0, 1)))
    with pytest.raises(ValueError):
        lake.latest(name)


def test_latest_of_missing_table_is_key_error(lake):
    with pytest.raises(KeyError):
        lake.latest("nope.nothing")


def test_errors_do_not_show_the_internal_wrapper(scene):
    lake, _, _ = scene
    with pytest.raises(RuntimeError) as caught:
        lake.sql("SELECT no_such_column FROM readings")
    assert "query(" not in str(caught.value)
    assert "no_such_column" in str(caught.value)


@pytest.mark.parametrize("spelling", ["relative", "escaped", "absolute", "file_uri", "log_folder"])
def test_a_log_that_names_files_outside_its_table_is_refused_and_opens_nothing(lake, lake_path, tmp_path, spelling):
    # A Delta log is data, not trust: a table in the lake whose add.path climbs out of its
    # folder must not make sql() read that file, nor admit it to later queries' read_blob.
    import json

    from deltalake import write_deltalake

    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"x": [42], "s": [SECRET]}), secret)
    tdir = lake_path / "default" / "plain"
    write_deltalake(str(tdir), pa.table({"x": [1], "s": ["fine"]}))
    climb = os.path.relpath(secret, tdir)
    path = {
        "relative": climb,
        "escaped": climb.replace(".", "%2E").replace("/", "%2F"),
        "absolute": str(secret),
        "file_uri": "file://" + str(secret),
        "log_folder": "_delta_log/../../plain/_delta_log/00000000000000000000.json",
    }[spelling]
    log = tdir / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    for action in actions:
        if "add" in action:
            action["add"]["path"] = path
            action["add"]["size"] = secret.stat().st_size
    log.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    with pytest.raises(RuntimeError) as raised:
        lake.sql("SELECT * FROM plain")
    assert SECRET not in str(raised.value)
    assert "table's folder" in str(raised.value) or "outside" in str(raised.value)
    for probe in (f"SELECT * FROM read_blob('{secret}')", f"SELECT * FROM read_parquet('{secret}')"):
        with pytest.raises(RuntimeError):
            lake.sql(probe)
