"""Helpers of sparcml._arrays, against a direct computation."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sparcml._arrays import nonzero_rows  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nonzero_rows_matches_a_full_comparison(dtype):
    rng = np.random.default_rng(5)
    v = rng.integers(-1, 2, size=(2000, 6)).astype(dtype)  # many zero first values, some zero rows
    v[7] = 0
    v[8] = [-0.0, 0, 0, 0, 0, 0]
    v[9] = [np.nan, 0, 0, 0, 0, 0]
    v[10] = [0, 0, 0, 0, 0, np.nan]
    want = (v != 0).any(axis=1)
    got = nonzero_rows(v)
    assert got is not None and (got == want).all()
    assert want[9] and want[10] and not want[7] and not want[8]


def test_nonzero_rows_none_when_every_row_has_a_value():
    v = np.zeros((5, 3), dtype=np.float32)
    v[:, 2] = 1  # first values zero: rows read in full, all kept
    assert nonzero_rows(v) is None
    assert nonzero_rows(np.zeros((0, 3), dtype=np.float32)) is None
    assert nonzero_rows(np.ones((4, 3), dtype=np.float32)) is None
