"""Pass@k, by the unbiased estimator of Chen et al. (2021)."""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples, drawn without replacement from n
    samples of which c pass, passes: 1 - C(n-c, k) / C(n, k), as a stable product."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))
