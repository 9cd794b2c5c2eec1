"""A core scan plan rendered as the SQL of a DuckDB view.

The view reads exactly the plan's files (or their local copies): plain files with read_parquet,
files of other engines' partitioned tables with their partition values from the log, files the
plan marks for read-time dedup through one row per (series key, time) in the plan's dedup
ordering, rows deletion vectors delete left out, columns renamed under Delta column mapping and
widened columns cast to the table's stored type. Every rule comes from the plan; this module only
writes it as SQL. Arrow tables a view reads (empty tables of the table's schema, deleted rows) are
handed to a `register` callback, which names them in the connection.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa

from ._sql_text import file_list, literal, quote

# register(kind, table): registers `table` in the connection; returns its name.
Register = Callable[[str, pa.Table], str]


def view_sql(plan: Any, declared: pa.Schema, file_schema: pa.Schema, paths: Optional[List[str]],
             register: Register) -> Tuple[str, Any]:
    """The view's SQL for a core ScanPlan, and the names of the Arrow tables it reads (a name, a
    list, or None). `paths` replaces the files' own paths (local copies of remote files)."""
    partition_columns = plan.partition_columns
    storage_types = {f.name: f.type for f in file_schema}
    columns = ", ".join(quote(f.name) for f in declared)
    files = plan.files if paths is None else [_Located(f, p) for f, p in zip(plan.files, paths)]
    if not files:
        empty = pa.schema([pa.field(f.name, storage_types.get(f.name, f.type)) for f in declared]).empty_table()
        empty_name = register("empty", empty)
        return f"SELECT {columns} FROM temp.main.{quote(empty_name)}", empty_name
    # Files written before add_columns lack the new columns: read by name, and the empty table
    # of the table's own schema below brings every column (null where no file has it).
    evolved = plan.evolved
    union = ", union_by_name=true" if plan.read_by_name else ""
    parts = []
    physical = dict(plan.physical_names)
    if any(logical != name for logical, name in physical.items()):
        return _mapped_view_sql(plan, declared, files, storage_types, physical, register)
    plain = [f for f in files if not f.dedup]
    # Files of other engines' partitioned tables: partition values come from the log.
    groups: Dict[Tuple, List[str]] = {}
    for f in plain:
        key = tuple((c, f.partition_values.get(c)) for c in partition_columns)
        groups.setdefault(key, []).append(f.path)
    deleted = _deleted_rows_table(plain, [f.name for f in declared], register)
    for key, group in groups.items():
        extra = "".join(
            f", {_partition_value(value, _declared_type(declared, column))} AS {quote(column)}"
            for column, value in key
        )
        parts.append(f"SELECT *{extra} FROM {_read_files(group, 'hive_partitioning=false' + union, deleted)}")
    dedup = [f for f in files if f.dedup]
    if dedup:
        deleted_dedup = _deleted_rows_table(dedup, [], register)
        parts.append(_dedup_sql(dedup, plan.dedup_order, columns,
                                [f.name for f in file_schema] + [f.name for f in declared],
                                evolved, deleted_dedup and deleted_dedup[0]))
    empty_name = None
    if evolved:
        empty_name = register(
            "empty", pa.schema([pa.field(f.name, storage_types.get(f.name, f.type)) for f in declared]).empty_table())
        parts.append(f"SELECT * FROM temp.main.{quote(empty_name)}")
    registered = [n for n in (empty_name, deleted and deleted[0], dedup and deleted_dedup and deleted_dedup[0]) if n]
    columns = _select_list(declared, storage_types, plan.widened)
    if len(parts) == 1 and not dedup:
        return f"SELECT {columns} FROM ({parts[0]})", registered or None
    return f"SELECT {columns} FROM (" + " UNION ALL BY NAME ".join(f"({p})" for p in parts) + ")", registered or None


def _mapped_view_sql(plan: Any, declared: pa.Schema, files: List[Any], storage_types: Dict[str, pa.DataType],
                     physical: Dict[str, str], register: Register) -> Tuple[str, Any]:
    """The view of a table with Delta column mapping: the files name their columns by physical
    name (`col-<uuid>`); the view renames them, and columns a file lacks (added later) or no
    longer in the schema (dropped) are null or left out. Such tables are other engines' (no
    read-time dedup)."""
    partition_columns = plan.partition_columns
    stored = [f for f in declared if f.name not in partition_columns]
    empty_name = register("empty", pa.schema(
        [pa.field(physical.get(f.name, f.name), storage_types.get(f.name, f.type)) for f in stored]).empty_table())
    renames = ", ".join(f"{quote(physical.get(f.name, f.name))} AS {quote(f.name)}" for f in stored)
    groups: Dict[Tuple, List[str]] = {}
    for f in files:
        key = tuple((c, f.partition_values.get(c)) for c in partition_columns)
        groups.setdefault(key, []).append(f.path)
    deleted = _deleted_rows_table(files, list(physical.values()) + [f.name for f in declared], register)
    parts = []
    for key, paths in groups.items():
        extra = "".join(
            f", {_partition_value(value, _declared_type(declared, column))} AS {quote(column)}"
            for column, value in key
        )
        source = _read_files(paths, "hive_partitioning=false, union_by_name=true", deleted)
        parts.append(
            f"SELECT {renames}{extra} FROM (SELECT * FROM {source} "
            f"UNION ALL BY NAME SELECT * FROM temp.main.{quote(empty_name)})"
        )
    columns = _select_list(declared, storage_types, plan.widened)
    registered = [empty_name] + ([deleted[0]] if deleted else [])
    return f"SELECT {columns} FROM (" + " UNION ALL BY NAME ".join(f"({p})" for p in parts) + ")", registered


def _deleted_rows_table(files: List[Any], columns: List[str], register: Register) -> Optional[Tuple[str, str]]:
    """Registers the rows deletion vectors delete, as (path, row) pairs; returns the table's name
    and a column name for the file name that no table column has (None: no file has any)."""
    # deleted_rows is converted from the core's vector on each access: read it once per file.
    marked = [(f.path, rows) for f in files if (rows := f.deleted_rows)]
    if not marked:
        return None
    paths = pa.chunked_array([pa.array([path] * len(rows), pa.string()) for path, rows in marked])
    rows = pa.chunked_array([pa.array(rows, pa.uint64()).cast(pa.int64()) for _, rows in marked])
    name = register("deleted", pa.table({"path": paths, "row": rows}))
    return name, _fresh("__tl_file", {c.lower() for c in columns})


def _select_list(declared: pa.Schema, storage_types: Dict[str, pa.DataType], widened: List[str]) -> str:
    """The view's columns. A widened column (Delta type widening) is cast to the table's stored
    type: older files hold a narrower one, which reading by name promotes only as far as DuckDB's
    own rules go (an INTEGER and a DECIMAL meet in a DECIMAL of DuckDB's choosing)."""
    widened_set = set(widened)

    def column(f: pa.Field) -> str:
        stored = storage_types.get(f.name, f.type)
        # Nested columns (another engine widened an element, a value or a struct field) are left
        # to reading by name, which promotes them; duckdb_type names top-level types only.
        if f.name not in widened_set or pa.types.is_nested(stored):
            return quote(f.name)
        return f"CAST({quote(f.name)} AS {duckdb_type(stored)}) AS {quote(f.name)}"

    return ", ".join(column(f) for f in declared)


def _read_files(paths: List[str], options: str, deleted: Optional[Tuple[str, str]]) -> str:
    """A FROM item reading `paths`, without the rows deletion vectors delete (`deleted`: the
    registered (path, row) table and a free column name for the file name)."""
    if deleted is None:
        return f"read_parquet({file_list(paths)}, {options})"
    table, file_col = deleted
    return (
        f"(SELECT r.* EXCLUDE ({quote(file_col)}, file_row_number) FROM read_parquet({file_list(paths)}, "
        f"{options}, filename={literal(file_col)}, file_row_number=true) r "
        f"ANTI JOIN temp.main.{quote(table)} d ON r.{quote(file_col)} = d.path AND r.file_row_number = d.row)"
    )


class _Located:
    """A ScanFile read from another path (its local copy)."""

    __slots__ = ("path", "seq", "order", "dedup", "partition_values", "deleted_rows")

    def __init__(self, f: Any, path: str) -> None:
        self.path = path
        self.seq = f.seq
        self.order = f.order
        self.dedup = f.dedup
        self.partition_values = f.partition_values
        self.deleted_rows = f.deleted_rows


def _dedup_sql(files: List[Any], dedup_order: Any, columns: str, table_columns: List[str], evolved: bool = False,
               deleted: Optional[str] = None) -> str:
    """One row per dedup key of `files`, ranked as the plan's dedup ordering says (the file's
    seq, then its order, then the row's position in the file; the first row wins).

    The view's own columns get names no table column has (DuckDB compares names ignoring case),
    so a table may have columns called `filename`, `__tl_seq` or anything else. DuckDB's
    `file_row_number` cannot be renamed: a table with a column of that name orders rows of one
    file by nothing more (timelake's own files never hold two rows of one key and time).
    """
    taken = {c.lower() for c in table_columns}
    file_col, path, seq, ord_ = (_fresh(base, taken) for base in ("__tl_file", "__tl_path", "__tl_seq", "__tl_ord"))
    order = "DESC" if dedup_order.newest_first else "ASC"
    keys = ", ".join(quote(k) for k in dedup_order.keys)
    row_number = "file_row_number" not in taken
    options = f"filename={literal(file_col)}" + (", file_row_number=true" if row_number else "")
    seqs = ", ".join(f"({literal(f.path)}, {f.seq}, {f.order})" for f in files)
    ordering = f"{quote(seq)} {order}, {quote(ord_)} {order}" + (f", file_row_number {order}" if row_number else "")
    if evolved:
        # Some columns may be in none of these files: keep whatever they hold, by name.
        helpers = [file_col, seq, ord_] + (["file_row_number"] if row_number else [])
        columns = "* EXCLUDE (" + ", ".join(quote(h) for h in helpers) + ")"
        options += ", union_by_name=true"
    if deleted is not None and not row_number:
        raise RuntimeError("a table with a column named file_row_number cannot be read with deletion vectors")
    # Rows deletion vectors delete (another engine's DELETE/UPDATE/MERGE) are left out first.
    anti = (f"ANTI JOIN temp.main.{quote(deleted)} d ON r.{quote(file_col)} = d.path "
            f"AND r.file_row_number = d.row " if deleted is not None else "")
    return (
        f"SELECT {columns} FROM (SELECT r.*, m.{quote(seq)}, m.{quote(ord_)} FROM "
        f"read_parquet({file_list([f.path for f in files])}, {options}, hive_partitioning=false) r "
        f"{anti}JOIN (VALUES {seqs}) AS m({quote(path)}, {quote(seq)}, {quote(ord_)}) "
        f"ON r.{quote(file_col)} = m.{quote(path)}) "
        f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {ordering}) = 1"
    )


def _fresh(base: str, taken: set) -> str:
    """`base`, or `base_N`: a column name no name in `taken` (lower case) equals ignoring case."""
    name, n = base, 0
    while name.lower() in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name.lower())
    return name


def _partition_value(value: Optional[str], t: pa.DataType) -> str:
    """A Delta partition value (text in the log) as a typed DuckDB expression."""
    duck = duckdb_type(t)
    if value is None:
        return f"CAST(NULL AS {duck})"
    if duck == "BLOB":
        return f"encode({literal(value)})"
    return f"CAST({literal(value)} AS {duck})"


def _declared_type(schema: pa.Schema, column: str) -> pa.DataType:
    index = schema.get_field_index(column)
    return schema.field(index).type if index >= 0 else pa.string()


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB name of a top-level Arrow type (VARCHAR for types it has no name for here)."""
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t):
        return "TINYINT"
    if pa.types.is_int16(t):
        return "SMALLINT"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "REAL"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "VARCHAR"
    if pa.types.is_binary(t):
        return "BLOB"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    return "VARCHAR"
