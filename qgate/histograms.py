"""What a quantizer does to its inputs, as histograms on its own grid: the FP32 values and the levels INT8 reads."""

from __future__ import annotations

import math

import numpy as np

SUBSTEPS = 4  # bins per quantization step: a distribution narrower than a few steps keeps its shape beside the grid
REACH = 1.0  # bins go this many quantizer ranges past each bound; values farther out are counted in the end bins


class RangeHistogram:
    """Streaming counts of one activation quantizer's FP32 inputs and of the INT8 values it hands on.

    Bin i is centred on `low + i * step / SUBSTEPS`: the quantizer's levels fall on every SUBSTEPS-th bin, its
    bounds on bins 0 and `SUBSTEPS * (levels - 1)`. INT8's values are the INT8 model's own tensor at the
    quantizer's input, clipped and rounded as the quantizer does (per channel when its range is), so clipping
    shows as INT8 mass piled on a bound and FP32 mass beyond it, rounding as a few levels under a narrow FP32 shape.
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, levels: int):
        self.low, self.high, self.levels = low, high, levels
        self.bound_low, self.bound_high = float(np.min(low)), float(np.max(high))
        step = (self.bound_high - self.bound_low) / (levels - 1)
        self.step = step if step > 0 else 1.0
        self.inner = SUBSTEPS * (levels - 1)
        self.reach = math.ceil(REACH * self.inner)
        self.fp32 = np.zeros(self.inner + 2 * self.reach + 3, dtype=np.int64)
        self.int8 = np.zeros_like(self.fp32)

    def update(self, fp32: np.ndarray, int8: np.ndarray) -> None:
        """Add one image's FP32 tensor at the quantizer's input and the INT8 model's tensor there."""
        self.fp32 += self._counts(fp32.astype(np.float64, copy=False))
        self.int8 += self._counts(self._quantized(int8.astype(np.float64, copy=False)))

    def _quantized(self, x: np.ndarray) -> np.ndarray:
        step = (self.high - self.low) / (self.levels - 1)
        step = np.where(step > 0, step, 1.0)
        x = np.where(np.isfinite(x), x, 0.0)  # NaN/Inf are counted per layer, not binned
        return np.round((np.clip(x, self.low, self.high) - self.low) / step) * step + self.low

    def _counts(self, x: np.ndarray) -> np.ndarray:
        index = np.rint((x.ravel() - self.bound_low) / (self.step / SUBSTEPS))
        index = np.clip(np.nan_to_num(index, nan=0.0), -self.reach - 1, self.inner + self.reach + 1)
        return np.bincount((index + self.reach + 1).astype(np.int64), minlength=self.fp32.size)

    def record(self) -> dict:
        """The counts trimmed to the bins either model fills, with what it takes to draw and read them."""
        filled = np.flatnonzero(self.fp32[1:-1] + self.int8[1:-1]) + 1
        first, last = (int(filled[0]), int(filled[-1])) if filled.size else (self.reach + 1, self.reach + 1)
        return {"low": self.bound_low, "high": self.bound_high, "levels": self.levels, "step": self.step,
                "bin_width": self.step / SUBSTEPS, "first_bin": first - self.reach - 1,
                "upper_bin": self.inner, "fp32": self.fp32[first:last + 1].tolist(),
                "int8": self.int8[first:last + 1].tolist(),
                "fp32_far_below": int(self.fp32[0]), "fp32_far_above": int(self.fp32[-1])}


def share_at_bounds(record: dict) -> dict:
    """From a `record`: the shares of INT8's values on each bound and of FP32's beyond it (clipping's signature)."""
    fp32, int8 = np.asarray(record["fp32"], dtype=np.float64), np.asarray(record["int8"], dtype=np.float64)
    total = fp32.sum() + record["fp32_far_below"] + record["fp32_far_above"]
    bins = np.arange(fp32.size) + record["first_bin"]
    below = fp32[bins < 0].sum() + record["fp32_far_below"]
    above = fp32[bins > record["upper_bin"]].sum() + record["fp32_far_above"]
    on = lambda b: float(int8[bins == b].sum() / int8.sum()) if int8.sum() else 0.0  # noqa: E731
    return {"int8_at_low": on(0), "int8_at_high": on(record["upper_bin"]),
            "fp32_below": float(below / total) if total else 0.0, "fp32_above": float(above / total) if total else 0.0}
