"""The `timelake` command: look at and look after a lake from the shell.

    timelake demo [demo options]            the guided tour (python -m timelake.demo)
    timelake tables LAKE                    list namespace.table
    timelake info LAKE TABLE                contract, size, snapshots, index (JSON)
    timelake sql LAKE "SELECT ..." [-n NS]  run a query, print the result
    timelake latest LAKE TABLE              newest row of every series
    timelake maintain LAKE TABLE [--no-compact] [--no-retention] [--no-expire]

LAKE is a path or URL. Errors print one line and exit with status 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

import pyarrow as pa


def _print_table(table: pa.Table, limit: int) -> None:
    names = table.column_names
    rows = table.slice(0, limit).to_pylist()
    cells = [[("" if r[n] is None else str(r[n])) for n in names] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    print("  ".join(n.ljust(w) for n, w in zip(names, widths)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)))
    if table.num_rows > limit:
        print(f"... {table.num_rows - limit} more rows")
    print(f"({table.num_rows} rows)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="timelake", description="An embedded time-series lakehouse.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the guided tour", add_help=False)
    # Every command that opens a lake takes storage options (for s3:// lakes: aws_endpoint,
    # aws_region, ...); secrets are better left in the environment (AWS_SECRET_ACCESS_KEY, ...),
    # where the store finds them, than on a command line other users can see.
    lake_options = argparse.ArgumentParser(add_help=False)
    lake_options.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                              help="a storage option of the lake (repeatable), e.g. aws_region=eu-west-1")
    t = sub.add_parser("tables", help="list the tables of a lake", parents=[lake_options])
    t.add_argument("lake")
    i = sub.add_parser("info", help="a table's contract, size, snapshots and index", parents=[lake_options])
    i.add_argument("lake")
    i.add_argument("table")
    q = sub.add_parser("sql", help="run a read-only SQL query", parents=[lake_options])
    q.add_argument("lake")
    q.add_argument("query")
    q.add_argument("-n", "--namespace", default="default")
    q.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    l = sub.add_parser("latest", help="the newest row of every series", parents=[lake_options])
    l.add_argument("lake")
    l.add_argument("table")
    l.add_argument("--limit", type=int, default=50)
    m = sub.add_parser("maintain", help="retention, compaction and index upkeep", parents=[lake_options])
    m.add_argument("lake")
    m.add_argument("table")
    m.add_argument("--no-compact", action="store_true")
    m.add_argument("--no-retention", action="store_true")
    m.add_argument("--no-expire", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        from . import demo

        return demo.main(argv[1:])
    args = _parser().parse_args(argv)
    import timelake

    try:
        options = {}
        for item in args.storage_option:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError("storage options are written KEY=VALUE (-o aws_region=eu-west-1)")
            options[key] = value
        lake = timelake.Lake(args.lake, storage_options=options or None)
        if args.command == "tables":
            for name in lake.tables():
                print(name)
        elif args.command == "info":
            print(json.dumps(lake.table(args.table).info(), indent=2))
        elif args.command == "sql":
            _print_table(lake.sql(args.query, namespace=args.namespace), args.limit)
        elif args.command == "latest":
            _print_table(lake.latest(args.table), args.limit)
        elif args.command == "maintain":
            result = lake.table(args.table).maintain(
                compact=not args.no_compact, retention=not args.no_retention, expire=not args.no_expire
            )
            print(json.dumps(result, indent=2))
    except (KeyError, ValueError, FileExistsError, RuntimeError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"timelake {args.command}: {type(e).__name__}: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
