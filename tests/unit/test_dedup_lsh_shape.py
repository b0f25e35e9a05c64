"""The LSH shape optimiser (dedup/lsh_shape.py) against datasketch's, and the import it saves."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from datasketch.lsh import _optimal_param

from platform_assets.dedup.lsh_shape import collision_probability, lsh_shape, optimal_shape
from platform_assets.dedup.settings import NearSettings


@pytest.mark.parametrize("num_perm", [16, 64, 128, 256])
@pytest.mark.parametrize("weights", [(0.5, 0.5), (0.2, 0.8)])
def test_optimal_shape_is_datasketchs(num_perm: int, weights: tuple[float, float]) -> None:
    for threshold in np.round(np.arange(0.1, 0.95, 0.1), 6):
        ours = optimal_shape(float(threshold), num_perm, weights)
        assert ours == _optimal_param(float(threshold), num_perm, *weights), (threshold, num_perm, weights)
        assert ours[0] * ours[1] <= num_perm


def test_default_shape_and_its_s_curve() -> None:
    # the default (J 0.8 verified, so tuned for 0.6 at 128 slots): 18 bands of 7 rows
    assert lsh_shape(NearSettings()) == (18, 7)
    assert lsh_shape(NearSettings(bands=4, rows=8)) == (4, 8)
    assert collision_probability(0.8, 18, 7) == pytest.approx(1 - (1 - 0.8**7) ** 18)
    assert collision_probability(0.8, 18, 7) > 0.98 > 0.5 > collision_probability(0.4, 18, 7)


def test_dedup_and_split_stages_do_not_import_datasketch() -> None:
    # datasketch imports redis and scipy.integrate (~0.7 CPU-s); only storage memory/redis needs it
    code = ("import sys; import platform_assets.dedup.stage, platform_assets.splits.stage; "
            "from platform_assets.dedup.lsh_shape import optimal_shape; optimal_shape(0.6, 128); "
            "print(sorted(m for m in ('datasketch', 'redis', 'scipy.integrate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
