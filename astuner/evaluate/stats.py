"""The figures of an evaluation: pass@k by the unbiased estimator, and 95% confidence intervals by the bootstrap
over tasks (scipy.stats.bootstrap, BCa: a kept implementation of the resampling and its bias correction, rather
than one written here). Tasks are the unit resampled: a task's k episodes share its difficulty, so resampling
episodes would understate the spread. A difference between two models is paired: the same tasks, each task's
difference resampled together."""

from __future__ import annotations

import math
from typing import Optional, Sequence

CONFIDENCE = 0.95
RESAMPLES = 4000


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k episodes drawn without replacement from n (c of them successes) succeeds:
    1 - C(n-c, k) / C(n, k) (Chen et al., 2021), exact in integers."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ks_reported(n: int) -> list[int]:
    """The k of pass@k reported for n episodes per task: 1, 2, 4, ... and n."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def interval(values: Sequence[float], seed: int = 0, paired_with: Optional[Sequence[float]] = None
             ) -> tuple[float, float]:
    """The 95% interval of the mean of `values` (one per task), or, with `paired_with`, of the mean of
    values[i] - paired_with[i]: BCa bootstrap over the tasks. One task, or every value the same: the interval is
    that one value (no spread to resample)."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    if paired_with is not None:
        data = data - np.asarray(paired_with, dtype=float)
    if data.size == 0:
        raise ValueError("an interval needs at least one task")
    if data.size == 1 or np.all(data == data[0]):
        return float(data.mean()), float(data.mean())
    from scipy.stats import bootstrap

    result = bootstrap((data,), np.mean, confidence_level=CONFIDENCE, n_resamples=RESAMPLES, method="BCa",
                       vectorized=True, random_state=np.random.default_rng(seed))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):  # BCa undefined (e.g. a near-degenerate sample)
        result = bootstrap((data,), np.mean, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                           method="percentile", vectorized=True, random_state=np.random.default_rng(seed))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return low, high
