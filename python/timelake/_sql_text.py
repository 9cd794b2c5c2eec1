"""SQL text for DuckDB: quoted identifiers, string literals, file paths read literally, and
DuckDB's error messages without the statement excerpt."""

from __future__ import annotations

from typing import List


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def file_list(paths: List[str]) -> str:
    """A DuckDB list of file paths that read_parquet opens literally.

    read_parquet expands glob patterns in every path it is given, so a lake folder named
    `lake[1]*` would read other folders' files (or the same file twice). Each special character
    becomes a one-character class (`[*]`), which matches exactly that character.
    """
    return "[" + ", ".join(literal(glob_literal(p)) for p in paths) + "]"


def glob_literal(path: str) -> str:
    return "".join(f"[{c}]" if c in _GLOB_CHARS else c for c in path)


_GLOB_CHARS = frozenset("*?[{}")


def message(error: Exception) -> str:
    """DuckDB's message without its "LINE 1:" excerpt, which would show the query() wrapper."""
    return str(error).split("\n\nLINE ", 1)[0]
