"""The layers (docs/architecture.md): no file in src/timelake/ includes a header of a floor above
its own (floors, bottom up; rooms on one floor may use each other), and no module of the Python
package imports one of its own level or above."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "timelake"
PACKAGE = Path(__file__).resolve().parents[2] / "python" / "timelake"

# room (a folder of src/timelake/, or a file stem at its top) -> floor
FLOORS = {
    "util": 0,
    "http": 1,
    "store": 2,
    "log": 3,
    "contract": 4,
    "rows": 5,
    "index": 6, "scan": 6, "ingest": 6, "txn": 6,
    "maintain": 7,
    "table": 8,
    "lake": 9,
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"timelake/([^"]+)"', re.M)


def room_of(relative: str) -> str:
    """The room of a path under src/timelake/ ("store/s3/s3_store.h" -> "store")."""
    first = relative.split("/", 1)[0]
    return first.rsplit(".", 1)[0] if "/" not in relative else first


def test_every_room_has_a_floor():
    rooms = {room_of(str(p.relative_to(SRC))) for p in SRC.rglob("*") if p.suffix in (".h", ".cc")}
    assert rooms - FLOORS.keys() == set(), "give the new room a floor here and in docs/architecture.md"


def test_no_file_includes_a_header_of_a_floor_above_its_own():
    upward = []
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".h", ".cc"):
            continue
        relative = str(path.relative_to(SRC))
        floor = FLOORS[room_of(relative)]
        for included in INCLUDE.findall(path.read_text()):
            if FLOORS.get(room_of(included), -1) > floor:
                upward.append(f"{relative} ({room_of(relative)}, floor {floor}) includes {included}")
    assert upward == []


def test_txn_holds_only_transaction_logic():
    # The committer, the conflict rules and the post-commit hook contract; the handle's runtime
    # (the spool, the upkeep thread) lives with the handle in table/.
    stems = {p.stem for p in (SRC / "txn").iterdir() if p.suffix in (".h", ".cc")}
    assert stems == {"committer", "conflict", "post_commit"}


def test_the_check_sees_an_upward_include(tmp_path):
    # The rule applied to a made-up file: the store floor reaching up to the scan floor.
    text = '#include "timelake/scan/row_groups.h"\n'
    assert [i for i in INCLUDE.findall(text) if FLOORS[room_of(i)] > FLOORS["store"]] == ["scan/row_groups.h"]


# module of python/timelake/ -> level; a module imports only modules of lower levels (the
# package's entry points, at the top, import the package itself).
PY_LEVELS = {
    "_core": 0, "_tree": 0, "_sql_text": 0, "_capsules": 0, "_types": 0, "_rollup_spec": 0,
    "_sql_filter": 1, "_select": 1, "_confine": 1, "_render": 1, "_travel": 1, "_sql_template": 1,
    "_time_weighted": 1, "_durations": 1,
    "_catalog": 2, "_gapfill": 2,
    "_rollup": 3,
    "_route": 4,
    "_sql": 5,
    "__init__": 6,
    "demo": 7, "cli": 8, "__main__": 9,
}


def package_imports(path: Path) -> set:
    """The modules of the package that the module at `path` imports (relative imports)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
    return out


def test_every_python_module_has_a_level():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules - PY_LEVELS.keys() == set(), "give the new module a level here"


def test_no_python_module_imports_one_of_its_level_or_above():
    upward = []
    for path in sorted(PACKAGE.glob("*.py")):
        level = PY_LEVELS[path.stem]
        for imported in sorted(package_imports(path)):
            if PY_LEVELS.get(imported, 99) >= level:
                upward.append(f"{path.name} (level {level}) imports {imported}")
    assert upward == []


def test_the_python_check_sees_an_upward_import(tmp_path):
    module = tmp_path / "_render.py"
    module.write_text("from ._catalog import Catalog\nfrom . import _tree\n")
    assert package_imports(module) == {"_catalog", "_tree"}
    assert PY_LEVELS["_catalog"] >= PY_LEVELS["_render"]
