"""Declared types for query results.

Data files hold the storage types (Delta's); results give back the types declared at
create_table. One declared type cannot always hold a result: a dictionary column whose index type
is too narrow for the distinct values a result holds (a pandas categorical declares int8 indices,
and later appends may bring more than 127 categories). Such a column keeps its value type and
dictionary encoding, with the narrowest wider index type that addresses every value.
"""

from __future__ import annotations

from typing import Dict, Union

import pyarrow as pa

_WIDER_INDICES = (pa.int16(), pa.int32(), pa.int64())


def restore_declared(
    column: Union[pa.Array, pa.ChunkedArray], declared: pa.DataType
) -> Union[pa.Array, pa.ChunkedArray]:
    """`column` (storage values) in the `declared` type, widening dictionary indices if needed.

    Raises what pyarrow's safe cast raises when the values do not fit a type that is not a
    dictionary (the caller decides whether to keep the storage type then).
    """
    if column.type == declared:
        return column
    if not _has_dictionary(declared):
        return column.cast(declared, safe=True)
    if pa.types.is_dictionary(declared):
        return _encode(column, declared)
    # Dictionaries inside nested types: the declared type, else wider indices, else as stored.
    for index in (None,) + _WIDER_INDICES:
        try:
            return column.cast(declared if index is None else _widen(declared, index), safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return column


def _encode(column: Union[pa.Array, pa.ChunkedArray], declared: pa.DictionaryType):
    values = column.cast(declared.value_type, safe=True)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = values.dictionary_encode()
    index = declared.index_type
    size = len(encoded.dictionary)
    if size > _capacity(index):
        index = next(t for t in _WIDER_INDICES if size <= _capacity(t))
    out = pa.DictionaryArray.from_arrays(
        encoded.indices.cast(index), encoded.dictionary, ordered=declared.ordered
    )
    return pa.chunked_array([out]) if isinstance(column, pa.ChunkedArray) else out


def _capacity(index: pa.DataType) -> int:
    """How many dictionary entries indices of this integer type can address."""
    return 1 << (index.bit_width - (0 if pa.types.is_unsigned_integer(index) else 1))


def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def _widen(t: pa.DataType, index: pa.DataType) -> pa.DataType:
    """`t` with every dictionary index type at least as wide as `index`."""
    if pa.types.is_dictionary(t):
        wide = index if _capacity(index) > _capacity(t.index_type) else t.index_type
        return pa.dictionary(wide, _widen(t.value_type, index), t.ordered)
    if pa.types.is_struct(t):
        return pa.struct([_widen_field(t.field(i), index) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(_widen_field(t.key_field, index), _widen_field(t.item_field, index), t.keys_sorted)
    if pa.types.is_large_list(t):
        return pa.large_list(_widen_field(t.value_field, index))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_widen_field(t.value_field, index), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(_widen_field(t.value_field, index))
    return t


def _widen_field(f: pa.Field, index: pa.DataType) -> pa.Field:
    return f.with_type(_widen(f.type, index))


def restore_result(result: pa.Table, declared: Dict[str, pa.Field], restored: Dict[str, pa.DataType]) -> pa.Table:
    """Casts columns of a query result that came straight from a table column back to its declared
    type: a result column named like a column the scan plan lists as restored (`restored`: its
    storage type, `declared`: its declared field) that holds that storage type."""
    columns = []
    changed = False
    for field, column in zip(result.schema, result.columns):
        want = declared.get(field.name)
        stored = restored.get(field.name)
        if want is not None and stored is not None and field.type != want.type and field.type == stored:
            try:
                column = restore_declared(column, want.type)
                field = pa.field(field.name, column.type, field.nullable)
                changed = True
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        columns.append(column)
    if not changed:
        return result
    return pa.Table.from_arrays(columns, names=result.column_names)
