"""Statistics that make every compared number trustworthy (numpy + scipy).

The unit of replication is a run, and within a run a batch of steps. Nothing here resamples, so the
same records always give the same intervals and verdicts. Conventions: times are seconds; speed-up
ratios are candidate throughput / baseline throughput (> 1 = candidate faster); `level` is the
two-sided coverage; quartiles and p90 use numpy's linear interpolation. docs/methods.md has each
method with its reference, the calibration table that checks it (`python -m stats.calibrate`), and
which module holds which function ("Where each method lives").
"""

from .compare import compare_throughput, ratio_ci, throughput
from .drift import steady_state, unsteady_runs
from .fmt import fmt_ci, fmt_ratio, sig_digits, verdict_text
from .runs import (
    Speedup,
    block_ab,
    compare_runs,
    narrow_enough,
    plan_repeats,
    run_level,
    time_saved,
)
from .sentinel import sentinel
from .summary import (
    adaptive_should_stop,
    block_throughput,
    describe,
    median_ci,
    median_ranks,
    rel_halfwidth,
)
from .verdict import EQUIVALENT, FASTER, NO_VERDICT, NOISE, NS, SLOWER, adjust, judge, verdict
from .within import batch_median, batch_rate, serial

__all__ = [
    "EQUIVALENT",
    "FASTER",
    "NO_VERDICT",
    "NOISE",
    "NS",
    "SLOWER",
    "Speedup",
    "adaptive_should_stop",
    "adjust",
    "batch_median",
    "batch_rate",
    "block_ab",
    "block_throughput",
    "compare_runs",
    "compare_throughput",
    "describe",
    "fmt_ci",
    "fmt_ratio",
    "judge",
    "median_ci",
    "median_ranks",
    "narrow_enough",
    "plan_repeats",
    "ratio_ci",
    "rel_halfwidth",
    "run_level",
    "sentinel",
    "serial",
    "time_saved",
    "sig_digits",
    "steady_state",
    "throughput",
    "unsteady_runs",
    "verdict",
    "verdict_text",
]
