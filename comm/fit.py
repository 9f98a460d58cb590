"""The latency-bandwidth (alpha-beta) model of one collective, t = alpha + bytes / beta, fitted to
timed calls of several sizes: task=grad_sync fits its per-parameter calls, the diagnosis fits a
run's on-rank microbenchmark."""

from __future__ import annotations

from comm.bandwidth import GB


def fit_latency_bandwidth(rows: list[dict]) -> dict | None:
    """t = alpha + bytes / beta over the per-parameter calls (the latency-bandwidth model), least
    squares on relative error (weights 1/t^2) so that the few-KiB calls, not the one 392 MiB call,
    set alpha."""
    pts = [(r["bytes"], r["time_s"]) for r in rows if r["time_s"] > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    w = [1 / y**2 for _, y in pts]
    sw = sum(w)
    mx = sum(wi * x for wi, (x, _) in zip(w, pts)) / sw
    my = sum(wi * y for wi, (_, y) in zip(w, pts)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, (x, _) in zip(w, pts))
    slope = sum(wi * (x - mx) * (y - my) for wi, (x, y) in zip(w, pts)) / sxx
    alpha = my - slope * mx
    return {
        "alpha_s": alpha,
        "beta_GBps": (1 / slope / GB) if slope > 0 else None,
        "points": len(pts),
        "weights": "1/t^2",
    }
