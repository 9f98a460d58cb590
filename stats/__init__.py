"""Statistics that make every compared number trustworthy (stdlib + numpy only).

Modelled on criterion.rs, pyperf, Google Benchmark's compare.py and torch.utils.benchmark: a number is
printed with its interval, a difference is claimed only when the interval excludes "no change" and the
change exceeds a noise floor, and every bootstrap is seeded so reports are reproducible.

Conventions: times are seconds; speed-up ratios are baseline time / candidate time (> 1 = candidate
faster); `level` is the requested two-sided coverage; quartiles and p90 use numpy's linear interpolation.

summary
  median_ci(values, level)            distribution-free median CI from order statistics (binomial ranks)
  describe(values, level)             median + CI, mean, min/max, p90, quartiles, Tukey outlier counts
  block_throughput(walls, steps, ...) steps/s of a blocked window with a bootstrap CI over blocks
  adaptive_should_stop(...)           stop once the median's relative CI half-width meets a target, or a cap hits
drift
  mann_whitney_u(a, b)                rank-sum U and two-sided p (normal approximation, tie-corrected)
  steady_state(values, level)         first vs last third: flags warm-up or throttling drift > 2%
compare
  ratio_ci(baseline, candidate, ...)  speed-up of medians with a step-level bootstrap CI
  aggregate_repeats(runs, ...)        median of run medians with a two-level (runs, then steps) bootstrap CI
  compare_repeats(base, cand, ...)    speed-up of medians of run medians, two-level bootstrap CI
  aggregate_throughput(runs, ...)     median over runs of sum(work)/sum(wall) of timed blocks, two-level bootstrap CI
  compare_throughput(base, cand, ...) throughput speed-up of blocked runs, two-level bootstrap CI
  verdict(ratio, lo, hi, noise)       "faster" / "slower" / "no significant difference"
  noise_sentinel(samples_by_row, ...) largest significant spread of a phase the knobs cannot touch
fmt
  sig_digits(value, lo, hi)           decimal places the interval supports
  fmt_ci(value, lo, hi, unit)         "1.8 [1.2, 2.5]"
  fmt_ratio(ratio, lo, hi, verdict)   "1.25x [1.18, 1.31]" or "~1 (0.93-1.07, n.s.)"
"""
from .compare import (aggregate_repeats, aggregate_throughput, compare_repeats, compare_throughput, noise_sentinel,
                      ratio_ci, verdict)
from .drift import mann_whitney_u, steady_state
from .fmt import fmt_ci, fmt_ratio, sig_digits
from .summary import adaptive_should_stop, block_throughput, describe, median_ci, median_ranks

__all__ = [
    "adaptive_should_stop", "aggregate_repeats", "aggregate_throughput", "block_throughput", "compare_repeats",
    "compare_throughput", "describe",
    "fmt_ci", "fmt_ratio", "mann_whitney_u", "median_ci", "median_ranks", "noise_sentinel", "ratio_ci",
    "sig_digits", "steady_state", "verdict",
]
