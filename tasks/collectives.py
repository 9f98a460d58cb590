"""task=collectives: the nccl-tests-style microbenchmark users compare against.

For each op and message size: `warmup_iters` untimed calls, `iters` back-to-back calls timed in 8
blocks (a barrier before each; time per op = total / iters, nccl-tests' figure; the blocks give the
median time per op its 95% order-statistic interval, the table's last columns), then `check_iters`
separate untimed rounds on inputs whose result is known exactly (comm/check.py) that count wrong
elements. The table has nccl-tests' columns (size, count, type, redop, root, then
time/algbw/busbw/#wrong for out-of-place and in-place), plus the slowest rank's time. Sizes follow
nccl-tests: the buffer for all_reduce/broadcast, the total over ranks for all_gather/reduce_scatter.

torch has no out-of-place all_reduce or broadcast: their out-of-place column times a copy of the
input into the output buffer plus the in-place call (the output says so). Timing buffers hold zeros
(values never grow or overflow over many in-place rounds); check rounds use the exact-result inputs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm import CorrectnessError
from comm import bandwidth as bw
from comm.link import human, is_emulated
from comm.check import count_wrong, expected_output, fill_input
from comm.measure import (
    TIMED_BLOCKS,
    all_gather_single,
    block_sizes,
    gather_all,
    rank_stats,
    reduce_scatter_single,
    resolve_device,
    time_window,
)
from device import synchronize
import base.schema as schema
from device.host import Host, check_buffers, expected_backend
from base.errors import ConfigError
from base.schema import typed
from base.record import Record
from base.record_types import CollectiveRow, CollectivesResult, Link
from stats import describe, fmt_ci

MODES = {"out_of_place": "out-of-place", "in_place": "in-place"}
# the diagnosis rules read train, grad_sync and pair_groups runs (diagnosis/run.py's note)
DIAGNOSED = False
NOISY = 0.5  # the brief view marks a time whose 95% interval is wider than +-50% of it
ROOT = 0
CHECK_CHUNK_BYTES = 128 << 20  # expected values are built in float64 chunks of at most this size


# ------------------------------------------------------------------------------------------- config
def settings(cfg) -> schema.Collectives:
    """cfg.collectives as its typed dataclass (the ranks get a plain dict; the schema checked it
    when composed)."""
    return typed(schema.Collectives, cfg.collectives)


def parse_bytes(value, key: str) -> int:
    """A size in bytes: a whole number, or one with nccl-tests' suffixes K, M, G (powers of 1024),
    e.g. 8G."""
    text = str(value).strip().upper().removesuffix("B")
    scale = 1024 ** ("KMG".index(text[-1]) + 1) if text and text[-1] in "KMG" else 1
    number = text[:-1] if scale > 1 else text
    if not number.isdigit() or int(number) < 1:
        raise ConfigError(
            f"collectives.{key}={value!r}: a size in bytes >= 1, e.g. 1024, 64K, 8M or 8G."
        )
    return int(number) * scale


def sizes(c: schema.Collectives) -> list[int]:
    """The message sizes, as nccl-tests' -b/-e/-f."""
    low, high = parse_bytes(c.min_bytes, "min_bytes"), parse_bytes(c.max_bytes, "max_bytes")
    if low > high:
        raise ConfigError(
            f"collectives.min_bytes={c.min_bytes} is larger than max_bytes={c.max_bytes}."
        )
    return bw.size_list(low, high, c.factor)


def modes(c: schema.Collectives) -> list[str]:
    """inplace: true (in-place), false (out-of-place) or both (both column groups, as nccl-tests
    prints)."""
    found = {
        True: ["in_place"],
        "in_place": ["in_place"],
        False: ["out_of_place"],
        "out_of_place": ["out_of_place"],
        "both": ["out_of_place", "in_place"],
    }.get(c.inplace)
    if found is None:
        raise ConfigError(
            f"collectives.inplace={c.inplace!r}: true (in-place), false (out-of-place) or both "
            "(both column groups, as nccl-tests prints)."
        )
    return found


def element_size(c: schema.Collectives) -> int:
    return bw.element_size(c.dtype.value)


def largest_collective(cfg) -> tuple[int, str]:
    """The largest size of the sweep (the emulated link's timeout check)."""
    return max(sizes(settings(cfg))), "the largest collective"


def check(cfg, submitting: bool = False, host: Host | None = None) -> None:
    host = host or Host.probe()
    c = settings(cfg)
    if not c.ops:
        raise ConfigError(
            "collectives.ops is empty; list at least one of " + ", ".join(bw.OPS) + "."
        )
    largest = max(sizes(c))
    modes(c)
    if c.corrupt_rank is not None and c.corrupt_rank >= cfg.world_size:
        raise ConfigError(
            f"collectives.corrupt_rank={c.corrupt_rank} but the run has {cfg.world_size} ranks. "
            f"Use collectives.corrupt_rank<={cfg.world_size - 1}, or null."
        )
    refused = known_unsupported(expected_backend(cfg, host, submitting), c)
    if refused:
        raise ConfigError(refused)
    check_buffers(
        cfg,
        host,
        key="collectives.device",
        per_rank_bytes=2 * largest + CHECK_CHUNK_BYTES * 3,
        what=f"collectives.max_bytes={c.max_bytes}",
        fix="Lower collectives.max_bytes or the ranks per node",
        submitting=submitting,
    )


def plan_sizes(
    op: str, sizes: list[int], elem: int, world_size: int
) -> tuple[list[tuple[int, int]], str | None]:
    """(requested, used) sizes for one op, and a note when rounding changed any (nccl-tests rounds
    silently)."""
    unit = bw.size_unit(op, elem, world_size)
    planned, seen = [], set()
    for s in sizes:
        r = bw.round_size(s, unit)
        if r not in seen:
            seen.add(r)
            planned.append((s, r))
    changed = [(a, b) for a, b in planned if a != b]
    dropped = len(sizes) - len(planned)
    note = None
    if changed or dropped:
        why = (
            f"{elem} B per element x {world_size} ranks"
            if op in bw.SPLIT_OPS
            else f"{elem} B per element"
        )
        shown = ", ".join(f"{a}->{b}" for a, b in changed[:4]) + (
            " ..." if len(changed) > 4 else ""
        )
        note = f"{op}: sizes rounded down to a multiple of {unit} B ({why}): {shown}"
        if dropped:
            note += f"; {dropped} size(s) fell onto an earlier one and were dropped"
    return planned, note


# ------------------------------------------------------------------------------------------ buffers
class Case:
    """Buffers and the call for one (op, size, mode). `send` is what the check fills, `out` what it
    reads."""

    def __init__(
        self,
        op: str,
        mode: str,
        size: int,
        c: schema.Collectives,
        rank: int,
        world: int,
        device: torch.device,
    ):
        self.op, self.mode, self.rank, self.world = op, mode, rank, world
        self.redop_name = c.reduce_op.value if op in bw.REDUCING_OPS else "none"
        self.redop = getattr(dist.ReduceOp, bw.REDUCE_OPS[c.reduce_op])
        self.counts = bw.counts(op, size, element_size(c), world)
        dtype = bw.DTYPES[c.dtype][0]
        send_n, recv_n = self.counts["send"], self.counts["recv"]
        inplace = mode == "in_place"
        if op == "all_gather" and inplace:
            self.out = torch.zeros(recv_n, dtype=dtype, device=device)
            self.send = self.out.narrow(0, rank * send_n, send_n)  # nccl-tests' in-place offset
        elif op == "reduce_scatter" and inplace:
            self.send = torch.zeros(send_n, dtype=dtype, device=device)
            self.out = self.send.narrow(0, rank * recv_n, recv_n)
        elif inplace:  # all_reduce, broadcast
            self.send = self.out = torch.zeros(send_n, dtype=dtype, device=device)
        else:
            self.send = torch.zeros(send_n, dtype=dtype, device=device)
            self.out = torch.zeros(recv_n, dtype=dtype, device=device)

    def __call__(self) -> None:
        op, send, out = self.op, self.send, self.out
        if op == "all_reduce":
            if out is not send:
                out.copy_(send)
            dist.all_reduce(out, op=self.redop)
        elif op == "broadcast":
            if out is not send and self.rank == ROOT:
                out.copy_(send)
            dist.broadcast(out, src=ROOT)
        elif op == "all_gather":
            all_gather_single(out, send)
        elif op == "reduce_scatter":
            reduce_scatter_single(out, send, op=self.redop)

    def zero(self) -> None:
        self.send.zero_()
        self.out.zero_()


def run_check(
    case: Case, c: schema.Collectives, rounds: int, device: torch.device, corrupt: bool = False
) -> int:
    """Wrong elements on this rank over `rounds` untimed calls with exact-result inputs.
    corrupt=True perturbs one output element after the first call, to show the check catches a wrong
    result."""
    op, rank, world = case.op, case.rank, case.world
    redop = c.reduce_op.value if op in bw.REDUCING_OPS else None
    wrong = 0
    for k in range(rounds):
        salt = 1 + 7 * k
        case.zero()
        if not (
            op == "broadcast" and rank != ROOT
        ):  # non-roots keep zeros: a broadcast that did nothing shows
            fill_input(case.send, redop, rank, world, c.dtype.value, salt)
        case()
        synchronize(device)
        if corrupt and k == 0:
            case.out.view(-1)[0] += 1
        wrong += _compare(case, redop, c.dtype.value, device, salt)
    return wrong


def _compare(case: Case, redop: str | None, dtype: str, device: torch.device, salt: int) -> int:
    recv = case.counts["recv"]
    chunk = max(4096, CHECK_CHUNK_BYTES // 8 // max(1, case.world))
    wrong = 0
    flat = case.out.view(-1)
    for lo in range(0, recv, chunk):
        hi = min(recv, lo + chunk)
        want = expected_output(
            case.op, redop, case.rank, case.world, recv, dtype, device, ROOT, salt, lo, hi
        )
        wrong += count_wrong(flat[lo:hi], want, redop, dtype, case.world)
    return wrong


# ---------------------------------------------------------------------------------------------- run
def run(ctx) -> CollectivesResult | None:
    c = settings(ctx.cfg)
    device = resolve_device(c.device, ctx.backend, ctx.torch_device, ctx.local_rank)
    rank, world = ctx.rank, ctx.world_size
    corrupt = c.corrupt_rank == rank
    ops, wanted, elem = [op.value for op in c.ops], sizes(c), element_size(c)

    entries, notes = [], []
    for op in ops:
        planned, note = plan_sizes(op, wanted, elem, world)
        if note:
            notes.append(note)
        for requested, size in planned:
            for mode in modes(c):
                case = Case(op, mode, size, c, rank, world, device)
                _warm_up(case, c.warmup_iters, ctx.backend, device)
                blocks = [(time_window(case, n, device), n) for n in block_sizes(c.iters)]
                seconds = sum(t * n for t, n in blocks) / c.iters
                wrong = (
                    run_check(case, c, c.check_iters, device, corrupt) if c.check_iters else None
                )
                entries.append(
                    {
                        "op": op,
                        "mode": mode,
                        "requested": requested,
                        "size": size,
                        "counts": case.counts,
                        "seconds": seconds,
                        "wrong": wrong,
                        "blocks": [t for t, _ in blocks],
                    }
                )
                del case
    if any(op in ("all_reduce", "broadcast") for op in ops) and "out_of_place" in modes(c):
        notes.append(
            "out-of-place all_reduce/broadcast: torch has no out-of-place form; timed as a copy "
            "into the "
            "output buffer plus the in-place call"
        )
    if c.warmup_iters == 0:
        notes.append(
            "warmup_iters=0: each case still makes one untimed call first (it probes whether the "
            "backend "
            "can run the op)"
        )
    if c.corrupt_rank is not None:
        notes.append(
            f"collectives.corrupt_rank={c.corrupt_rank}: that rank perturbs one output element in "
            "the "
            "first check round of every case (to show the check catches it)"
        )

    per_rank = gather_all([(e["seconds"], e["wrong"], e["blocks"]) for e in entries])
    result = _result(c, entries, per_rank, notes, ctx, device)
    if (
        result.wrong_total and ctx.is_main
    ):  # only rank 0: its record must be written before peers exit
        raise CorrectnessError(
            f"collectives: {result.wrong_total} wrong elements in the correctness check "
            f"({', '.join(sorted({r.op for r in result.rows if r.wrong}))})",
            result,
        )
    return result if ctx.is_main else None


def _warm_up(case: Case, iters: int, backend: str, device: torch.device) -> None:
    """The first call also tells us whether this backend can run the op at all: an error there that
    is not a communication failure (torch.distributed.DistError) means it cannot, and the user gets
    that plainly."""
    try:
        case()
        synchronize(device)
    except dist.DistError:
        raise
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(
            f"backend {backend} cannot run {case.op} ({MODES[case.mode]}, "
            f"reduce_op={case.redop_name}) on "
            f"{device.type} {case.send.dtype} tensors in torch {torch.__version__}: {msg}. Remove "
            "it from "
            "collectives.ops, or change collectives.dtype / reduce_op / device / backend."
        ) from None
    for _ in range(iters - 1):
        case()
    synchronize(device)


def known_unsupported(backend: str, c: schema.Collectives) -> str | None:
    """Combinations we know a backend refuses, caught before any rank starts."""
    if (
        backend == "gloo"
        and c.reduce_op == "avg"
        and not bw.DTYPES[c.dtype][0].is_floating_point
        and any(op in bw.REDUCING_OPS for op in c.ops)
    ):
        return (
            f"collectives.reduce_op=avg with dtype={c.dtype}: gloo averages in floating point and "
            "cannot "
            "store the result in an integer tensor. Use a float dtype, another reduce_op, or "
            "backend=nccl."
        )
    return None


def _result(c: schema.Collectives, entries, per_rank, notes, ctx, device) -> CollectivesResult:
    """One flat row per (op, size, mode), the shape results/ tables and plots read; summarize()
    pairs the modes."""
    world = ctx.world_size
    rows = []
    for i, e in enumerate(entries):
        times = [r[i][0] for r in per_rank]
        wrongs = [r[i][1] for r in per_rank]
        st = rank_stats(times)
        # per block, the ranks' mean time per call; their median with its order-statistic 95% CI
        blocks = [sum(r[i][2][b] for r in per_rank) / world for b in range(len(per_rank[0][i][2]))]
        d = describe(blocks)
        rows.append(
            CollectiveRow(
                op=e["op"],
                mode=e["mode"],
                bytes=e["size"],
                requested_bytes=e["requested"],
                count=e["counts"]["count"],
                dtype=c.dtype.value,
                redop=c.reduce_op.value if e["op"] in bw.REDUCING_OPS else "none",
                root=ROOT if e["op"] == "broadcast" else -1,
                time_us=st["avg"] * 1e6,
                time_max_us=st["max"] * 1e6,
                slowest_rank=st["slowest_rank"],
                algbw_GBps=bw.algbw(e["size"], st["avg"]),
                busbw_GBps=bw.busbw(e["op"], e["size"], st["avg"], world),
                wrong=None if wrongs[0] is None else int(sum(wrongs)),
                time_median_us=d["median"] * 1e6,
                time_ci_lo_us=d["ci_lo"] * 1e6,
                time_ci_hi_us=d["ci_hi"] * 1e6,
                time_ci_level=d["ci_level"],
                blocks=len(blocks),
            )
        )
    busbws = [r.busbw_GBps for r in rows]
    wrong_total = sum(r.wrong or 0 for r in rows)
    headline = {"ranks": world}
    for op in c.ops:
        last = [r for r in rows if r.op == op][-1]  # largest size, last mode measured
        headline[f"{op} busbw GB/s"] = round(last.busbw_GBps, 4)
    headline["max size B"] = max(r.bytes for r in rows)
    headline["avg busbw GB/s"] = round(sum(busbws) / len(busbws), 4)
    headline["#wrong"] = wrong_total if c.check_iters else None
    return CollectivesResult(
        device=str(device),
        device_name=_device_name(device),
        backend=ctx.backend,
        world_size=world,
        dtype=c.dtype.value,
        reduce_op=c.reduce_op.value,
        ops=[op.value for op in c.ops],
        modes=modes(c),
        warmup_iters=c.warmup_iters,
        iters=c.iters,
        check_iters=c.check_iters,
        timing="CUDA events on the current stream"
        if device.type == "cuda"
        else "time.perf_counter",
        notes=notes,
        rows=rows,
        wrong_total=wrong_total,
        time_per_rank_us=[
            [r[i][0] * 1e6 for r in per_rank] for i in range(len(entries))
        ],  # aligned with rows
        avg_busbw_GBps=sum(busbws) / len(busbws),
        headline=headline,
    )


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return platform.processor() or platform.machine()


# ---------------------------------------------------------------------------------------- summarize
def summarize(record: Record) -> str:
    r: CollectivesResult = record.result
    if r is None or not r.rows:
        return "collectives: no result"
    modes = r.modes
    lines = [
        f"# collectives (nccl-tests style): {r.world_size} ranks, backend {r.backend}, device "
        f"{r.device} "
        f"({r.device_name}), {r.dtype}",
        f"# {r.warmup_iters} warm-up + {r.iters} timed iterations per size in up to {TIMED_BLOCKS} "
        "blocks "
        f"({r.timing}, barrier before each block); {r.check_iters} untimed check round(s); time = "
        "total / iters, "
        "average over ranks; last columns: median over blocks with its 95% order-statistic "
        "interval (8 blocks: 96.9%; "
        "fewer than 6: min-max, below 95%); GB = 1e9 B",
    ]
    group_w = 37
    short = {"out_of_place": "oop", "in_place": "ip"}
    ci = all(x.time_median_us is not None for x in r.rows)
    top = (
        "#"
        + " " * 49
        + "".join(f"{MODES[m]:^{group_w}}" for m in modes)
        + "  slowest rank"
        + (f" ({', '.join(short[m] for m in modes)})" if len(modes) > 1 else "")
        + (
            "   median of blocks [95% CI]"
            + (f" ({', '.join(short[m] for m in modes)})" if len(modes) > 1 else "")
            if ci
            else ""
        )
    )
    head = (
        f"#{'size':>11}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        + "".join(f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}" for _ in modes)
        + "".join(f"  {'time':>7}" for _ in modes)
        + ("".join(f"  {'time':>22}" for _ in modes) if ci else "")
    )
    units = (
        f"#{'(B)':>11}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        + "".join(f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}" for _ in modes)
        + "".join(f"  {'(us)':>7}" for _ in modes)
        + ("".join(f"  {'(us)':>22}" for _ in modes) if ci else "")
    )
    for op in r.ops:
        lines += ["#", f"# {op}", top, head, units]
        by_size: dict[int, dict[str, CollectiveRow]] = {}
        for x in r.rows:
            if x.op == op:
                by_size.setdefault(x.bytes, {})[x.mode] = x
        for size, per_mode in by_size.items():
            first = next(iter(per_mode.values()))
            type_name = bw.DTYPES[first.dtype][1]
            line = (
                f"{size:>12}  {first.count:>12}  {type_name:>8}  {first.redop:>6}  {first.root:>6}"
            )
            for m in modes:
                x = per_mode[m]
                wrong = "N/A" if x.wrong is None else str(x.wrong)
                line += (
                    f"  {bw.fmt_us(x.time_us / 1e6):>7}  {x.algbw_GBps:>6.2f}  {x.busbw_GBps:>6.2f}"
                    f"  {wrong:>6}"
                )
            line += "".join(f"  {bw.fmt_us(per_mode[m].time_max_us / 1e6):>7}" for m in modes)
            if ci:
                line += "".join(
                    f"  {fmt_ci(x.time_median_us, x.time_ci_lo_us, x.time_ci_hi_us):>22}"
                    for x in (per_mode[m] for m in modes)
                )
            lines.append(line)
    ok = "OK" if not r.wrong_total else "FAILED"
    checked = r.check_iters > 0
    lines += [
        f"# Out of bounds values : {r.wrong_total if checked else 'N/A'} "
        f"{ok if checked else '(check off)'}",
        f"# Avg bus bandwidth    : {r.avg_busbw_GBps:.4g} GB/s",
        "#",
    ]
    lines += [f"# note: {n}" for n in r.notes or []]
    lines += [f"# {line}" for line in vs_link(r, record.env.link)]
    return "\n".join(lines)


def brief(record: Record) -> list[str]:
    """The console's view (verbose=false): one row per size, one column pair per op, in-place where
    measured (the call training makes), within 120 columns; the full nccl-tests table is summarize's
    (train.log, verbose=true)."""
    r: CollectivesResult = record.result
    if r is None or not r.rows:
        return ["collectives: no result"]
    mode = "in_place" if "in_place" in (r.modes or []) else (r.modes or ["out_of_place"])[0]
    rows = {(x.op, x.bytes): x for x in r.rows if x.mode == mode}
    sizes = sorted({b for _, b in rows})
    width = 20
    lines = [
        f"collectives: {r.world_size} {r.backend} ranks on {r.device} ({r.device_name}), "
        f"{r.dtype}, "
        f"{MODES[mode]}; per op: time per call (us), busbw (GB/s, 1e9 B/s)",
        f"{'size':>9}" + "".join(f"{op:>{width}}" for op in r.ops),
        f"{'':>9}" + "".join(f"{'us':>{width - 9}}{'GB/s':>9}" for _ in r.ops),
    ]
    noisy = False
    for size in sizes:
        line = f"{_size_text(size):>9}"
        for op in r.ops:
            x = rows.get((op, size))
            if x is None:
                line += f"{'-':>{width}}"
                continue
            wide = (
                x.time_ci_lo_us is not None
                and x.time_ci_hi_us is not None
                and x.time_median_us
                and (x.time_ci_hi_us - x.time_ci_lo_us) / 2 > NOISY * x.time_median_us
            )
            noisy = noisy or bool(wide)
            line += (
                f"{f'{x.time_us:.1f}' + ('~' if wide else ' '):>{width - 9}}{x.busbw_GBps:>9.3f}"
            )
        lines.append(line)
    checked = r.check_iters > 0
    lines.append(
        f"avg busbw {r.avg_busbw_GBps:.4g} GB/s (every op and size, as nccl-tests' 'Avg bus "
        "bandwidth'); "
        + (f"wrong elements: {r.wrong_total}" if checked else "results not checked (check_iters=0)")
    )
    if noisy:
        lines.append(
            f"~: its 95% interval over the blocks is wider than +-{NOISY:.0%} of it: noise (a busy "
            "host, "
            "or calls near the timer's resolution)"
        )
    lines += vs_link(r, record.env.link)
    lines.append(
        "full table (out-of-place too, the slowest rank, each time's interval): train.log, or "
        "verbose=true"
    )
    return lines


def _size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def vs_link(r: CollectivesResult, link: Link | None) -> list[str]:
    """Each op's busbw at its largest size against what the emulated link allows a TCP stream
    (comm/link.py): the check that the shaping works, and how close gloo gets to the link."""
    if not is_emulated(link) or not link.payload_rate_bit_s:
        return []
    allowed = link.payload_rate_bit_s
    out = []
    for op in r.ops:
        rows = [x for x in r.rows if x.op == op]
        largest = max(x.bytes for x in rows)
        best = max(x.busbw_GBps for x in rows if x.bytes == largest)
        out.append(
            f"vs the emulated link: {op} busbw at {largest} B {best * 8:.3g} Gbit/s = "
            f"{best * 8e9 / allowed:.0%} of the {human(allowed)} a TCP stream can carry at "
            f"{human(link.rate_bit_s)} (headers take the rest)"
        )
    return out
