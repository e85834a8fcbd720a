"""FP32 vs INT8 IR, layer by layer: streaming error statistics, local vs inherited error, clip vs round."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import openvino as ov

from qgate.errors import QgateError

SQNR_CAP_DB = 100.0  # an exact match has infinite SQNR; a cap keeps differences and CSVs finite
NON_TENSOR_TYPES = {"Constant", "Parameter", "Result", "FakeQuantize", "ShapeOf"}
MIN_MATCHED_FRACTION = 0.9


def layer_keys(model: ov.Model) -> list[tuple[str, int]]:
    """(friendly name, output port) of every real-valued op output, in topological order."""
    keys = []
    for op in model.get_ordered_ops():
        if op.get_type_name() in NON_TENSOR_TYPES:
            continue
        for port in range(op.get_output_size()):
            if op.get_output_element_type(port).is_real():
                keys.append((op.get_friendly_name(), port))
    return keys


def instrument(model: ov.Model, keys: list[tuple[str, int]]) -> ov.Model:
    """A model whose outputs are the given op outputs, first the original outputs, then `keys`."""
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    outputs = [r.input_value(0) for r in model.get_results()] + [ops[name].output(port) for name, port in keys]
    return ov.Model(outputs, model.get_parameters(), "instrumented")


def match_layers(fp32: ov.Model, int8: ov.Model, fp32_name: str, int8_name: str) -> list[tuple[str, int]]:
    """FP32 layer keys that the INT8 graph also has; error when the two come from different exports."""
    fp32_keys = layer_keys(fp32)
    int8_keys = set(layer_keys(int8))
    matched = [key for key in fp32_keys if key in int8_keys]
    if len(matched) < MIN_MATCHED_FRACTION * len(fp32_keys):
        raise QgateError(f"{int8_name}: only {len(matched)} of {len(fp32_keys)} layers of {fp32_name} match by "
                         "name; the two IRs come from different exports, re-run `dvc repro quantize`")
    # same family, same op names, another model (other class count or input size): names match, shapes do not
    fp32_shapes, int8_shapes = _output_shapes(fp32), _output_shapes(int8)
    differing = next((key for key in matched if fp32_shapes[key] != int8_shapes[key]), None)
    if differing:
        raise QgateError(f"{int8_name}: layer {differing[0]} has shape {int8_shapes[differing]} but "
                         f"{fp32_shapes[differing]} in {fp32_name}; the two IRs come from different models, "
                         "re-run `dvc repro quantize`")
    return matched


def _output_shapes(model: ov.Model) -> dict[tuple[str, int], str]:
    return {(op.get_friendly_name(), port): str(op.get_output_partial_shape(port))
            for op in model.get_ordered_ops() for port in range(op.get_output_size())}


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

    def update(self, x: np.ndarray) -> None:
        """Add one image's FP32 input to this quantizer."""
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


def activation_quantizers(int8: ov.Model) -> dict[tuple[str, int], QuantizerStats]:
    """Activation FakeQuantize ops keyed by the (name, port) they read, with their ranges and consumers."""
    found = {}
    for op in int8.get_ordered_ops():
        if op.get_type_name() != "FakeQuantize":
            continue
        source = op.input_value(0)
        if source.get_node().get_type_name() == "Constant":
            continue  # a weight quantizer
        bounds = [op.input_value(i).get_node().get_data() for i in (1, 2)]
        stats = QuantizerStats(low=bounds[0], high=bounds[1], levels=op.get_attributes()["levels"],
                               name=op.get_friendly_name())
        stats.consumers = [t.get_node().get_friendly_name() for t in op.output(0).get_target_inputs()]
        found[(source.get_node().get_friendly_name(), source.get_index())] = stats
    return found


def producers(model: ov.Model) -> dict[str, list[tuple[str, int]]]:
    """For each op, the (name, port) outputs it reads, skipping constants and looking through FakeQuantize."""
    result = {}
    for op in model.get_ordered_ops():
        inputs = []
        for i in range(op.get_input_size()):
            value = op.input_value(i)
            while value.get_node().get_type_name() in {"FakeQuantize", "Convert"}:
                value = value.get_node().input_value(0)
            if value.get_node().get_type_name() not in {"Constant"}:
                inputs.append((value.get_node().get_friendly_name(), value.get_index()))
        result[op.get_friendly_name()] = inputs
    return result
