"""A guided tour of timelake on a realistic IoT data set.

Run it with::

    python -m timelake.demo [--lake PATH] [--rows N] [--devices N] [--days N]

It generates pump readings from a fleet of devices spread over a few sites, streams them into a
lake the way gateways would (one batch per gateway per time window, each with a batch id), replays
a batch to show that ingestion is idempotent, sends a late correction to show upserts, compacts the
table with maintain(), runs the queries a dashboard would run, reads the newest reading of every device, and prints a summary with
timings. The lake folder is wiped first, but only when it is empty or looks like a timelake lake.

Everything here uses the public API only: ``Lake``, ``create_table``, ``Table.append``, ``sql``,
``latest`` and ``Table.info``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import timelake

TABLE = "iot.readings"

SCHEMA = pa.schema(
    [
        ("time", pa.timestamp("us", tz="UTC")),
        ("device_id", pa.string()),
        ("site", pa.string()),
        ("temp", pa.float64()),
        ("humidity", pa.float64()),
        ("battery", pa.float32()),
    ]
)

# One gateway per site; each gateway uploads the readings of its site's devices.
SITES = [
    "rotterdam-harbor",
    "lyon-plant",
    "austin-dc",
    "osaka-works",
    "oslo-pumping",
    "santos-terminal",
    "gdansk-yard",
    "perth-mine",
]
MAX_SITES = 6

# Candidate upload windows in minutes; the demo picks the shortest that keeps the number of batches
# at most TARGET_BATCHES, so that the tour runs in seconds whatever --rows/--days say.
WINDOWS_MIN = [10, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, 1440, 2880, 10080]
TARGET_BATCHES = 200

US_PER_S = 1_000_000
US_PER_DAY = 86_400 * US_PER_S


# ---------------------------------------------------------------------------------------------
# Terminal styling (standard library only)
# ---------------------------------------------------------------------------------------------


class Style:
    """ANSI styling when writing to a terminal that wants it; plain text otherwise."""

    def __init__(self, stream):
        self.stream = stream
        enc = (getattr(stream, "encoding", None) or "ascii").lower()
        try:
            "╭─│▁█·→✓".encode(enc)
            self.unicode = True
        except (UnicodeEncodeError, LookupError):
            self.unicode = False
        self.color = (
            hasattr(stream, "isatty")
            and stream.isatty()
            and "NO_COLOR" not in os.environ
            and os.environ.get("TERM") != "dumb"
        )

    def _wrap(self, code, text):
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def bold(self, text):
        return self._wrap("1", text)

    def dim(self, text):
        return self._wrap("2", text)

    def green(self, text):
        return self._wrap("32", text)

    def cyan(self, text):
        return self._wrap("36", text)

    def yellow(self, text):
        return self._wrap("33", text)

    def red(self, text):
        return self._wrap("31", text)

    @property
    def check(self):
        return "✓" if self.unicode else "ok"

    @property
    def dot(self):
        return "·" if self.unicode else "-"

    @property
    def arrow(self):
        return "→" if self.unicode else "->"


def visible_len(text: str) -> int:
    """Length of text as displayed, ignoring ANSI escape sequences."""
    n, i = 0, 0
    while i < len(text):
        if text[i] == "\033":
            j = text.find("m", i)
            i = len(text) if j < 0 else j + 1
            continue
        n += 1
        i += 1
    return n


def pad(text: str, width: int, align: str = "<") -> str:
    gap = max(0, width - visible_len(text))
    return (" " * gap + text) if align == ">" else (text + " " * gap)


def fmt_int(n) -> str:
    return f"{int(n):,}"


def fmt_bytes(n) -> str:
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:,.0f} ms"


def fmt_rate(rows: float, seconds: float) -> str:
    if seconds <= 0:
        return "n/a"
    r = rows / seconds
    if r >= 1e6:
        return f"{r / 1e6:.2f}M rows/s"
    if r >= 1e3:
        return f"{r / 1e3:.0f}k rows/s"
    return f"{r:.0f} rows/s"


def datetime_format(values) -> str:
    """The shortest strftime format that shows every datetime in values exactly (to the second)."""
    values = [v for v in values if isinstance(v, dt.datetime)]
    if all(v.hour == v.minute == v.second == 0 for v in values):
        return "%Y-%m-%d"
    if all(v.second == 0 for v in values):
        return "%Y-%m-%d %H:%M"
    return "%Y-%m-%d %H:%M:%S"


def fmt_cell(value, time_format="%Y-%m-%d %H:%M:%S") -> str:
    if value is None:
        return "null"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.strftime(time_format)
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_table(style: Style, table: pa.Table, columns=None, limit=None, indent="    ") -> str:
    """Render a pyarrow Table as an aligned text table."""
    columns = list(columns or table.column_names)
    shown = table.select(columns)
    if limit is not None:
        shown = shown.slice(0, limit)
    data = [shown.column(c).to_pylist() for c in columns]
    formats = [datetime_format(col) for col in data]
    rows = [[fmt_cell(v, f) for v, f in zip(vals, formats)] for vals in zip(*data)]
    numeric = [
        pa.types.is_integer(shown.schema.field(c).type)
        or pa.types.is_floating(shown.schema.field(c).type)
        for c in columns
    ]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    sep = "  "
    lines = [
        indent
        + sep.join(
            style.bold(pad(c, w, ">" if num else "<")) for c, w, num in zip(columns, widths, numeric)
        )
    ]
    rule = "─" if style.unicode else "-"
    lines.append(indent + style.dim(sep.join(rule * w for w in widths)))
    for r in rows:
        lines.append(
            indent + sep.join(pad(v, w, ">" if num else "<") for v, w, num in zip(r, widths, numeric))
        )
    if limit is not None and table.num_rows > limit:
        lines.append(indent + style.dim(f"… {table.num_rows - limit:,} more rows" if style.unicode
                                        else f"... {table.num_rows - limit:,} more rows"))
    return "\n".join(lines)


def sparkline(style: Style, values, lo: float, hi: float) -> str:
    bars = "▁▂▃▄▅▆▇█" if style.unicode else " .:-=+*#"
    span = (hi - lo) or 1.0
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(" ")
            continue
        i = int((v - lo) / span * (len(bars) - 1) + 0.5)
        out.append(bars[min(max(i, 0), len(bars) - 1)])
    return "".join(out)


def box(style: Style, title: str, lines) -> str:
    """Draw a box around lines (which may contain ANSI codes)."""
    width = max([visible_len(line) for line in lines] + [visible_len(title) + 4])
    if style.unicode:
        tl, tr, bl, br, h, v = "╭", "╮", "╰", "╯", "─", "│"
    else:
        tl, tr, bl, br, h, v = "+", "+", "+", "+", "-", "|"
    head = f"{h} {style.bold(title)} "
    top = tl + head + h * (width + 2 - visible_len(head)) + tr
    body = [f"{v} {pad(line, width)} {v}" for line in lines]
    bottom = bl + h * (width + 2) + br
    return "\n".join([top, *body, bottom])


# ---------------------------------------------------------------------------------------------
# The data set
# ---------------------------------------------------------------------------------------------


def device_name(i: int) -> str:
    return f"pump-{i + 1:04d}"


def pick_window_minutes(days: int, gateways: int) -> int:
    for minutes in WINDOWS_MIN:
        windows = math.ceil(days * 1440 / minutes)
        if windows * gateways <= TARGET_BATCHES:
            return minutes
    return WINDOWS_MIN[-1]


def generate(rows: int, devices: int, days: int, start: dt.datetime, seed: int = 7):
    """Generate `rows` readings of `devices` pumps over `days` days from `start` (UTC midnight).

    Returns (table, batches): `table` holds every reading in upload order (by gateway window, then
    gateway, then time) and `batches` is a list of (batch_id, gateway, start_row, num_rows) slices of
    it, one per gateway per upload window.
    """
    rng = np.random.default_rng(seed)
    n_sites = min(MAX_SITES, devices)
    start_us = int(start.timestamp()) * US_PER_S
    span_us = days * US_PER_DAY

    # Every device reports at a steady rate with a little clock jitter.
    counts = np.full(devices, rows // devices, dtype=np.int64)
    counts[: rows % devices] += 1
    dev = np.repeat(np.arange(devices, dtype=np.int32), counts)
    k = np.arange(rows, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    interval = span_us / np.maximum(counts, 1)  # µs between two readings of one device
    phase = rng.random(devices)
    jitter = np.clip(rng.normal(0.0, 1.5 * US_PER_S, rows), -0.3 * interval[dev], 0.3 * interval[dev])
    t = start_us + ((k + phase[dev]) * interval[dev] + jitter).astype(np.int64)
    t = np.clip(t, start_us, start_us + span_us - 1)

    site = dev % n_sites
    sec_of_day = ((t - start_us) % US_PER_DAY) / US_PER_S

    # Temperature of the pumped fluid: each pump has its own level and daily swing, the site its
    # own hour of peak load (they are in different time zones), plus sensor noise.
    base = rng.uniform(38.0, 62.0, devices)
    swing = rng.uniform(3.0, 8.0, devices)
    peak_hour = np.array([(15 - 3 * s) % 24 for s in range(n_sites)], dtype=np.float64)
    cycle = np.sin(2 * np.pi * (sec_of_day / 86_400 - peak_hour[site] / 24) + np.pi / 2)
    temp = base[dev] + swing[dev] * cycle + rng.normal(0.0, 0.6, rows)
    # A few pumps run hot on the last day: something for a dashboard to find.
    hot = rng.choice(devices, size=max(1, devices // 100), replace=False)
    is_hot = np.isin(dev, hot) & (t >= start_us + span_us - US_PER_DAY)
    temp = np.where(is_hot, temp + 9.0, temp)

    humidity = np.clip(
        rng.uniform(45.0, 65.0, n_sites)[site] - 1.8 * swing[dev] * cycle + rng.normal(0, 2.0, rows),
        5.0,
        100.0,
    )

    # Batteries drain at a per-device rate and are reported to 0.1 %.
    charge = rng.uniform(70.0, 100.0, devices)
    drain_per_day = rng.uniform(0.2, 2.5, devices)
    elapsed_days = (t - start_us) / US_PER_DAY
    battery = np.clip(charge[dev] - drain_per_day[dev] * elapsed_days, 0.0, 100.0)
    battery = (np.round(battery * 10) / 10).astype(np.float32)

    # Upload order: each gateway uploads its site's readings once per window.
    window_us = pick_window_minutes(days, n_sites) * 60 * US_PER_S
    window = (t - start_us) // window_us
    key = window * n_sites + site
    order = np.lexsort((t, key))
    key = key[order]

    names = pa.array([device_name(i) for i in range(devices)], pa.string())
    site_names = pa.array(SITES[:n_sites], pa.string())
    table = pa.table(
        {
            "time": pa.array(t[order], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "device_id": names.take(pa.array(dev[order])),
            "site": site_names.take(pa.array(site[order])),
            "temp": pa.array(np.round(temp[order], 3)),
            "humidity": pa.array(np.round(humidity[order], 2)),
            "battery": pa.array(battery[order]),
        },
        schema=SCHEMA,
    )

    bounds = np.concatenate([[0], np.flatnonzero(np.diff(key)) + 1, [rows]]) if rows else np.array([0])
    batches = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        w, g = divmod(int(key[lo]), n_sites)
        batches.append((f"gateway-{g}-{w:06d}", g, int(lo), int(hi - lo)))
    return table, batches, window_us // (60 * US_PER_S), n_sites


# ---------------------------------------------------------------------------------------------
# The lake folder
# ---------------------------------------------------------------------------------------------


def looks_like_lake(path: Path) -> bool:
    """True if path holds only <namespace>/<table>/ folders, at least one with a _delta_log/."""
    entries = [e for e in path.iterdir() if not e.name.startswith(".")]
    if not entries or not all(e.is_dir() and not e.is_symlink() for e in entries):
        return False
    return any(p.is_dir() for p in path.glob("*/*/_delta_log"))


def prepare_lake_dir(path: Path) -> str:
    """Wipe path if it is an empty folder or a timelake lake; refuse anything else."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise SystemExit(f"demo: {path} exists and is not a folder; pass another --lake")
    if path.exists():
        if any(path.iterdir()):
            if not looks_like_lake(path):
                raise SystemExit(
                    f"demo: {path} is not empty and does not look like a timelake lake; "
                    "refusing to wipe it. Pass another --lake."
                )
            shutil.rmtree(path)
            return "wiped the previous demo lake"
        return "empty folder"
    return "new folder"


# ---------------------------------------------------------------------------------------------
# The tour
# ---------------------------------------------------------------------------------------------


class Tour:
    def __init__(self, style: Style, steps: int):
        self.s = style
        self.steps = steps
        self.n = 0

    def step(self, title: str):
        self.n += 1
        print()
        print(self.s.cyan(self.s.bold(f"[{self.n}/{self.steps}] ")) + self.s.bold(title))

    def say(self, text: str = ""):
        print(f"    {text}" if text else "")

    def code(self, text: str):
        for line in text.strip("\n").splitlines():
            print("    " + self.s.dim(line))


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m timelake.demo",
        description="A guided tour of timelake on a generated IoT data set.",
    )
    p.add_argument("--lake", default="./demo-lake",
                   help="lake folder (wiped first if empty or a timelake lake; default ./demo-lake)")
    p.add_argument("--rows", type=int, default=1_200_000, help="readings to generate (default 1,200,000)")
    p.add_argument("--devices", type=int, default=300, help="number of devices (default 300)")
    p.add_argument("--days", type=int, default=4, help="days of data, ending today 00:00 UTC (default 4)")
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    args = p.parse_args(argv)
    if args.rows < 1 or args.devices < 1 or args.days < 1:
        p.error("--rows, --devices and --days must be positive")
    if args.devices > 9999:
        p.error("--devices must be at most 9999 (device ids are pump-0001 … pump-9999)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    s = Style(sys.stdout)
    tour = Tour(s, steps=9)
    timings = {}

    today = dt.datetime.now(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - dt.timedelta(days=args.days)
    lake_dir = Path(args.lake).expanduser().resolve()
    how = prepare_lake_dir(lake_dir)  # refuse a wrong --lake before doing any work

    version = getattr(timelake, "__version__", "")
    print()
    print(s.bold(f"timelake {version}".rstrip()) + s.dim(" — an embedded time-series lakehouse"))
    print(s.dim("Parquet + a Delta Lake log on your disk or object store; SQL, upserts, latest()."))

    # 1. data ------------------------------------------------------------------------------------
    tour.step("Generate a fleet of IoT pumps")
    (table, batches, window_min, n_sites), gen_s = timed(
        generate, args.rows, args.devices, args.days, start, args.seed
    )
    tour.say(
        f"{fmt_int(table.num_rows)} readings {s.dot} {fmt_int(args.devices)} devices "
        f"{s.dot} {n_sites} sites {s.dot} {args.days} days "
        f"({start:%Y-%m-%d} {s.arrow} {today:%Y-%m-%d}) "
        + s.dim(f"generated in {gen_s:.2f} s, {fmt_bytes(table.nbytes)} of Arrow")
    )
    tour.say(s.dim(f"schema: {', '.join(f'{f.name} {f.type}' for f in SCHEMA)}"))

    # 2. table -----------------------------------------------------------------------------------
    tour.step("Open a lake and create a time-series table")
    lake_dir.mkdir(parents=True, exist_ok=True)
    lake = timelake.Lake(str(lake_dir))
    tour.code(
        f"""
lake = timelake.Lake({str(args.lake)!r})
t = lake.create_table("{TABLE}", schema, time_column="time", series_key=["device_id"],
                      chunk="day", retention="365d", dedup="last")
"""
    )
    t, create_s = timed(
        lake.create_table,
        TABLE,
        SCHEMA,
        time_column="time",
        series_key=["device_id"],
        chunk="day",
        retention="365d",
        dedup="last",
    )
    tour.say(f"{s.green(s.check)} {lake.location} {s.dim('(' + how + ')')}  "
             + s.dim(f"created in {fmt_ms(create_s)}"))

    # 3. ingest ----------------------------------------------------------------------------------
    tour.step(f"Ingest {len(batches)} gateway uploads, each with a batch id")
    tour.say(s.dim(f"{n_sites} gateways, each uploading its site's readings every "
                   f"{window_min // 60 if window_min >= 60 else window_min} "
                   f"{'h' if window_min >= 60 else 'min'}, like:"))
    tour.code('t.append(batch, batch_id="gateway-3-000042")')
    commit_ms, files_written, bytes_written, dup_count, maint_count = [], 0, 0, 0, 0
    show_progress = s.color
    t0 = time.perf_counter()
    for i, (bid, _g, lo, n) in enumerate(batches):
        r = t.append(table.slice(lo, n), batch_id=bid)
        commit_ms.append(float(r.get("commit_ms", 0.0)))
        files_written += int(r.get("files", 0))
        bytes_written += int(r.get("bytes", 0))
        dup_count += bool(r.get("duplicate"))
        maint_count += bool(r.get("maintenance"))
        if show_progress and (i % 5 == 0 or i == len(batches) - 1):
            done = (i + 1) / len(batches)
            bar_w = 30
            full = int(done * bar_w)
            bar = ("█" if s.unicode else "#") * full + ("░" if s.unicode else ".") * (bar_w - full)
            print(f"\r    {bar} {i + 1:>4}/{len(batches)}", end="", flush=True)
    ingest_s = time.perf_counter() - t0
    if show_progress:
        print("\r" + " " * 60 + "\r", end="")
    timings["ingest"] = ingest_s
    p50 = statistics.median(commit_ms) if commit_ms else 0.0
    p99 = sorted(commit_ms)[min(len(commit_ms) - 1, int(len(commit_ms) * 0.99))] if commit_ms else 0.0
    tour.say(
        f"{s.green(s.check)} {fmt_int(table.num_rows)} rows in {ingest_s:.2f} s = "
        + s.bold(fmt_rate(table.num_rows, ingest_s))
        + s.dim(f"  ({files_written} files, {fmt_bytes(bytes_written)}, "
                f"commit p50 {p50:.1f} ms / p99 {p99:.1f} ms, table version {t.version})")
    )
    if maint_count:
        tour.say(s.dim(f"inline maintenance ran during {maint_count} of the appends"))
    if dup_count:
        tour.say(s.yellow(f"note: {dup_count} fresh batches were reported as duplicates"))

    # 4. idempotency -----------------------------------------------------------------------------
    tour.step("A gateway retries an upload: idempotent by batch id")
    bid, _g, lo, n = batches[len(batches) // 3]
    before = int(t.info()["size"]["rows"])
    tour.code(f't.append(batch, batch_id="{bid}")   # the same {n:,} rows, sent again')
    r, replay_s = timed(t.append, table.slice(lo, n), batch_id=bid)
    after = int(t.info()["size"]["rows"])
    ok = bool(r.get("duplicate")) and before == after
    mark = s.green(s.check) if ok else s.red("x")
    tour.say(f"{mark} duplicate={r.get('duplicate')}  rows before {fmt_int(before)}, "
             f"after {fmt_int(after)}  " + s.dim(f"({fmt_ms(replay_s)}, nothing written)"))
    timings["replay"] = replay_s

    # 5. upsert ----------------------------------------------------------------------------------
    device = device_name(41 if args.devices >= 42 else 0)
    tour.step(f"A late correction for {device}: dedup='last' upserts by (device_id, time)")
    last = lake.sql(
        f"SELECT * FROM {TABLE} WHERE device_id = '{device}' ORDER BY time DESC LIMIT 1"
    )
    row = last.to_pylist()[0]
    fixed = dict(row, temp=round(row["temp"] - 0.5, 3))
    correction = pa.Table.from_pylist([fixed], schema=SCHEMA)
    tour.code(f't.append(corrected_reading, batch_id="recalibration-{device}")')
    r, upsert_s = timed(t.append, correction, batch_id=f"recalibration-{device}")
    check = lake.sql(
        f"SELECT count(*) AS n, max(temp) AS temp FROM {TABLE} "
        f"WHERE device_id = '{device}' AND time = TIMESTAMPTZ '{row['time'].isoformat()}'"
    ).to_pylist()[0]
    ok = check["n"] == 1 and check["temp"] is not None and abs(check["temp"] - fixed["temp"]) < 1e-9
    mark = s.green(s.check) if ok else s.red("x")
    tour.say(f"{mark} reading at {fmt_cell(row['time'], '%Y-%m-%d %H:%M:%S')}: temp {row['temp']:.3f} {s.arrow} "
             f"{check['temp']:.3f}, still {check['n']} row  " + s.dim(f"({fmt_ms(upsert_s)})"))
    timings["upsert"] = upsert_s

    # 6. maintain -------------------------------------------------------------------------------
    tour.step("Tidy up: maintain() compacts the uploads into one sorted file per day")
    tour.code("t.maintain()")
    files_before = t.info()["size"]["files"]
    tidy, tidy_s = timed(t.maintain)
    timings["maintain"] = tidy_s
    files_after = t.info()["size"]["files"]
    tour.say(f"{s.green(s.check)} {fmt_int(files_before)} files {s.arrow} {fmt_int(files_after)}, "
             f"{tidy['partitions_compacted']} days rewritten, {fmt_int(tidy['rows_rewritten'])} rows, "
             f"{tidy['duplicates_removed']} replaced reading removed for good  "
             + s.dim(f"({fmt_ms(tidy_s)})"))
    tour.say(s.dim("Queries never showed the duplicate; now no other engine sees it either."))

    # 7. hourly query ----------------------------------------------------------------------------
    tour.step(f"Hourly temperature of {device} (time_bucket)")
    hourly_sql = f"""
SELECT time_bucket(INTERVAL '1 hour', time) AS hour, avg(temp) AS temp
FROM {TABLE} WHERE device_id = '{device}' GROUP BY 1 ORDER BY 1
"""
    tour.code(hourly_sql)
    hourly, hourly_s = timed(lake.sql, hourly_sql)
    timings["hourly"] = hourly_s
    print(render_table(s, hourly, limit=4))
    temps = hourly.column("temp").to_pylist()
    hours = hourly.column("hour").to_pylist()
    if temps:
        lo_t, hi_t = min(temps), max(temps)
        by_day = {}
        for h, v in zip(hours, temps):
            h = h.astimezone(dt.timezone.utc)
            by_day.setdefault(h.date(), [None] * 24)[h.hour] = v
        print()
        tour.say(s.dim(f"{'day':<10}  00h{' ' * 18}23h   each bar is one hour, {lo_t:.1f}–{hi_t:.1f} °C"
                       if s.unicode else
                       f"{'day':<10}  00h{' ' * 18}23h   each bar is one hour, {lo_t:.1f}-{hi_t:.1f} C"))
        for day, vals in sorted(by_day.items()):
            present = [v for v in vals if v is not None]
            tour.say(f"{day}  {s.cyan(sparkline(s, vals, lo_t, hi_t))}  "
                     + s.dim(f"min {min(present):5.1f}  max {max(present):5.1f}"))
    tour.say(s.dim(f"{hourly.num_rows} hours in {fmt_ms(hourly_s)}"))

    # 8. daily aggregate -------------------------------------------------------------------------
    tour.step("Daily fleet report over all devices")
    daily_sql = f"""
SELECT time_bucket(INTERVAL '1 day', time) AS day,
       count(*) AS readings, count(DISTINCT device_id) AS devices,
       avg(temp) AS avg_temp, max(temp) AS max_temp,
       avg(humidity) AS avg_humidity, min(battery) AS min_battery
FROM {TABLE} GROUP BY 1 ORDER BY 1
"""
    tour.code(daily_sql)
    daily, daily_s = timed(lake.sql, daily_sql)
    timings["daily"] = daily_s
    print(render_table(s, daily))
    tour.say(s.dim(f"{fmt_int(sum(daily.column('readings').to_pylist()))} readings aggregated "
                   f"in {fmt_ms(daily_s)}"))

    # 9. latest + info ---------------------------------------------------------------------------
    tour.step("The newest reading of every device, and the table's vital signs")
    tour.code(f'lake.latest("{TABLE}")')
    latest, latest_s = timed(lake.latest, TABLE)
    timings["latest"] = latest_s
    print(render_table(s, latest.sort_by("device_id"),
                       columns=[c for c in SCHEMA.names if c in latest.column_names], limit=5))
    t.refresh()
    info, info_s = timed(t.info)
    lvi = info.get("last_value_index") if isinstance(info, dict) else None
    lvi_series = int(lvi.get("series", 0) or 0) if isinstance(lvi, dict) else 0
    how_latest = " (from the last-value index, not a scan)" if lvi_series >= latest.num_rows > 0 else ""
    tour.say(s.dim(f"{fmt_int(latest.num_rows)} series in {fmt_ms(latest_s)}{how_latest}"))
    print()
    tour.code("t.info()")
    for key, value in flatten(info):
        tour.say(f"{s.dim(pad(key, 28))} {value}")

    # summary ------------------------------------------------------------------------------------
    size = info.get("size", {}) if isinstance(info, dict) else {}
    rows_on_disk = int(size.get("rows", 0) or 0)
    disk_bytes = int(size.get("bytes", 0) or 0)
    lines = [
        f"{s.bold(pad('ingest', 14))}{pad(fmt_int(table.num_rows) + ' rows', 18)}"
        f"{pad(f'{len(batches)} batches', 14)}{pad(f'{ingest_s:.2f} s', 11, '>')}   "
        + s.green(s.bold(fmt_rate(table.num_rows, ingest_s))),
        f"{s.bold(pad('replay', 14))}{pad('same batch id', 18)}{pad('duplicate', 14)}"
        f"{pad(fmt_ms(replay_s), 11, '>')}   {s.dim('nothing written')}",
        f"{s.bold(pad('upsert', 14))}{pad('1 late reading', 18)}{pad('replaced', 14)}"
        f"{pad(fmt_ms(upsert_s), 11, '>')}   {s.dim('no duplicate rows')}",
        f"{s.bold(pad('maintain', 14))}{pad(f'{files_before} files', 18)}{pad(f'{files_after} files', 14)}"
        f"{pad(fmt_ms(tidy_s), 11, '>')}   {s.dim('compacted, deduplicated')}",
        f"{s.bold(pad('hourly query', 14))}{pad(device, 18)}{pad(f'{hourly.num_rows} hours', 14)}"
        f"{pad(fmt_ms(hourly_s), 11, '>')}",
        f"{s.bold(pad('daily report', 14))}{pad(f'{args.devices} devices', 18)}"
        f"{pad(f'{daily.num_rows} days', 14)}{pad(fmt_ms(daily_s), 11, '>')}",
        f"{s.bold(pad('latest()', 14))}{pad(f'{latest.num_rows} series', 18)}{pad('1 row each', 14)}"
        f"{pad(fmt_ms(latest_s), 11, '>')}",
    ]
    if rows_on_disk and disk_bytes:
        lines.append(
            f"{s.bold(pad('on disk', 14))}{pad(fmt_int(rows_on_disk) + ' rows', 18)}"
            f"{pad(str(size.get('files', '?')) + ' files', 14)}{pad(fmt_bytes(disk_bytes), 11, '>')}   "
            + s.dim(f"{disk_bytes / rows_on_disk:.1f} B/row, "
                    f"{table.nbytes / disk_bytes:.1f}x smaller than in memory")
        )
    print()
    print(box(s, "timelake demo summary", lines))
    print()
    print(s.dim("It is a Delta Lake table, so other engines read the same folder:"))
    print(s.dim(f"    deltalake.DeltaTable({t.location!r}).to_pyarrow_table()"))
    print(s.dim(f"Try your own queries:  lake = timelake.Lake({str(lake_dir)!r}); lake.sql(\"...\")"))
    print()
    return 0


def flatten(value, prefix=""):
    """Yield (dotted key, text) pairs of a nested dict, for printing info()."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        if isinstance(value, int) and not isinstance(value, bool):
            text = fmt_int(value)
        elif isinstance(value, (list, tuple)):
            text = ", ".join(str(v) for v in value) if value else "[]"
        else:
            text = str(value)
        yield prefix, text


if __name__ == "__main__":
    main()
