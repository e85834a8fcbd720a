"""FP32 vs INT8, layer by layer: streaming error statistics, local vs inherited error, clip vs round (any runtime)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qgate.errors import QgateError
from qgate.histograms import RangeHistogram

SQNR_CAP_DB = 100.0  # an exact match has infinite SQNR; a cap keeps differences and CSVs finite
NETWORK_INPUT = ("", 0)  # the key of a quantizer reading the network input: no layer output, it is fed the image
CLIP_GROWTH = 0.01  # under a shift, a layer clipping this much more of its values than on clean images is named
MIN_MATCHED_FRACTION = 0.9


def matched_keys(fp32_keys: list[tuple[str, int]], int8_keys: list[tuple[str, int]], fp32_name: str,
                 int8_name: str) -> list[tuple[str, int]]:
    """The FP32 layer keys the INT8 model also has, in FP32 order; an error when too few match (another export)."""
    present = set(int8_keys)
    matched = [key for key in fp32_keys if key in present]
    if len(matched) < MIN_MATCHED_FRACTION * len(fp32_keys):
        raise QgateError(f"{int8_name}: only {len(matched)} of {len(fp32_keys)} layers of {fp32_name} match by "
                         "name; the two models come from different exports, re-run `dvc repro quantize`")
    return matched


@dataclass(frozen=True)
class LayerFacts:
    """What the runtime's graph says of one INT8 op: its type, the activation quantizers its inputs read (by name,
    through ops that keep int8) and whether its weights are int8."""

    type: str
    input_quantizers: tuple[str, ...]
    weights_int8: bool


@dataclass
class LayerStats:
    """Running sums for one layer over all images, so memory does not grow with the image count."""

    count: int = 0
    err_sq: float = 0.0
    ref_sq: float = 0.0
    err_abs: float = 0.0
    max_abs_err: float = 0.0
    dot: float = 0.0
    test_sq: float = 0.0
    nan_inf: int = 0
    ref_min: float = math.inf
    ref_max: float = -math.inf
    ref_sum: float = 0.0
    test_min: float = math.inf
    test_max: float = -math.inf
    test_sum: float = 0.0

    def update(self, ref: np.ndarray, test: np.ndarray) -> None:
        """Add one image's FP32 (`ref`) and INT8 (`test`) tensors."""
        ref, test = ref.astype(np.float64, copy=False).ravel(), test.astype(np.float64, copy=False).ravel()
        bad = ~np.isfinite(test)
        self.nan_inf += int(bad.sum())
        if bad.any():
            test = np.where(bad, 0.0, test)
        err = test - ref
        self.count += ref.size
        self.err_sq += float(err @ err)
        self.ref_sq += float(ref @ ref)
        self.test_sq += float(test @ test)
        self.dot += float(ref @ test)
        self.err_abs += float(np.abs(err).sum())
        self.max_abs_err = max(self.max_abs_err, float(np.abs(err).max(initial=0.0)))
        self.ref_min, self.ref_max = min(self.ref_min, float(ref.min())), max(self.ref_max, float(ref.max()))
        self.test_min, self.test_max = min(self.test_min, float(test.min())), max(self.test_max, float(test.max()))
        self.ref_sum += float(ref.sum())
        self.test_sum += float(test.sum())

    def row(self) -> dict:
        """The per-layer columns of the divergence report."""
        cosine = self.dot / math.sqrt(self.ref_sq * self.test_sq) if self.ref_sq and self.test_sq else 1.0
        return {
            "sqnr_db": round(sqnr_db(self.ref_sq, self.err_sq), 3), "cosine": round(cosine, 6),
            "mse": self.err_sq / self.count, "l1": self.err_abs / self.count, "max_abs_err": self.max_abs_err,
            "fp32_min": self.ref_min, "fp32_max": self.ref_max, "fp32_mean": self.ref_sum / self.count,
            "int8_min": self.test_min, "int8_max": self.test_max, "int8_mean": self.test_sum / self.count,
            "nan_inf": self.nan_inf,
        }


class DetectionError:
    """INT8's error on what becomes detections, per detection: scale-free, whatever the family or output size.

    Each image adds the head's detection error (1 - IoU of the box + squared score change) over the anchors
    or rows FP32 is confident about, against INT8, and over those INT8 is confident about, against FP32
    (detections INT8 loses and those it invents), and counts both; `mean` is the sum over the count: 0 for
    identical outputs, about 1 for a detection lost. Unlike the SQNR of the whole output tensor, background
    anchors (most of it) weigh nothing.
    """

    def __init__(self, task, conf: float):
        self.task, self.conf = task, conf
        self.total, self.count = 0.0, 0

    def update(self, ref: tuple, test: tuple) -> None:
        """Add one image's FP32 (`ref`) and INT8 (`test`) outputs the task reads (the batch dimension removed)."""
        ref = tuple(r.astype(np.float64) for r in ref)
        # NaN/inf are counted per layer (nan_inf), not here
        test = tuple(np.where(np.isfinite(t), t, 0.0) for t in (t.astype(np.float64) for t in test))
        for reference, candidate in ((ref, test), (test, ref)):
            mask = self.task.confident(reference, self.conf)
            self.total += self.task.box_error(candidate, reference, mask)
            self.count += int(mask.sum())

    @property
    def mean(self) -> float:
        """Error per compared detection (0.0 when neither model detects anything on these images)."""
        return self.total / self.count if self.count else 0.0


def sqnr_db(signal_sq: float, noise_sq: float) -> float:
    """10 log10(signal / noise), capped at SQNR_CAP_DB (an exact match)."""
    if noise_sq <= 0:
        return SQNR_CAP_DB
    if signal_sq <= 0:
        return -SQNR_CAP_DB
    return min(SQNR_CAP_DB, 10 * math.log10(signal_sq / noise_sq))


@dataclass
class QuantizerStats:
    """Clipping vs rounding error of one activation FakeQuantize on real FP32 inputs."""

    low: np.ndarray
    high: np.ndarray
    levels: int
    name: str = ""
    clipped: int = 0
    count: int = 0
    clip_sq: float = 0.0
    round_sq: float = 0.0
    consumers: list[str] = field(default_factory=list)
    histogram: RangeHistogram | None = None  # kept when asked for: the clean images' pass draws them, not the shifts'

    def keep_histogram(self) -> None:
        """From now on, also count the inputs into a histogram on this quantizer's grid."""
        self.histogram = RangeHistogram(self.low, self.high, self.levels)

    def update(self, x: np.ndarray, int8: np.ndarray) -> None:
        """Add one image's FP32 input to this quantizer, and the INT8 model's tensor at the same place."""
        if self.histogram:
            self.histogram.update(x, int8)
        x = x.astype(np.float64, copy=False)
        inside = np.clip(x, self.low, self.high)
        step = (self.high - self.low) / (self.levels - 1)
        step = np.where(step > 0, step, 1.0)
        rounded = np.round((inside - self.low) / step) * step + self.low
        self.clipped += int((x != inside).sum())
        self.count += x.size
        self.clip_sq += float(((x - inside) ** 2).sum())
        self.round_sq += float(((inside - rounded) ** 2).sum())

    def row(self) -> dict:
        """Clip fraction and the shares of clipping and rounding in the quantizer's squared error."""
        total = self.clip_sq + self.round_sq
        return {"clip_fraction": self.clipped / max(self.count, 1),
                "clip_error_share": self.clip_sq / total if total else 0.0,
                "round_error_share": self.round_sq / total if total else 0.0,
                "fq_low": float(np.min(self.low)), "fq_high": float(np.max(self.high))}
