"""params.yaml over qgate's defaults (qgate/defaults.yaml) -> frozen, typed dataclasses.

A params.yaml holds only what it changes. Unknown or misspelled keys are errors ("did you mean"). Output paths
are fixed (class attributes, not keys); a key an earlier release had for one of them is accepted while it holds
that path, with a one-line notice. `python -m qgate.resolve` writes every resolved value to
params.resolved.yaml, which DVC compares per stage.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qgate.errors import QgateError
from qgate.io import read_yaml
from qgate.params_check import DEMO_DATASET_FILES, check_values

DEFAULT_PARAMS = Path("params.yaml")
DEFAULTS = Path(__file__).with_name("defaults.yaml")
REFERENCE = Path("docs/params.md")


@dataclass(frozen=True)
class DemoParams:
    """`demo:` the embedded synthetic dataset and the small YOLOv8n trained on it."""

    task: str
    seed: int
    classes: tuple[str, ...]
    train_images: int
    calib_images: int
    val_images: int
    max_objects: int
    epochs: int
    imgsz: int
    batch: int
    optimizer: str
    lr0: float
    # outputs: fixed paths, not keys
    data_dir = "data/demo"
    weights = "models/demo/yolov8n_demo.pt"
    metrics = "metrics/demo_train.json"

    @property
    def dataset(self) -> str:
        """What `model.dataset` names to judge the demo model: the yaml the demo writes, or a classify demo's folder."""
        return str(Path(self.data_dir) / DEMO_DATASET_FILES[self.task])


@dataclass(frozen=True)
class ModelParams:
    """`model:` the detector under test and the dataset it is judged on."""

    weights: str
    dataset: str
    data_dir: str
    imgsz: int


@dataclass(frozen=True)
class DeployParams:
    """`deploy:` where the INT8 model will run, and at which threshold: where every stage builds and judges it."""

    runtime: str
    conf: float
    int8_conf: float | None
    # outputs of `make runtimes` (stages/runtimes.py): fixed paths, not keys
    runtimes_metrics = "metrics/runtimes.json"
    runtimes_csv = "reports/runtimes.csv"
    runtimes_table = "reports/runtimes.md"


@dataclass(frozen=True)
class ExportParams:
    """`export:` .pt -> static ONNX -> the runtime's FP32 model."""

    opset: int
    end2end: bool
    # outputs: fixed paths, not keys
    out_dir = "models/export"
    record = "metrics/export_record.json"


@dataclass(frozen=True)
class BaselineParams:
    """`baseline:` FP32 mAP of the exported model with pycocotools."""

    inference_precision: str
    split: str
    conf: float
    iou: float
    max_det: int
    # outputs: fixed paths, not keys
    metrics = "metrics/baseline.json"
    per_class = "metrics/baseline_per_class.json"
    detections = "artifacts/baseline_detections.json"


@dataclass(frozen=True)
class SubgraphParams:
    """One ignored subgraph: every op on a path from `inputs` to `outputs` stays float."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class IgnoredScopeParams:
    """Ops NNCF must leave in float, by exact name, regex pattern, op type or subgraph."""

    names: tuple[str, ...]
    patterns: tuple[str, ...]
    types: tuple[str, ...]
    subgraphs: tuple[SubgraphParams, ...]


@dataclass(frozen=True)
class OnnxRuntimeQuantizeParams:
    """`quantize.onnxruntime:` ONNX Runtime's `quantize_static` (quantize.quantizer: onnxruntime)."""

    calibrate_method: str
    per_channel: bool
    op_types: tuple[str, ...]


@dataclass(frozen=True)
class QuantizeParams:
    """`quantize:` post-training INT8 quantization of the FP32 model (NNCF, or ONNX Runtime's own quantizer)."""

    quantizer: str
    preset: str
    model_type: str
    smooth_quant_alpha: float
    subset_size: int
    fast_bias_correction: bool
    range_estimator: str
    calibration_split: str
    allow_val_calibration: bool
    seed: int
    keep_decode_float: bool
    keep_output_layers_float: bool
    ignored_scope: IgnoredScopeParams
    onnxruntime: OnnxRuntimeQuantizeParams
    # outputs: fixed paths, not keys
    out_dir = "models/int8"
    precision_table = "reports/precision_table.csv"
    record = "metrics/int8_record.json"
    metrics = "metrics/quantize.json"


@dataclass(frozen=True)
class Int8EvalParams:
    """`int8_eval:` the INT8 model measured like the baseline, plus the images that changed most."""

    bad_case_conf: float
    bad_case_iou: float
    bootstrap_samples: int
    ci_level: float
    seed: int
    # outputs: fixed paths, not keys
    metrics = "metrics/int8.json"
    per_class = "metrics/int8_per_class.json"
    detections = "artifacts/int8_detections.json"
    bad_cases = "reports/bad_cases.csv"


@dataclass(frozen=True)
class RobustnessParams:
    """`robustness:` FP32 and INT8 scored on shifted copies of the val images (qgate.shifts)."""

    shifts: tuple[str, ...]
    severities: tuple[int, ...]
    seed: int
    bootstrap_samples: int
    # outputs: fixed paths, not keys
    metrics = "metrics/robustness.json"
    csv = "reports/robustness.csv"


@dataclass(frozen=True)
class BenchmarkParams:
    """`benchmark:` the FP32 and INT8 models timed with identical settings (OpenVINO: benchmark_app)."""

    device: str
    hint: str
    seconds: int
    repeats: int
    max_seconds: float
    max_spread: float
    ci_level: float
    batch: int
    bf16: bool
    # outputs: fixed paths, not keys
    report_dir = "reports/benchmark"
    metrics = "metrics/benchmark.json"


@dataclass(frozen=True)
class DivergenceParams:
    """`divergence:` per-layer FP32 vs INT8 comparison on a few images."""

    images: int
    bad_cases: int
    seed: int
    sqnr_floor_db: float
    local_drop_db: float
    divergent_sqnr_db: float
    concat_range_ratio: float
    top_k: int
    # outputs: fixed paths, not keys
    csv = "reports/divergence.csv"
    table = "reports/divergence.md"
    plot = "reports/divergence_sqnr.csv"
    shifts_csv = "reports/divergence_shifts.csv"  # the same images under each of robustness.shifts
    histograms = "reports/divergence_histograms.json"  # each activation quantizer's inputs, FP32 and INT8
    metrics = "metrics/divergence.json"


@dataclass(frozen=True)
class SensitivityParams:
    """`sensitivity:` rank the INT8 model's quantizer groups by how much float there removes the error."""

    images: int
    conf: float
    rank_quantile: float
    top_k: int
    # outputs: fixed paths, not keys
    csv = "reports/sensitivity.csv"
    plot = "reports/sensitivity.svg"
    metrics = "metrics/sensitivity.json"


@dataclass(frozen=True)
class AutofixParams:
    """`autofix:` revert ranked quantizer groups to float until the mAP50-95 drop is within `target_drop`."""

    target_drop: float
    max_evaluations: int
    ci_level: float
    price_rounds: int
    price_seconds: int
    # outputs: fixed paths, not keys
    out_dir = "models/int8_fixed"
    steps = "reports/autofix_steps.csv"
    prices = "reports/autofix_prices.csv"
    scope = "reports/autofix_scope.yaml"
    metrics = "metrics/autofix.json"


@dataclass(frozen=True)
class TuneSpaceParams:
    """`tune.space:` the quantize values to try; every combination is a candidate."""

    quantizer: tuple[str, ...]
    preset: tuple[str, ...]
    model_type: tuple[str, ...]
    smooth_quant_alpha: tuple[float, ...]
    fast_bias_correction: tuple[bool, ...]
    range_estimator: tuple[str, ...]
    subset_size: tuple[int, ...]
    keep_decode_float: tuple[bool, ...]


@dataclass(frozen=True)
class TuneParams:
    """`tune:` the fastest INT8 model whose accuracy passes the gates, searched over quantize settings."""

    space: TuneSpaceParams
    imgsz: tuple[int, ...]
    first_images: int
    finalists: int
    max_evaluations: int
    max_seconds: float
    seed: int
    # outputs: fixed paths, not keys
    csv = "reports/tune.csv"
    block = "reports/tune_quantize.yaml"
    metrics = "metrics/tune.json"
    pareto_csv = "reports/tune_pareto.csv"
    page_md = "reports/tune.md"
    page_html = "reports/tune.html"


@dataclass(frozen=True)
class GatesParams:
    """`gates:` every threshold `make gate` judges the metrics with (null switches an optional gate off)."""

    max_map50_95_drop: float
    max_mask_map50_95_drop: float
    max_pose_map50_95_drop: float
    max_top1_drop: float
    max_drop_rel: float | None
    min_int8_score: float | None
    max_class_drop: float | None
    max_recall_drop: float | None
    max_f1_drop: float | None
    max_small_map50_95_drop: float | None
    max_shift_drop: float | None
    max_latency_ms: float | None
    min_speedup: float
    max_detection_error: float
    max_layers_below_sqnr_floor_frac: float
    confidence: float | None
    inconclusive: str
    report_bad_cases: int
    # outputs: fixed paths, not keys
    junit = "reports/gates.xml"
    report_md = "reports/report.md"
    report_html = "reports/report.html"

    @property
    def max_drop(self) -> dict[str, float]:
        """Each scored metric's drop limit, by the metric's key: the one mapping gates, tune and its page read."""
        return {"map50_95": self.max_map50_95_drop, "mask_map50_95": self.max_mask_map50_95_drop,
                "pose_map50_95": self.max_pose_map50_95_drop, "top1": self.max_top1_drop}


@dataclass(frozen=True)
class PromoteParams:
    """`promote:` the registry entry `make promote` writes (GTO git tags) for the INT8 model that passed."""

    name: str
    family: str
    stage: str
    bump: str
    bump_new_model: str
    remote: str


@dataclass(frozen=True)
class ComputeParams:
    """`compute:` where evaluations run: in this process (local) or on Ray actors (a private instance or a cluster)."""

    executor: str
    address: str | None
    workers: int | None
    cpus_per_worker: int
    shard_images: int
    timeout_s: float


@dataclass(frozen=True)
class Params:
    """All sections of params.yaml."""

    demo: DemoParams
    model: ModelParams
    deploy: DeployParams
    export: ExportParams
    baseline: BaselineParams
    quantize: QuantizeParams
    int8_eval: Int8EvalParams
    robustness: RobustnessParams
    benchmark: BenchmarkParams
    divergence: DivergenceParams
    sensitivity: SensitivityParams
    autofix: AutofixParams
    tune: TuneParams
    gates: GatesParams
    promote: PromoteParams
    compute: ComputeParams


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    """Read and validate params.yaml (defaults for what it leaves out); QgateError names the file and the key."""
    path = Path(path)
    raw = read_yaml(path, "params file not found; run from the project root or pass --params")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise QgateError(f"{path}: expected a mapping of sections at the top level")
    retired: list[str] = []
    params = _build(Params, merged(read_yaml(DEFAULTS, "qgate's defaults are missing; reinstall qgate"), raw), path,
                    "", retired)
    check_values(params, path)
    _notice_retired(path, retired)
    return params


def merged(defaults: Any, overrides: Any) -> Any:
    """`overrides` laid over `defaults`, section by section; a key only `overrides` has stays (to be judged)."""
    if not isinstance(defaults, dict) or not isinstance(overrides, dict):
        return defaults if overrides is None and isinstance(defaults, dict) else overrides
    return {**defaults, **{name: merged(defaults.get(name), value) for name, value in overrides.items()}}


_NOTICED: set[str] = set()


def _notice_retired(path: Path, retired: list[str]) -> None:
    """One line per file and process: keys an earlier release had, holding the value it shipped."""
    if retired and str(path) not in _NOTICED:
        _NOTICED.add(str(path))
        print(f"note: {path}: {len(retired)} keys are no longer params and hold the values qgate shipped, so they "
              f"are ignored; delete them (docs/params.md): {', '.join(retired)}", file=sys.stderr)


def _build(cls: type, raw: Any, path: Path, prefix: str, retired: list[str]) -> Any:
    if not isinstance(raw, dict):
        raise QgateError(f"{path}: '{prefix.rstrip('.')}' must be a mapping")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for name in raw:
        if name not in names:
            _retired_or_unknown(cls, str(name), raw[name], names, path, prefix, retired)
    values = {}
    for name in names:
        if name not in raw:
            raise QgateError(f"{DEFAULTS}: no default for '{prefix}{name}'; set it in {path}")
        values[name] = _coerce(hints[name], raw[name], path, f"{prefix}{name}", retired)
    return cls(**values)


# Keys earlier releases had, with the value they shipped and what replaced them: the old value is accepted
# (with the notice), another one is an error naming the replacement, since it can no longer be honoured.
REPLACED = {
    # one word, one meaning: a runtime runs the model (deploy.runtime); an executor runs qgate's jobs
    "compute.backend": ("local", "compute.executor (renamed; the same values: local or ray)"),
    "gates.min_output_sqnr_db": (25, "gates.max_detection_error (INT8's error on the detections, not the SQNR "
                                     "of the whole output tensor, whose background anchors do not matter)"),
    "gates.max_layers_below_sqnr_floor": (80, "gates.max_layers_below_sqnr_floor_frac (a fraction of the model's "
                                              "layers: families differ in layer count)"),
    # the optional gates judge the task's own metric, mAP50-95 or a classifier's top-1: named for neither
    "gates.max_map50_95_drop_rel": (None, "gates.max_drop_rel (renamed: it judges the task's own metric)"),
    "gates.min_int8_map50_95": (None, "gates.min_int8_score (renamed: it judges the task's own metric)"),
    "gates.max_class_map50_95_drop": (None, "gates.max_class_drop (renamed: it judges the task's own metric)"),
    "gates.max_shift_map50_95_drop": (0.02, "gates.max_shift_drop (renamed: it judges the task's own metric)"),
}


def _retired_or_unknown(cls: type, name: str, value: Any, names: list[str], path: Path, prefix: str,
                        retired: list[str]) -> None:
    if f"{prefix}{name}" in REPLACED:
        shipped, replacement = REPLACED[f"{prefix}{name}"]
        if value != shipped:
            raise QgateError(f"{path}: '{prefix}{name}' is {value!r}, but qgate no longer has this key; set "
                             f"{replacement} instead, and delete the key")
        retired.append(f"{prefix}{name}")
        return
    fixed = getattr(cls, name, None)
    if isinstance(fixed, str):  # an output path, a key until qgate 0.1
        if value != fixed:
            raise QgateError(f"{path}: '{prefix}{name}' is {value!r}, but qgate now always writes it to {fixed!r} "
                             "(output paths are no longer params); delete the key")
        retired.append(f"{prefix}{name}")
        return
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
    raise QgateError(f"{path}: unknown key '{prefix}{name}'{hint} (every key: {REFERENCE})")


def _coerce(hint: Any, value: Any, path: Path, name: str, retired: list[str]) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path, f"{name}.", retired)
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        if value is None:
            value = []
        if not isinstance(value, list):
            raise QgateError(f"{path}: '{name}' must be a list")
        return tuple(_coerce(item, v, path, f"{name}[{i}]", retired) for i, v in enumerate(value))
    expected = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}[hint]
    if hint is bool:
        if not isinstance(value, bool):
            raise QgateError(f"{path}: '{name}' must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, expected):
        raise QgateError(f"{path}: '{name}' must be of type {hint.__name__}, got {value!r}")
    if hint is float and not math.isfinite(value):  # YAML's .nan and .inf: every range check would pass NaN
        raise QgateError(f"{path}: '{name}' is {value}; use a finite number")
    return hint(value)


def ignored_scope(raw: Any, path: str | Path) -> IgnoredScopeParams:
    """A `quantize.ignored_scope` mapping from another file (autofix's block), checked as params.yaml's is."""
    return _build(IgnoredScopeParams, raw, Path(path), "quantize.ignored_scope.", [])


def as_dict(value: Any) -> Any:
    """Params (or a section) as plain YAML data: every key with its resolved value, tuples as lists."""
    if dataclasses.is_dataclass(value):
        return {f.name: as_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [as_dict(item) for item in value]
    return value
