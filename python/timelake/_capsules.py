"""Arrow PyCapsules from the core, handed to pyarrow through the PyCapsule protocol."""

from __future__ import annotations

from typing import Any


class SchemaCapsule:
    """Hands a core-exported ArrowSchema capsule to pyarrow (`pa.schema(SchemaCapsule(c))`)."""

    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __arrow_c_schema__(self) -> Any:
        return self.capsule


class StreamCapsule:
    """Hands a core-exported ArrowArrayStream capsule to pyarrow (`pa.table(StreamCapsule(c))`)."""

    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.capsule
