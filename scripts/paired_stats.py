"""Paired statistics over seeds for the benchmark tables
(docs/benchmarks.md, "How a comparison is reported").

Every method of a table runs the same seeds, so a method and the reference
are compared seed by seed: the ratio of their times to a target and the
difference of their final bpb, each with a two-sided 95% confidence
interval from Student's t over the seeds (ratios on the log scale, so the
interval of a ratio is a ratio interval). Standard library only.
"""
import math

# Two-sided 95% quantiles of Student's t, df = 1..30; above, the normal's.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262,
         2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101,
         2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052,
         2.048, 2.045, 2.042]


def t975(df):
    """The 97.5% quantile of Student's t with df degrees of freedom."""
    if df < 1:
        raise ValueError("a confidence interval needs at least 2 seeds")
    return _T975[df - 1] if df <= len(_T975) else 1.960


def mean_interval(values):
    """(mean, low, high): the mean and its two-sided 95% t interval; the
    interval is None with fewer than two values."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    m = sum(values) / n
    if n < 2:
        return m, None, None
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return m, m - half, m + half


def ratio_interval(numerators, denominators):
    """(geometric mean ratio, low, high) of paired positive values, the
    interval from the t interval of the log ratios."""
    if len(numerators) != len(denominators):
        raise ValueError("paired values differ in number")
    logs = [math.log(a / b) for a, b in zip(numerators, denominators)]
    m, lo, hi = mean_interval(logs)
    return (math.exp(m), None if lo is None else math.exp(lo),
            None if hi is None else math.exp(hi))


def crossing_time(evals, target):
    """The first wall-clock time at which the evaluated bpb reaches
    `target`, linearly interpolated between the evaluation before and the
    one that reached it (evals: (seconds, tokens, bpb) in time order);
    None if it never did. The first evaluation reaching it counts as is."""
    previous = None
    for seconds, _tokens, bpb in evals:
        if bpb <= target:
            if previous is None or previous[1] <= bpb:
                return seconds
            t0, b0 = previous
            return t0 + (seconds - t0) * (b0 - target) / (b0 - bpb)
        previous = (seconds, bpb)
    return None
