"""Small descriptive statistics over lists of numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean(xs: Sequence[float]) -> float:
    """The arithmetic mean; 0.0 for an empty list."""
    return sum(xs) / len(xs)


def median(xs: Sequence[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def variance(xs: Sequence[float]) -> float:
    """The population variance; 0.0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)


def stdev(xs: Sequence[float]) -> float:
    """The population standard deviation."""
    return math.sqrt(variance(xs))


def summary(xs: Sequence[float]) -> dict[str, float]:
    """Count, mean, median, standard deviation, minimum and maximum."""
    return {
        "count": float(len(xs)),
        "mean": mean(xs),
        "median": median(xs),
        "stdev": stdev(xs),
        "min": min(xs, default=0.0),
        "max": max(xs, default=0.0),
    }
