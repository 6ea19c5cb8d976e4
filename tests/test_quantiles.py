"""dse.quantiles.percentile is numpy's percentile to the bit: random arrays of every length up
to a few hundred, ties, infinite values (unserved requests count as infinitely late), a nan, and
every percentile from 0 to 100."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dse.quantiles import percentile


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_percentiles_are_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(7)
    compared = 0
    for case in range(3000):
        n = int(rng.integers(1, 300 if case % 10 == 0 else 40))
        a = rng.exponential(2.0, n)
        if case % 3 == 0:
            a[rng.integers(0, n, size=1 + n // 10)] = np.inf
        if case % 5 == 0:
            a = np.round(a, 1)  # ties
        if case % 17 == 0:
            a[rng.integers(0, n)] = np.nan
        for q in (0.0, 1.0, 5.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0, float(rng.uniform(0.0, 100.0))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # numpy's inf - inf
                theirs = float(np.percentile(a, q))
            assert _same(percentile(a, q), theirs), (a.tolist(), q)
            compared += 1
    assert compared == 30_000
    assert math.isnan(percentile(np.array([]), 50.0))
    assert percentile(np.arange(11.0), 50.0) == 5.0 and percentile(np.arange(11.0), 95.0) == 9.5


def test_a_percentile_outside_0_100_or_of_a_table_is_refused_as_numpy_refuses_it() -> None:
    for q in (-1.0, 100.5, float("nan")):
        with pytest.raises(ValueError, match="outside"):
            percentile(np.arange(5.0), q)
        with pytest.raises(ValueError):
            np.percentile(np.arange(5.0), q)
    with pytest.raises(ValueError, match="one dimension"):
        percentile(np.ones((2, 3)), 50.0)
