"""The core's floors (docs/architecture.md): no file in src/timelake/ includes a header of a floor
above its own. Floors, bottom up; rooms on one floor may use each other."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "timelake"

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
