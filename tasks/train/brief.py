"""The few lines a default run prints about its measurement (verbose=false): what ran, the
throughput with its interval, the phase shares, the gradient sync. Everything else (the method
footnotes, per-rank times, threads, the time budget) is in summarize()'s full text, which goes to
the job log and, with verbose=true, to the console."""

from __future__ import annotations

from stats.fmt import fmt_ci, ms
from stats.within import RATE_MIN_BLOCKS

from base.record import Record
from base.record_types import TrainResult
from tasks.train.result import timed_phases, exposed_text


def brief(record: Record) -> list[str]:
    r: TrainResult = record.result
    bucket = r.bucket_mb
    lines = [
        f"train {record.setting('model.name', '?')}: {r.world_size} {r.backend} rank(s) on "
        f"{r.device_name}, "
        f"sync={r.sync} optim={r.optim} bucket={bucket if bucket is not None else 'default'}, "
        f"batch {r.batch_per_rank}/rank x accumulate {r.accumulate}, {r.steps} steps measured"
    ]
    tp = r.throughput
    if tp.samples_ci_lo is not None:
        lines.append(
            "throughput  "
            f"{fmt_ci(tp.samples_per_s, tp.samples_ci_lo, tp.samples_ci_hi, 'samples/s')}"
            f"  ({fmt_ci(tp.steps_per_s, tp.ci_lo, tp.ci_hi, 'steps/s')}, 95% CI)"
        )
    else:
        # the long-run rate's interval needs RATE_MIN_BLOCKS blocks (stats.within); the step median
        # has its own
        lines.append(
            f"throughput  {tp.samples_per_s:.4g} samples/s  (no CI under {RATE_MIN_BLOCKS} timed "
            "blocks; "
            f"the step median's is below)"
        )
    st = r.steady_state
    if st is not None and st.steady is False:
        lines.append(
            f"WARNING     not at steady state: {st.reason} (raise warmup_steps, or a quieter "
            "machine)"
        )
    phases = timed_phases(r)
    if phases:
        step = r.step_time_s
        names = list(phases)
        width = max(9, *(len(n) + 2 for n in names))
        step_ms = fmt_ci(
            step.median * 1e3,
            step.ci_lo and step.ci_lo * 1e3,
            step.ci_hi and step.ci_hi * 1e3,
            "ms",
        )
        lines.append(
            "phase " + "".join(f"{n:>{width}}" for n in names) + "   step (median, rank 0)"
        )
        lines.append(
            "share "
            + "".join(
                f"{phases[n].median / step.median:>{width}.1%}"
                if step.median
                else f"{'n/a':>{width}}"
                for n in names
            )
            + f"   {step_ms}"
        )
    c = r.comm
    if c is not None and c.to_dict():
        comm = "n/a" if c.time_s is None else f"{ms(c.time_s)} ms"
        busbw = "n/a" if c.busbw_GBps is None else f"{c.busbw_GBps:.3g} GB/s"
        lines.append(
            f"sync        {c.collectives_per_step:.0f} collective(s)/step, "
            f"{c.bytes_per_step / 1e6:.3g} MB/step; comm {comm}, exposed "
            f"{exposed_text(c, short=True)}; "
            f"busbw {busbw}"
        )
    return lines
