"""The cost of one all-reduce: an alpha-beta model, fitted to measurements or taken from a preset
with its source.

Ring all-reduce of S bytes over n ranks: t(S, n) = 2(n-1) alpha + 2(n-1)/n * S / B, with B the
busbw nccl-tests reports; presets that say `tree` take the faster of that and NCCL's tree, and a
measured nccl-tests table for the same rank count is interpolated directly
(comm.nccl_tests.time_at).
Fits are weighted least squares (relative error), their intervals a seeded parametric bootstrap
over each point's measured interval. gloo on CPU does its reduction and copies on the host, so a
collective never runs faster than the host can do it: the record's own fit is that floor, and the
time behind a link preset or an emulated rate is the larger of the two. The formulas and the fit:
docs/whatif.md "The step model in detail".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from base.record import Record
from base.record_types import CollectivesResult, TrainResult
from comm.bandwidth import bus_factor
from whatif.quantity import Quantity

GB = 1e9
TCP_PAYLOAD = (
    1448 / 1538
)  # TCP/IPv4 payload per 1500-byte-MTU Ethernet frame on the wire (timestamps on)


@dataclass(frozen=True)
class Link:
    name: str
    alpha: Quantity  # seconds per ring step
    busbw: Quantity  # bytes per second
    source: str
    tree: bool = False
    measured_ranks: int | None = None
    nccl_table: dict | None = (
        None  # parsed nccl-tests output (comm.nccl_tests): interpolated at its rank count
    )
    floor: "Link | None" = None  # the host's own cost (gloo on CPU), see the module docstring
    notes: tuple[str, ...] = field(default_factory=tuple)
    same_host: bool = False  # an emulated link: the ranks still share one machine's cores

    def time(self, nbytes, n: int, alpha, busbw):
        """Seconds for one all-reduce of nbytes on n ranks, for drawn alpha and busbw (arrays or
        floats)."""
        if n < 2 or not nbytes:
            return 0.0 * np.asarray(alpha, dtype=float)
        if self.nccl_table is not None and self.nccl_table.get("ranks") in (None, n):
            from comm.nccl_tests import time_at

            # the table's point time, scaled by this draw's relative uncertainty (busbw's draw / its
            # point value)
            return time_at(self.nccl_table, int(nbytes), n) * (
                self.busbw.value / np.asarray(busbw, dtype=float)
            )
        ring = 2 * (n - 1) * alpha + bus_factor("all_reduce", n) * nbytes / busbw
        if not self.tree:
            return ring
        tree = 2 * math.ceil(math.log2(n)) * alpha + bus_factor("all_reduce", n) * nbytes / busbw
        return np.minimum(ring, tree)

    def point_time(self, nbytes: int, n: int) -> float:
        return float(self.time(nbytes, n, self.alpha.value, self.busbw.value))

    def describe(self) -> str:
        what = f"alpha {self.alpha.text(1e6, 'us')}, busbw {self.busbw.text(1 / GB, 'GB/s')}" + (
            " (ring or tree, the faster)" if self.tree else " (ring)"
        )
        if self.nccl_table is not None:
            what = (
                f"nccl-tests table, {self.nccl_table.get('ranks') or '?'} ranks, interpolated; "
                f"beyond it {what}"
            )
        floor = f"; host floor: {self.floor.name}" if self.floor else ""
        return f"{self.name}: {what}; source: {self.source}{floor}"


# --------------------------------------------------------------------------------------------- fits
def fit_alpha_beta(
    points: list[tuple[float, float, float | None, float | None]],
    n: int,
    *,
    name: str,
    source: str,
    resamples: int = 2000,
    seed: int = 0,
) -> Link:
    """points: (bytes, seconds, ci_lo, ci_hi) of one all-reduce each, measured on n ranks."""
    if n < 2:
        raise ValueError("an all-reduce fit needs measurements on 2 or more ranks")
    pts = [(float(b), float(t), lo, hi) for b, t, lo, hi in points if b > 0 and t and t > 0]
    if not pts:
        raise ValueError(f"{name}: no all-reduce times to fit")
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    a, b = _wls(x, y)
    notes = []
    if len(set(x)) < 2:
        notes.append(
            "one message size only: alpha cannot be separated from the bandwidth; alpha taken as 0"
        )
        a, b = 0.0, float(y[0] / x[0])
    alpha, busbw = _to_alpha_busbw(a, b, n)
    if a < 0:
        notes.append(
            "the fit's intercept was negative (bandwidth-bound sizes only): alpha taken as 0"
        )
    rng = np.random.default_rng(seed)
    have_ci = all(p[2] is not None and p[3] is not None and p[3] > p[2] for p in pts)
    draws_a, draws_b = [], []
    if len(set(x)) >= 2:
        qs = [
            Quantity(t, lo, hi) if have_ci and lo <= t <= hi else Quantity.exact(t)
            for _, t, lo, hi in pts
        ]
        for _ in range(resamples):
            if have_ci:
                ys = np.array([q.sample(rng, 1)[0] for q in qs])
                xs = x
            else:
                idx = rng.integers(0, len(x), len(x))
                xs, ys = x[idx], y[idx]
                if len(set(xs)) < 2:
                    continue
            ra, rb = _wls(xs, ys)
            ra_alpha, ra_bw = _to_alpha_busbw(ra, rb, n)
            if math.isfinite(ra_bw) and ra_bw > 0:
                draws_a.append(ra_alpha)
                draws_b.append(ra_bw)
    how = "per-point intervals redrawn" if have_ci else "points resampled"
    if not math.isfinite(busbw) and len(draws_b) >= 100:
        # the times do not grow with the bytes at the point (small sizes, all latency): the
        # bandwidth is what the draws that do resolve it say, their median the point
        alpha, busbw = float(np.median(draws_a)), float(np.median(draws_b))
        notes.append(
            "the sizes do not resolve the bandwidth (the fitted time does not grow with the "
            "bytes): alpha "
            "and busbw are the medians of the bootstrap fits that resolve it"
        )
    if len(draws_b) >= 100:
        alo, ahi = np.percentile(draws_a, [2.5, 97.5])
        blo, bhi = np.percentile(draws_b, [2.5, 97.5])
        q_alpha = Quantity(
            alpha, min(alpha, float(alo)), max(alpha, float(ahi)), f"{name} alpha ({how})"
        )
        q_bw = Quantity(
            busbw, min(busbw, float(blo)), max(busbw, float(bhi)), f"{name} busbw ({how})"
        )
    else:
        q_alpha, q_bw = (
            Quantity.exact(alpha, f"{name} alpha"),
            Quantity.exact(busbw, f"{name} busbw"),
        )
        notes.append("too few sizes for an interval on the fit")
    return Link(
        name=name,
        alpha=q_alpha,
        busbw=q_bw,
        measured_ranks=n,
        source=f"{source}; weighted least squares t = a + b S over {len(pts)} sizes "
        f"({int(min(x))}-{int(max(x))} B), 95% interval by bootstrap ({how})",
        notes=tuple(notes),
    )


def _wls(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    w = 1 / y**2
    sw = w.sum()
    mx, my = (w * x).sum() / sw, (w * y).sum() / sw
    sxx = (w * (x - mx) ** 2).sum()
    if sxx <= 0:
        return 0.0, float(my / mx)
    b = float((w * (x - mx) * (y - my)).sum() / sxx)
    return float(my - b * mx), b


def _to_alpha_busbw(a: float, b: float, n: int) -> tuple[float, float]:
    alpha = max(a, 0.0) / (2 * (n - 1))
    busbw = bus_factor("all_reduce", n) / b if b > 0 else float("inf")
    return alpha, busbw


def from_microbench(result: TrainResult) -> Link | None:
    """The record's on-rank microbenchmark: the sync's own all-reduce sizes, alone, on the run's
    ranks."""
    micro = result.microbench
    rows = (micro.sizes if micro is not None else None) or []
    n = int(result.world_size or 1)
    if not rows or n < 2:
        return None
    pts = []
    for r in rows + [x for x in (micro.total, micro.latency) if x]:  # latency: one element, alone
        t = r.time_s
        ok = t is not None and (t.ci_level or 0) >= 0.75
        pts.append(
            (
                r.bytes,
                t.median if t is not None else None,
                t.ci_lo if ok else None,
                t.ci_hi if ok else None,
            )
        )
    return fit_alpha_beta(
        pts,
        n,
        name="this run's ranks",
        source="the record's on-rank microbenchmark "
        f"(result.microbench: {len(rows)} sizes, {micro.iters} timed calls each)",
    )


def from_collectives(record: Record) -> Link:
    """A task=collectives record: its in-place all_reduce rows (median over 8 blocks and its
    interval)."""
    r = record.result if record.result is not None else CollectivesResult()
    n = int(r.world_size or 1)
    rows = [x for x in r.rows or [] if x.op == "all_reduce" and x.mode == "in_place"]
    if not rows:
        raise ValueError(
            "the collectives record has no in-place all_reduce rows (collectives.ops must hold "
            "all_reduce)"
        )
    pts = []
    for x in rows:
        t = (x.time_median_us or x.time_us) * 1e-6
        lo, hi = x.time_ci_lo_us, x.time_ci_hi_us
        pts.append(
            (
                x.bytes,
                t,
                lo * 1e-6 if lo is not None else None,
                hi * 1e-6 if hi is not None else None,
            )
        )
    host = ", ".join(record.env.hostnames or []) or "?"
    return fit_alpha_beta(
        pts,
        n,
        name=f"task=collectives on {host}",
        source=f"task=collectives record ({n} ranks, {r.backend}, {r.device_name})",
    )


def from_nccl_tests(parsed: dict, rel: float = 0.05) -> Link:
    """nccl-tests all_reduce_perf output: interpolated at its own rank count, alpha-beta fitted for
    any other."""
    rows = [r for r in parsed["rows"] if r["bytes"] > 0]
    n = int(parsed.get("ranks") or 0)
    pts = []
    for r in rows:
        x = r.get("in_place") or r.get("out_of_place") or {}
        if x.get("time_us"):
            pts.append((r["bytes"], x["time_us"] * 1e-6, None, None))
    fit = fit_alpha_beta(
        pts, max(n, 2), name="nccl-tests", source=f"nccl-tests file {parsed.get('file') or ''}"
    )
    notes = fit.notes + (
        f"nccl-tests prints one mean per size without an interval: +-{rel:.0%} assumed "
        "(run-to-run spread of all_reduce_perf)",
    )
    if not n:
        notes += ("the file does not say how many ranks ran: 2 assumed for the fit",)
    return replace(
        fit,
        name=f"nccl-tests ({n or '?'} ranks)",
        nccl_table=parsed,
        busbw=fit.busbw.with_extra(rel, "nccl-tests busbw"),
        notes=notes,
    )


# ------------------------------------------------------------------------------------------ presets
@dataclass(frozen=True)
class Preset:
    name: str
    what: str
    busbw_GBps: tuple[float, float, float]  # point, lo, hi
    alpha_us: tuple[float, float, float]
    source: str
    tree: bool = False

    def link(self) -> Link:
        b, blo, bhi = self.busbw_GBps
        a, alo, ahi = self.alpha_us
        return Link(
            name=self.name,
            alpha=Quantity(a * 1e-6, alo * 1e-6, ahi * 1e-6, f"{self.name} alpha (stated)"),
            busbw=Quantity(b * GB, blo * GB, bhi * GB, f"{self.name} busbw"),
            source=self.source,
            tree=self.tree,
        )


def _ethernet(gbit: float, name: str, standard: str) -> Preset:
    line = gbit / 8
    return Preset(
        name,
        f"{gbit:g} Gbit/s Ethernet, TCP sockets",
        (line * TCP_PAYLOAD, line * 0.80, line * 0.95),
        (50.0, 20.0, 100.0),
        f"line rate {gbit:g} Gbit/s ({standard}); busbw = line rate x TCP/IPv4 payload per frame "
        "(1448 of 1538 bytes on the wire, 94%), interval 80-95% of line rate; alpha: a TCP hop, "
        "20-100 us "
        "(a 4-byte gloo all-reduce across one veth took 90-160 us for its 2 steps here)",
    )


def _infiniband(gbit: float, name: str, generation: str) -> Preset:
    line = gbit / 8
    return Preset(
        name,
        f"{gbit:g} Gb/s InfiniBand {generation}, one NIC per rank, GPUDirect RDMA",
        (line * 0.92, line * 0.80, line * 0.96),
        (5.0, 2.0, 10.0),
        f"{generation} line rate {gbit:g} Gb/s (InfiniBand Trade Association specification); "
        "achieved "
        "fraction 0.92 [0.80, 0.96] of line rate: NVIDIA/nccl-tests#252 shows 4 x 200 Gb/s HDR "
        "NICs at "
        "95.3 GB/s all_reduce busbw (23.8 GB/s per NIC, 0.95 of line rate); alpha 5 [2, 10] us per "
        "step "
        "(stated: an RDMA hop plus NCCL's proxy)",
        tree=True,
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "nvlink_a100",
            "8 x A100 SXM4 with NVSwitch (p4d/p4dn, DGX A100), NCCL over NVLink",
            (230.8, 200.0, 240.0),
            (1.0, 0.5, 3.0),
            "NVIDIA/nccl#527 (GitHub issue 'Slow bus bandwidth w/ nccl 2.9.9 on EC2 instances', "
            "2022): all_reduce_perf "
            "on one p4dn.24xlarge, 1 GiB in place in 8141 us, busbw 230.8 GB/s; interval 200-240 "
            "GB/s stated (NCCL "
            "versions, message size); alpha 1 [0.5, 3] us per step stated (NVLink hops)",
        ),
        Preset(
            "pcie_shm",
            "8 PCIe Gen4 GPUs on two CPU sockets without peer-to-peer: NCCL's SHM transport "
            "through host "
            "memory (the L40S box of source 003: 'via SHM/direct/direct')",
            (24.0, 6.0, 35.0),
            (5.0, 2.0, 10.0),
            "NVIDIA/nccl#1130 (GitHub issue 'Inter-NUMA node performance better than intra-NUMA "
            "node with P2P "
            "disabled', 2023): SHM/direct/direct, all_reduce busbw 24 GB/s within one NUMA node "
            "and 35 GB/s across; "
            "low end 6 GB/s from NVIDIA/nccl#1817 (8 x L20, Ada PCIe cards, SHM: average busbw 6.1 "
            "GB/s over 8 B - "
            "512 MB); NCCL's maintainer in NVIDIA/nccl#1639: on PCIe systems the CPU and memory "
            "set the bandwidth; "
            "alpha 5 [2, 10] us stated",
        ),
        _infiniband(100, "ib100", "EDR"),
        _infiniband(200, "ib200", "HDR"),
        _infiniband(400, "ib400", "NDR"),
        _ethernet(10, "10gbe", "IEEE 802.3ae"),
        _ethernet(25, "25gbe", "IEEE 802.3by"),
        _ethernet(1, "1gbe", "IEEE 802.3ab"),
    ]
}


def preset(name: str) -> Link:
    key = name.strip().lower().replace("-", "_")
    if key not in PRESETS:
        raise KeyError(f"unknown link {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[key].link()


# tc counts the Ethernet header but not the preamble and gap: a full 1514-byte frame carries 1448
# payload bytes
TC_PAYLOAD = 1448 / 1514


# gloo's achieved share of a shaped link's rate: median [range] of the share at which the model,
# predicting each 2-rank run behind a shaped link of at most 1 Gbit/s from its unshaped source run,
# gives the run's measured step (python -m whatif.calibrate link_share; LINK_SHARE_HOW). Stated
# before as 0.90 [0.80, 0.956] (0.82-0.93 Gbit/s through a 1 Gbit/s htb pair, DESIGN.md): the
# emulated-link validation then predicted its link-bound rows 3-6% slow, in intervals of -8/+12%.
LINK_SHARE = (0.941, 0.941, 0.949)
LINK_SHARE_HOW = (
    "calibrated on the 3 two-rank 1 Gbit/s runs of results/runs/link_scaling_vgg11 (python -m "
    "whatif.calibrate link_share results/runs/link_scaling_vgg11): their median [range]"
)


def emulated(
    rate_gbit: float, base: Link | None = None, share: tuple[float, float, float] | None = None
) -> Link:
    """A link shaped to rate_gbit (the emulated links: htb on veth pairs): the wire at gloo's
    achieved share of the rate (share, else LINK_SHARE: calibrated; 0.956, the TCP payload share of
    the frames tc counts, its ceiling), alpha from the record's own fit (a veth hop), the record's
    fit kept as the host floor."""
    rate = rate_gbit * GB / 8
    alpha = (
        base.alpha
        if base is not None
        else Quantity(50e-6, 20e-6, 100e-6, "alpha (stated: a TCP hop)")
    )
    v, lo, hi = share or LINK_SHARE
    how = LINK_SHARE_HOW if share is None else "given"
    return Link(
        name=f"shaped {rate_gbit:g} Gbit/s",
        alpha=alpha,
        busbw=Quantity(rate * v, rate * lo, rate * hi, "shaped rate x achieved share"),
        source=f"htb at {rate_gbit:g} Gbit/s; gloo's achieved share {v:.3g} [{lo:.3g}, {hi:.3g}] "
        f"of the rate ({how}; 0.956 = 1448/1514, the TCP payload of the frames tc counts)",
        floor=base,
        same_host=True,
    )


def with_floor(link: Link, floor: Link | None) -> Link:
    return link if floor is None else replace(link, floor=floor)
