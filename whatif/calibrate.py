"""The model's two calibrated figures, derived from committed records: python -m whatif.calibrate
{fresh_pages,core_scaling} <dirs of run records>

Each is a figure the records under validation do not carry, so it is derived from another set of
records and the validation checks it instead of fitting it. For each target run of the set that the
figure applies to, the value at which the model, predicting the run from its workload's source run
(whatif.validate's choice), gives the run's measured step median (bisection); the figure is their
median, its interval their range.

- fresh_pages (whatif.profile.FRESH_PAGE_S_PER_BYTE): PowerSGD's hook allocates its bucket's size
  twice a step (the clone kept for the error and the new error) and the step frees the previous
  ones, so on CPU every step writes 2 x the gradient's bytes into pages the kernel faults in and
  zeroes; the cost per byte beyond a write into touched memory, for records made before the probe
  timed it (costs.powersgd.fresh_s). From the PowerSGD runs of results/runs/headline_smoke_auto
  (loopback, the quiet 2-core VM); checked by results/runs/link_comm_bound.
- core_scaling (whatif.step.CORE_SCALING): the exponent e in compute time x (cores per rank before
  / after) ** e, when a CPU host holds fewer or more ranks than the source run. From the one-rank
  runs of the loopback records (results/runs/{scaling_vgg11,vgg11_local,vit_ddp_overhead});
  checked by the one-rank rows of results/runs/link_comm_bound.
- link_share (whatif.links.LINK_SHARE): gloo's achieved share of a shaped link's rate, for runs of
  2 ranks or more behind a link of at most 1 Gbit/s predicted from an unshaped source run. From the
  three 2-rank 1 Gbit/s runs of results/runs/link_scaling_vgg11; checked by
  results/runs/link_comm_bound (whose source is itself shaped, so it is no fit of it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from whatif.profile import ProfileError, from_record
from whatif.quantity import Quantity
from whatif.step import Config, PointDraws, predict
from whatif.links import TC_PAYLOAD
from whatif.validate import groups_of, knobs, link_of, plainness, target_config

# The searched ranges: fresh pages up to 10 ns per byte (0.1 GB/s, slower than any page-fault rate
# seen), the scaling exponent from none (0) to twice perfect (2).
# gloo's share of a shaped link's rate from half to the TCP payload ceiling.
RANGES = {"fresh_pages": (0.0, 10e-9), "core_scaling": (0.0, 2.0), "link_share": (0.5, TC_PAYLOAD)}
# The share is the wire's: at 10 Gbit/s the 2-core VM's own all-reduce (the link's floor) binds, so
# a share fitted there fits the floor's error. Runs behind a link at most this fast only.
LINK_SHARE_MAX_BIT_S = 1e9


def _applies(what: str, prof, rec) -> bool:
    k = knobs(rec)
    if what == "fresh_pages":
        return k["optim"] == "powersgd"
    if what == "link_share":  # 2 ranks or more behind a shaped link, from an unshaped source run
        link = link_of(rec)
        return (
            link is not None
            and link.rate_bit_s <= LINK_SHARE_MAX_BIT_S
            and k["world_size"] >= 2
            and link_of(prof.record) is None
        )
    return prof.device == "cpu" and k["world_size"] < prof.world_size and prof.hosts == 1


def _set(what: str, prof, v: float) -> None:
    if what == "fresh_pages":
        prof.psgd_alloc = Quantity.exact(v * prof.params.total_bytes, "calibration")
    elif what == "link_share":
        prof.link_share = (v, v, v)
    else:
        prof.core_scaling = (v, v, v)


def implied(what: str, paths: list[str | Path]) -> list[tuple[str, float]]:
    """(target run, the figure at which its point prediction is its measured step median) for every
    run under the paths the figure applies to; the nearer end of the range where none is."""
    groups, _ = groups_of(paths)
    out = []
    lo0, hi0 = RANGES[what]
    for members in groups.values():
        src = min(members, key=lambda m: plainness(m[1]))
        try:
            prof = from_record(src[1], src[0])
        except ProfileError:
            continue
        base = Config.of(prof)
        for p, rec in members:
            if p == src[0] or not _applies(what, prof, rec) or rec.result.step_time_s is None:
                continue
            measured = rec.result.step_time_s.median

            def gap(v: float, prof=prof, base=base, rec=rec, measured=measured) -> float:
                _set(what, prof, v)  # then the target's configuration: its link reads the share
                cfg = target_config(prof, base, rec)
                return predict(prof, cfg, PointDraws()).step_s - measured

            lo, hi = lo0, hi0
            g_lo = gap(lo)
            if (g_lo >= 0) == (gap(hi) >= 0):  # no root in the range: its nearer end
                out.append((p, lo if abs(g_lo) <= abs(gap(hi)) else hi))
                continue
            for _ in range(40):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if (gap(mid) >= 0) == (g_lo >= 0) else (lo, mid)
            out.append((p, (lo + hi) / 2))
    return out


def summary(rows: list[tuple[str, float]]) -> tuple[float, float, float]:
    """(median, min, max) of the implied figures."""
    xs = sorted(c for _, c in rows)
    m = len(xs) // 2
    med = xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2
    return med, xs[0], xs[-1]


UNITS = {
    "fresh_pages": (1e9, "ns per byte"),
    "core_scaling": (1.0, "(exponent)"),
    "link_share": (1.0, "of the shaped rate"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m whatif.calibrate", description=__doc__.split("\n\n")[1]
    )
    ap.add_argument("figure", choices=sorted(RANGES))
    ap.add_argument("dirs", nargs="+", help="run or sweep directories holding the runs")
    a = ap.parse_args(argv)
    missing = [d for d in a.dirs if not Path(d).exists()]
    if missing:
        print(f"error: {', '.join(missing)} does not exist: give run directories", file=sys.stderr)
        return 2
    rows = implied(a.figure, a.dirs)
    if not rows:
        print(
            f"error: no run there that {a.figure} applies to, with a source run of its workload",
            file=sys.stderr,
        )
        return 2
    scale, unit = UNITS[a.figure]
    for p, c in rows:
        print(f"{c * scale:.3f} {unit}  {p}")
    med, lo, hi = summary(rows)
    print(
        f"{a.figure}: {med * scale:.3g} {unit} [{lo * scale:.3g}, {hi * scale:.3g}] "
        f"(median [range] of {len(rows)} run(s))"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
