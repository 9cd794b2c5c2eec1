"""Arrow PyCapsules from the core, handed to pyarrow through the PyCapsule protocol."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


class SchemaCapsule:
    """Hands a core-exported ArrowSchema capsule to pyarrow (`pa.schema(SchemaCapsule(c))`)."""

    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __arrow_c_schema__(self) -> Any:
        return self.capsule


class StreamCapsule:
    """Hands a core-exported ArrowArrayStream capsule to pyarrow (read_stream)."""

    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.capsule


def read_stream(capsule: Any) -> pa.Table:
    """The whole stream of a core-exported ArrowArrayStream capsule, as a pyarrow Table.

    Read through `RecordBatchReader.from_stream`, not `pa.table(...)`: pyarrow's `pa.table` asks
    whether its argument is a pandas DataFrame first, which imports pandas (~0.3 s) the first
    time in a process when pandas is installed; a first `latest()` must not pay for that.
    """
    return pa.RecordBatchReader.from_stream(StreamCapsule(capsule)).read_all()
