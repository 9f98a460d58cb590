"""NVIDIA nccl-tests' all_reduce_perf output, read into the same comparison as the on-rank
microbenchmark.

Two formats, both as nccl-tests writes them (src/util.cu, version 2.19): the table printed on stdout

#       size         count      type   redop    root     time   algbw   busbw  #wrong     time
algbw   busbw  #wrong #        (B)    (elements)                               (us)  (GB/s)  (GB/s)
(us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    43.51   24.10   42.17       0    43.10
     24.33   42.58       0

(older builds have no `root` column and say `error` for `#wrong`; -R/per-iteration builds add i_*
columns: columns are found by name), and the JSON file of `-J file.json` (JSON_FILE_VERSION 3:
results[].in_place.time / alg_bw / bus_bw). Times are microseconds; GB = 1e9 bytes, as in
nccl-tests' doc/PERFORMANCE.md."""

from __future__ import annotations

from base.record import Record
from base.record_types import CommStats, TrainResult, result_from_dict
import json
import math
import re
from pathlib import Path

from stats.fmt import ms
from comm.efficiency import bus_factor, call_sizes, not_measurable, versus_sync


class NcclTestsError(ValueError):
    pass


def read(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise NcclTestsError(f"--nccl-tests {path}: cannot read it ({e.strerror or e})") from None
    parsed = parse(text)
    parsed["file"] = str(path)
    return parsed


def parse(text: str) -> dict:
    if text.lstrip().startswith("{"):
        try:
            return _parse_json(json.loads(text))
        except json.JSONDecodeError as e:
            raise NcclTestsError(f"nccl-tests JSON does not parse: {e}") from None
    return _parse_table(text)


def _parse_table(text: str) -> dict:
    header: list[str] | None = None
    rows, ranks, out = (
        [],
        0,
        {"format": "table", "program": None, "version": None, "avg_busbw_GBps": None},
    )
    for line in text.splitlines():
        if line.startswith("#"):
            body = line[1:].split()
            if body[:1] == ["size"]:
                header = body
            elif re.match(r"#\s+Rank\s+\d+", line):
                ranks += 1
            elif m := re.match(r"#\s*Collective test starting:\s*(\S+)", line):
                out["program"] = m.group(1)
            elif m := re.match(r"#\s*nccl-tests version\s+(\S+)", line):
                out["version"] = m.group(1)
            elif m := re.match(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", line):
                out["avg_busbw_GBps"] = float(m.group(1))
            continue
        tokens = line.split()
        if header is None or len(tokens) < len(header) - 1 or not tokens[0].isdigit():
            continue
        rows.append(_table_row(header, tokens))
    if not rows:
        raise NcclTestsError(
            "no nccl-tests result rows found: expected all_reduce_perf's table (a '#  size  count "
            "type ...' header, then one line per size) or its -J JSON file"
        )
    out.update(ranks=ranks or None, rows=rows)
    _check_all_reduce(out)
    return out


def _table_row(header: list[str], tokens: list[str]) -> dict:
    timed = [i for i, h in enumerate(header) if h in ("time", "cputime")]
    row = {
        "bytes": int(tokens[header.index("size")]),
        "count": int(tokens[header.index("count")]),
        "type": tokens[header.index("type")] if "type" in header else None,
        "redop": tokens[header.index("redop")] if "redop" in header else None,
    }
    for name, i in zip(("out_of_place", "in_place"), timed):
        row[name] = {
            "time_us": _num(tokens[i]),
            "algbw_GBps": _num(tokens[i + 1]),
            "busbw_GBps": _num(tokens[i + 2]),
            "wrong": _num(tokens[i + 3]) if i + 3 < len(tokens) else None,
        }
    return row


def _num(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:  # "N/A" (#wrong without -c)
        return None


def _parse_json(doc: dict) -> dict:
    if "results" not in doc:
        raise NcclTestsError(
            "nccl-tests JSON has no 'results' list (written by `-J file.json`, nccl-tests >= 2.16)"
        )
    rows = []
    for r in doc["results"]:
        row = {
            "bytes": int(r["size"]),
            "count": int(r["count"]),
            "type": r.get("type"),
            "redop": r.get("redop"),
        }
        for name in ("out_of_place", "in_place"):
            x = r.get(name)
            if x:
                row[name] = {
                    "time_us": _json_num(x.get("time", x.get("cpu_time"))),
                    "algbw_GBps": _json_num(x.get("alg_bw")),
                    "busbw_GBps": _json_num(x.get("bus_bw")),
                    "wrong": _json_num(x.get("nwrong")),
                }
        rows.append(row)
    if not rows:
        raise NcclTestsError("nccl-tests JSON has an empty 'results' list")
    args = doc.get("args") or []
    cfg = doc.get("config") or {}
    # one "devices" entry per process (its first rank's line), each process running nthreads x ngpus
    # ranks
    ranks = (
        len(cfg.get("devices") or []) * int(cfg.get("nthreads") or 1) * int(cfg.get("ngpus") or 1)
    )
    out = {
        "format": "json",
        "program": Path(args[0]).name if args else None,
        "version": doc.get("version"),
        "nccl_version": doc.get("nccl_version"),
        "ranks": ranks or None,
        "avg_busbw_GBps": _json_num((doc.get("average_bus_bandwidth") or {}).get("bandwidth")),
        "rows": rows,
    }
    _check_all_reduce(out)
    return out


def _json_num(x) -> float | None:
    try:
        v = float(x)  # "nan" is written as a string
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _check_all_reduce(parsed: dict) -> None:
    program = parsed.get("program") or ""
    if program and "all_reduce" not in program:
        raise NcclTestsError(f"this is {program} output; the comparison needs all_reduce_perf's")
    if any(r.get("redop") == "none" for r in parsed["rows"]):
        raise NcclTestsError(
            "these rows have redop 'none' (not an all-reduce); the comparison needs all_reduce_perf"
        )


# ----------------------------------------------------------------------------------- the comparison
def time_at(parsed: dict, nbytes: int, world_size: int) -> float:
    """Seconds for one all_reduce of nbytes at nccl-tests' measured speed (in-place rows, as DDP
    reduces its buckets in place): log-log interpolation between measured sizes; below the smallest,
    its time (latency-bound); above the largest, its busbw (bandwidth-bound). With a different rank
    count the busbw, not the time, is carried over."""
    pts = sorted(
        (r["bytes"], (r.get("in_place") or r["out_of_place"]))
        for r in parsed["rows"]
        if r["bytes"] > 0
    )
    pts = [(b, x) for b, x in pts if x.get("time_us") and x["time_us"] > 0]
    if not pts:
        raise NcclTestsError("no positive times in the nccl-tests rows")
    same_ranks = parsed.get("ranks") in (None, world_size)
    factor = bus_factor(world_size)

    def seconds(b: int, x: dict) -> float:
        if same_ranks or not x.get("busbw_GBps") or factor == 0:
            return x["time_us"] * 1e-6
        return b / (x["busbw_GBps"] / factor * 1e9)

    if nbytes <= pts[0][0]:
        return seconds(*pts[0])
    if nbytes >= pts[-1][0]:
        b, x = pts[-1]
        return seconds(b, x) * nbytes / b
    for (b0, x0), (b1, x1) in zip(pts, pts[1:]):
        if b0 <= nbytes <= b1:
            t0, t1 = seconds(b0, x0), seconds(b1, x1)
            w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))
    raise AssertionError("unreachable")


def sync_calls(result: TrainResult | dict) -> tuple[list[tuple[int, int]], str]:
    """The calls one synchronisation makes, from the record: the microbenchmark's sizes when it ran,
    else DDP's buckets (scaled to the bytes really sent, for compression hooks), flat's one call, or
    per_param's average call. (A reader still on dicts may pass the result's JSON.)"""
    r = TrainResult.from_dict(result, "result") if isinstance(result, dict) else result
    micro = r.microbench.sizes if r.microbench is not None else None
    if micro:
        return [(m.bytes, m.calls) for m in micro], "the sizes the on-rank microbenchmark timed"
    comm = r.comm if r.comm is not None else CommStats()
    sent = comm.bytes_per_step
    buckets = r.ddp.buckets.sizes_bytes if r.ddp is not None and r.ddp.buckets is not None else None
    if r.sync == "ddp" and buckets:
        scale = sent / sum(buckets) if sent else 1.0
        return call_sizes(
            [int(b * scale) for b in buckets]
        ), "DDP's buckets (scaled to the bytes sent)"
    n = int(comm.collectives_per_step or 0)
    if sent and n:
        return [(int(sent // n), n)], (
            "one call of the whole gradient"
            if n == 1
            else f"{n} calls of the average size (the record does not list each call's size)"
        )
    return [], "no communication in the record"


def versus(record: Record | dict, parsed: dict) -> dict | None:
    """The record's sync against a parsed nccl-tests file (a reader still on dicts may pass the
    record's JSON)."""
    result = (
        record.result
        if isinstance(record, Record)
        else result_from_dict("train", record.get("result"))
    )
    if not isinstance(result, TrainResult) or result.comm is None:
        return None
    comm = result.comm
    world = int(result.world_size or 1)
    calls, how = sync_calls(result)
    if not calls or not comm.time_s or world < 2:
        return None
    rows = [
        {"bytes": b, "calls": n, "time_s": time_at(parsed, b, world), "ci_lo": None, "ci_hi": None}
        for b, n in calls
    ]
    vs = versus_sync(
        "nccl-tests file",
        rows,
        comm.time_s,
        comm.bytes_per_step,
        world,
        comm.method if comm.has("method") else "",
        comm.overlap_s,
    )
    if vs is not None:
        vs.update(
            file=parsed.get("file"),
            file_ranks=parsed.get("ranks"),
            sizes_from=how,
            per_size=[
                {"bytes": r["bytes"], "calls": r["calls"], "time_s": r["time_s"]} for r in rows
            ],
        )
        if parsed.get("ranks") not in (None, world):
            vs["method"] += (
                f"; nccl-tests ran {parsed['ranks']} ranks and this run {world}: its busbw is "
                "carried "
                "over, not its time"
            )
    return vs


def format_comparison(vs: dict) -> str:
    took = (
        f"the all-reduces spanned {ms(vs['sync_s'])} ms per step ({ms(vs['overlap_s'])} ms of it "
        "beside backward, "
        "waits for gradients included, so the efficiency is a lower bound)"
        if vs.get("overlap_s")
        else f"the sync took {ms(vs['sync_s'])} ms per step"
    )
    efficiency = not_measurable(vs) or (
        f"{100 * vs['efficiency']:.0f}%"
        + (
            f" [{100 * vs['efficiency_ci_lo']:.0f}, {100 * vs['efficiency_ci_hi']:.0f}]"
            if vs.get("efficiency_ci_lo") is not None
            else " (no interval)"
        )
    )
    lines = [
        f"comm vs {vs['reference']}: {took}; the same "
        f"{vs['calls']} call(s) ({vs['bytes'] / 2**20:.1f} MiB) take {ms(vs['achievable_s'])} ms "
        "there: "
        f"efficiency {efficiency}"
        + (
            f"; busbw {vs['sync_busbw_GBps']:.3g} vs {vs['reference_busbw_GBps']:.3g} GB/s"
            if vs.get("reference_busbw_GBps")
            else ""
        )
    ]
    if vs.get("one_call_of_total_s"):
        lines.append(
            f"  one all_reduce of the whole gradient alone: {ms(vs['one_call_of_total_s'])} ms "
            "(the VGG11 thread's nccl-tests comparison)"
        )
    lines.append(f"  ({vs['method']})")
    return "\n".join(lines)


def format_table(parsed: dict) -> str:
    """The parsed nccl-tests rows, for `python -m diagnosis --nccl-tests FILE` alone."""
    program = parsed.get("program") or "all_reduce_perf"
    lines = [
        f"nccl-tests {program} ({parsed['format']}, {parsed.get('ranks') or '?'}"
        f" ranks): {len(parsed['rows'])} sizes; avg busbw {parsed.get('avg_busbw_GBps')} GB/s",
        f"{'size B':>14} {'in-place us':>12} {'algbw':>8} {'busbw':>8}",
    ]
    for r in parsed["rows"]:
        x = r.get("in_place") or r["out_of_place"]
        lines.append(
            f"{r['bytes']:>14} {x['time_us']:>12} {x['algbw_GBps']:>8} {x['busbw_GBps']:>8}"
        )
    return "\n".join(lines)
