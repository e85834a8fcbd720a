"""A quantizer's histogram on its own grid: where values land, what INT8 reads, the shares at the bounds."""

from __future__ import annotations

import numpy as np

from qgate.histograms import SUBSTEPS, RangeHistogram, share_at_bounds


def test_values_land_on_the_quantizer_grid_and_clipping_piles_on_the_bounds():
    histogram = RangeHistogram(np.array(0.0), np.array(2.55), 256)  # a step of 0.01
    inside = np.linspace(0.0, 2.55, 1000)
    above, below = np.full(300, 2.9), np.full(100, -0.4)
    histogram.update(np.concatenate([inside, above, below]), np.concatenate([inside, above, below]))
    record = histogram.record()
    shares = share_at_bounds(record)
    total = 1400
    assert record["step"] == np.float64(2.55) / 255 and record["bin_width"] == record["step"] / SUBSTEPS
    assert abs(shares["fp32_above"] - 300 / total) < 1e-12 and abs(shares["fp32_below"] - 100 / total) < 1e-12
    # INT8 reads the clipped values on the bounds, with the FP32 values that were already there
    assert shares["int8_at_high"] > 300 / total and shares["int8_at_low"] > 100 / total
    bins = np.arange(len(record["int8"])) + record["first_bin"]
    assert set(bins[np.array(record["int8"]) > 0] % SUBSTEPS) == {0}  # only ever on a level
    assert sum(record["fp32"]) == sum(record["int8"]) == total  # nothing past the reach: no value lost


def test_values_far_outside_the_range_are_counted_not_dropped():
    histogram = RangeHistogram(np.array(-1.0), np.array(1.0), 256)
    histogram.update(np.array([0.0, 50.0, -70.0, np.nan]), np.array([0.0, 50.0, -70.0, np.inf]))
    record = histogram.record()
    assert (record["fp32_far_below"], record["fp32_far_above"]) == (1, 1)
    assert sum(record["int8"]) == 4 and share_at_bounds(record)["int8_at_high"] == 0.25  # 50 clipped; inf read as 0


def test_a_per_channel_range_quantizes_each_channel_on_its_own_levels():
    low, high = np.array([0.0, 0.0]).reshape(2, 1), np.array([1.0, 2.0]).reshape(2, 1)
    histogram = RangeHistogram(low, high, 3)  # levels 0, .5, 1 and 0, 1, 2; drawn on the widest grid (step 1)
    histogram.update(np.array([[0.6], [0.6]]), np.array([[0.6], [0.6]]))
    record = histogram.record()
    values = record["low"] + (np.arange(len(record["int8"])) + record["first_bin"]) * record["bin_width"]
    assert sorted(values[np.array(record["int8"]) > 0]) == [0.5, 1.0]
