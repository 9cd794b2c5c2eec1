"""Lake: opening a warehouse, naming tables, creating, listing and dropping them."""

import os

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, T0, iot_table, log_path, table_dir

# ------------------------------------------------------------------ location


def test_local_path_location_is_file_url(lake_path):
    lake = timelake.Lake(str(lake_path))
    assert lake.location == "file://" + os.path.abspath(lake_path)


def test_relative_path_location_is_absolute_file_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lake = timelake.Lake("rel_lake")
    assert lake.location == "file://" + str(tmp_path / "rel_lake")


def test_file_url_location_is_kept(lake_path):
    url = "file://" + str(lake_path)
    assert timelake.Lake(url).location == url


def test_local_path_trailing_slash_is_dropped(lake_path):
    lake = timelake.Lake(str(lake_path) + "/")
    assert lake.location == "file://" + str(lake_path)


def test_file_url_trailing_slash_is_dropped(lake_path):
    lake = timelake.Lake("file://" + str(lake_path) + "/")
    assert lake.location == "file://" + str(lake_path)


def test_unknown_storage_option_is_value_error(lake_path):
    with pytest.raises(ValueError, match="no_such_option"):
        timelake.Lake(str(lake_path), storage_options={"no_such_option": "1"})


# ------------------------------------------------------------------ create_table


def test_create_table_returns_table_named_in_default_namespace(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    assert t.name == "default.readings"


def test_create_table_with_namespace_keeps_qualified_name(lake):
    t = lake.create_table("iot.readings", IOT_SCHEMA)
    assert t.name == "iot.readings"


def test_table_location_is_namespace_and_table_folder_under_lake(lake):
    t = lake.create_table("iot.readings", IOT_SCHEMA)
    assert t.location == lake.location + "/iot/readings"


def test_new_table_has_version_zero(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    assert t.version == 0


def test_new_table_schema_is_declared_schema(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    assert t.schema == IOT_SCHEMA


def test_create_table_accepts_object_with_schema_attribute(lake):
    t = lake.create_table("readings", IOT_SCHEMA.empty_table())
    assert t.schema == IOT_SCHEMA


def test_create_table_writes_first_commit_in_table_folder(lake, lake_path):
    lake.create_table("iot.readings", IOT_SCHEMA)
    assert log_path(lake_path / "iot" / "readings", 0).is_file()


def test_create_existing_table_is_file_exists_error(lake):
    lake.create_table("readings", IOT_SCHEMA)
    with pytest.raises(FileExistsError):
        lake.create_table("readings", IOT_SCHEMA)


def test_create_qualified_name_of_existing_unqualified_table_is_file_exists_error(lake):
    lake.create_table("readings", IOT_SCHEMA)
    with pytest.raises(FileExistsError):
        lake.create_table("default.readings", IOT_SCHEMA)


def test_same_table_name_in_two_namespaces_is_two_tables(lake):
    lake.create_table("a.readings", IOT_SCHEMA)
    lake.create_table("b.readings", IOT_SCHEMA)
    assert sorted(lake.tables()) == ["a.readings", "b.readings"]


BAD_NAMES = [
    "a.b.c",
    "../x",
    "1abc",
    "iot.1abc",
    "",
    ".readings",
    "iot.",
    "a-b",
    "a b",
    "iot/readings",
    "x" * 129,
    "ns." + "y" * 129,
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_create_table_with_bad_identifier_is_value_error(lake, name):
    with pytest.raises(ValueError):
        lake.create_table(name, IOT_SCHEMA)


@pytest.mark.parametrize("name", ["_x", "A_1", "x" * 128, "ns_2.t_3"])
def test_create_table_accepts_valid_identifiers(lake, name):
    t = lake.create_table(name, IOT_SCHEMA)
    assert t.version == 0


def test_create_table_with_parent_path_name_writes_nothing_outside_lake(lake, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ValueError):
        lake.create_table("../escape", IOT_SCHEMA)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("name", ["a.b.c", "../x", "1abc"])
def test_table_with_bad_identifier_is_value_error(lake, name):
    with pytest.raises(ValueError):
        lake.table(name)


# ------------------------------------------------------------------ table / tables


def test_table_opens_existing_table(lake):
    lake.create_table("readings", IOT_SCHEMA)
    t = lake.table("readings")
    assert (t.name, t.version, t.schema) == ("default.readings", 0, IOT_SCHEMA)


def test_table_qualified_and_unqualified_names_open_same_table(lake):
    lake.create_table("readings", IOT_SCHEMA)
    assert lake.table("default.readings").location == lake.table("readings").location


def test_table_opens_latest_version(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "b", 2.0)]))
    assert lake.table("readings").version == 2


def test_missing_table_is_key_error(lake):
    with pytest.raises(KeyError):
        lake.table("nope")


def test_table_in_missing_namespace_is_key_error(lake):
    lake.create_table("readings", IOT_SCHEMA)
    with pytest.raises(KeyError):
        lake.table("other.readings")


def test_tables_of_new_lake_is_empty_list(lake):
    assert lake.tables() == []


def test_tables_lists_qualified_names(lake):
    lake.create_table("readings", IOT_SCHEMA)
    lake.create_table("iot.readings", IOT_SCHEMA)
    lake.create_table("iot.devices", pa.schema([("device_id", pa.string())]))
    names = lake.tables()
    assert isinstance(names, list)
    assert sorted(names) == ["default.readings", "iot.devices", "iot.readings"]


def test_tables_are_listed_by_a_fresh_lake_on_same_location(lake, lake_path):
    lake.create_table("iot.readings", IOT_SCHEMA)
    assert timelake.Lake(str(lake_path)).tables() == ["iot.readings"]


def test_tables_ignores_folders_without_delta_log(lake, lake_path):
    lake.create_table("iot.readings", IOT_SCHEMA)
    (lake_path / "iot" / "notatable").mkdir(parents=True)
    assert lake.tables() == ["iot.readings"]


# ------------------------------------------------------------------ drop_table


def test_drop_table_removes_table_folder(lake):
    t = lake.create_table("iot.readings", IOT_SCHEMA)
    t.append(iot_table([(T0, "a", 1.0)]))
    folder = table_dir(t)
    lake.drop_table("iot.readings")
    assert not folder.exists()


def test_dropped_table_is_not_listed(lake):
    lake.create_table("readings", IOT_SCHEMA)
    lake.create_table("others", IOT_SCHEMA)
    lake.drop_table("readings")
    assert lake.tables() == ["default.others"]


def test_dropped_table_cannot_be_opened(lake):
    lake.create_table("readings", IOT_SCHEMA)
    lake.drop_table("readings")
    with pytest.raises(KeyError):
        lake.table("readings")


def test_drop_missing_table_is_key_error(lake):
    with pytest.raises(KeyError):
        lake.drop_table("nope")


def test_dropped_table_can_be_created_again_empty(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    t.append(iot_table([(T0, "a", 1.0)]))
    lake.drop_table("readings")
    t = lake.create_table("readings", IOT_SCHEMA)
    assert t.version == 0
    assert lake.sql("SELECT * FROM readings").num_rows == 0


def test_drop_table_leaves_other_tables_data(lake):
    keep = lake.create_table("keep", IOT_SCHEMA)
    keep.append(iot_table([(T0, "a", 1.0)]))
    lake.create_table("gone", IOT_SCHEMA)
    lake.drop_table("gone")
    assert lake.sql("SELECT device_id FROM keep").to_pylist() == [{"device_id": "a"}]


@pytest.mark.parametrize("name", ["a.b.c", "../x"])
def test_drop_table_with_bad_identifier_is_value_error(lake, name):
    with pytest.raises(ValueError):
        lake.drop_table(name)
