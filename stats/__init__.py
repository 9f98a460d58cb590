"""Statistics that make every compared number trustworthy (numpy + scipy).

The unit of replication is a run, and within a run a batch of steps (docs/methods.md has each method
with its reference and the calibration table that checks it: `python -m stats.calibrate`). Nothing
here resamples, so the same records always give the same intervals and verdicts.

Conventions: times are seconds; speed-up ratios are candidate throughput / baseline throughput (> 1
= candidate faster); `level` is the two-sided coverage; quartiles and p90 use numpy's linear
interpolation.

within   (one run: serially correlated steps or blocks)
  batch_rate(walls, units)            the long-run rate sum(units)/sum(walls); batch-means interval
  from 60 blocks batch_median(values)                the typical step: median with a batch-medians
  interval (2-5 batches by length) serial(values)                      lag-1 autocorrelation and
  effective sample size
runs     (across runs: the run is the unit)
  run_level(logs)                     geometric mean over runs, t(R-1) interval (Kalibera & Jones
  2013) compare_runs(base, cand, rounds)    speed-up: paired t by round, or Welch; claims' p-values;
  repeats to decide plan_repeats(logs, within_se)       runs needed for +-rel_ci, from between- and
  within-run variance time_saved(speedup)                 the share of the time a speed-up saves (1
  - 1/speedup)
power    (what a design can see, and the plan that sees enough)
  detectable(se, df, family)          smallest true difference called with 80% power (noncentral t,
  Holm's 1st step) plan(Pilot, rows, target, budget_s) cheapest runs x steps after a pilot (Kalibera
  & Jones 2013), or the budget's
verdict  (the one verdict code)
  judge(lo, hi, noise)                faster / slower / equivalent (TOST) / no significant
  difference claim_pvalues, adjust               p-values of the claims; Holm, or Benjamini-Hochberg
  (scipy)
drift
  steady_state(values)                trend test on batch means; unsteady when significant at 2.5%
  and > 2% unsteady_runs(tests)                a sweep's unsteady runs, Benjamini-Hochberg
sentinel
  sentinel(run_logs_by_row)           random-effects ANOVA of a phase the knobs cannot touch; spread
  with interval
summary
  median_ci(values, level)            distribution-free median CI from order statistics (independent
  samples) describe(values, level, serial_series)  median + CI, mean, min/max, p90, quartiles, Tukey
  outlier counts block_throughput(walls, steps)      a run's steps/s with its batch-means interval
  adaptive_should_stop(...)           stop once the median's relative CI half-width meets a target,
  or a cap hits
compare
  throughput(runs), compare_throughput(base, cand)   the same for callers that hold timed blocks
  ratio_ci(a, b)                      ratio of two runs' medians, batch-medians interval
fmt
  sig_digits, fmt_ci, fmt_ratio       digits the interval supports; "1.25x [1.18, 1.31]", "~1
  (0.93-1.07, n.s.)"
"""

from .compare import compare_throughput, ratio_ci, throughput
from .drift import steady_state, unsteady_runs
from .fmt import fmt_ci, fmt_ratio, sig_digits, verdict_text
from .runs import Speedup, compare_runs, plan_repeats, run_level, time_saved
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
    "block_throughput",
    "compare_runs",
    "compare_throughput",
    "describe",
    "fmt_ci",
    "fmt_ratio",
    "judge",
    "median_ci",
    "median_ranks",
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
