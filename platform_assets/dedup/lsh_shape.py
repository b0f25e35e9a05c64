"""The MinHash-LSH band/row shape: the (bands, rows) that minimise the weighted false-positive and
false-negative areas under the S-curve P(s) = 1 - (1 - s^r)^b, datasketch's criterion
(`datasketch.lsh._optimal_param`), computed here without datasketch.

Why not call datasketch: importing it costs ~0.3 CPU-s per process on top of numpy and pyarrow
(0.31-0.32 measured; it imports `redis` for its storage backends and `scipy.integrate` for `quad`;
loading the definitions modules went 1.33-1.39 -> 1.10-1.12 CPU-s without it), and the default `disk`
storage (band_buckets.py) uses nothing else of it, so every dedup and split run paid that for two
integrals.

The integrands are polynomials in s of degree b x r <= num_perm, so Gauss-Legendre quadrature with
n nodes, exact up to degree 2n - 1, integrates them exactly (to rounding) where datasketch's adaptive
`quad` is within ~1e-10 of them; the arg-min is the same as datasketch's on all 456 shapes compared (thresholds
0.05-0.95 by 0.05, num_perm 16-256, four weightings; tests/unit/test_dedup_lsh_shape.py keeps a part).
All shapes of one num_perm are one vectorised pass: ~16 ms for num_perm 128, as datasketch's 2 x 579
`quad` calls, without the import.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from platform_assets.dedup.settings import NearSettings


def collision_probability(similarity: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """P[a pair with this Jaccard shares at least one band] = 1 - (1 - s^r)^b."""
    return 1.0 - (1.0 - np.asarray(similarity, dtype=float) ** rows) ** bands


def _shapes(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (b, r) with b x r <= num_perm, in datasketch's scan order (b, then r, ascending)."""
    pairs = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    bands, rows = np.array(pairs, dtype=np.float64).T
    return bands, rows


def _integrals(lo: float, hi: float, bands: np.ndarray, rows: np.ndarray, nodes: int,
               false_negative: bool) -> np.ndarray:
    """For each shape, the integral over [lo, hi] of P(s) (false positives: pairs below the threshold
    that collide) or of 1 - P(s) (false negatives: pairs above it that do not)."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    s = 0.5 * (hi - lo) * x + 0.5 * (hi + lo)
    missed = (1.0 - s[None, :] ** rows[:, None]) ** bands[:, None]  # 1 - P(s), shapes x nodes
    values = missed if false_negative else 1.0 - missed
    return 0.5 * (hi - lo) * (values @ w)


@lru_cache(maxsize=64)
def optimal_shape(threshold: float, num_perm: int, weights: tuple[float, float] = (0.5, 0.5)) -> tuple[int, int]:
    """(bands, rows) minimising fp_weight x FP area + fn_weight x FN area; the first of equal ones in
    datasketch's scan order (argmin takes the first minimum, as its strict `<` does)."""
    bands, rows = _shapes(num_perm)
    nodes = num_perm // 2 + 1  # 2n - 1 >= num_perm >= the degree of every integrand
    fp = _integrals(0.0, threshold, bands, rows, nodes, false_negative=False)
    fn = _integrals(threshold, 1.0, bands, rows, nodes, false_negative=True)
    best = int(np.argmin(fp * weights[0] + fn * weights[1]))
    return int(bands[best]), int(rows[best])


def lsh_shape(settings: NearSettings) -> tuple[int, int]:
    """(bands, rows): the configured shape, or the optimum for the effective threshold."""
    if settings.bands is not None and settings.rows is not None:
        return settings.bands, settings.rows
    return optimal_shape(settings.effective_lsh_threshold(), settings.num_perm, tuple(settings.lsh_weights))
