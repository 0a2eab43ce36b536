"""A study's statistics: the spread of a cell's values over seeds, and the two-sided Mann-Whitney U
test between two cells (scipy's `mannwhitneyu(method='auto')`, computed here without scipy)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); 0 for one value
    min: float
    max: float


def spread(xs: list[float]) -> Spread | None:
    if not xs:
        return None
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return Spread(len(xs), mean, math.sqrt(var), min(xs), max(xs))


def _ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _u_counts(n1: int, n2: int) -> list[int]:
    """Number of arrangements with U = u, u = 0 .. n1*n2, of two samples without ties."""
    # f[m][k][u]: arrangements of m and k items with statistic u; f(m,k,u) = f(m-1,k,u-k) + f(m,k-1,u)
    table = {(0, k): [1] for k in range(n2 + 1)} | {(m, 0): [1] for m in range(n1 + 1)}
    for m in range(1, n1 + 1):
        for k in range(1, n2 + 1):
            a, b = table[m - 1, k], table[m, k - 1]
            out = [0] * (m * k + 1)
            for u, c in enumerate(a):
                out[u + k] += c
            for u, c in enumerate(b):
                out[u] += c
            table[m, k] = out
    return table[n1, n2]


def mann_whitney_u(x: list[float], y: list[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test: (U of x, p-value), as scipy.stats.mannwhitneyu(x, y) (method auto)."""
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("mann_whitney_u needs two non-empty samples")
    ranks = _ranks(list(x) + list(y))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    ties = len(set(ranks)) < len(ranks)
    if not (n1 > 8 and n2 > 8) and not ties:
        counts = _u_counts(n1, n2)
        p = 2 * sum(counts[int(u):]) / sum(counts)
    else:
        n = n1 + n2
        sizes: dict[float, int] = {}
        for r in ranks:
            sizes[r] = sizes.get(r, 0) + 1
        tie_term = sum(t ** 3 - t for t in sizes.values())
        s = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
        numerator = u - n1 * n2 / 2 - 0.5  # continuity correction
        z = numerator / s if s > 0 else math.copysign(math.inf, numerator)  # s = 0: every value tied
        p = 2 * 0.5 * math.erfc(z / math.sqrt(2))
    return u1, min(1.0, p)

