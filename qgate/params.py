"""Load params.yaml into frozen, typed dataclasses; unknown or misspelled keys are errors."""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qgate.errors import QgateError
from qgate.io import read_yaml

DEFAULT_PARAMS = Path("params.yaml")
INFERENCE_PRECISIONS = ("f32", "bf16", "f16")
REGISTRY_NAME = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9-/_]*[a-zA-Z0-9])?")  # gto.constants' artifact/stage rule
RAY_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9.\-]+:[0-9]{1,5}")  # a Ray client or GCS address: host:port
MIN_BOOTSTRAP_SAMPLES = 100  # fewer resamples put the 2.5% tails of a 95% interval on 2 or 3 values


@dataclass(frozen=True)
class DemoParams:
    """`demo:` the embedded synthetic dataset and the small YOLOv8n trained on it."""

    seed: int
    data_dir: str
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
    weights: str
    metrics: str


@dataclass(frozen=True)
class ModelParams:
    """`model:` the detector under test and the dataset it is judged on."""

    weights: str
    dataset: str
    data_dir: str
    imgsz: int


@dataclass(frozen=True)
class ExportParams:
    """`export:` .pt -> static ONNX -> FP32 OpenVINO IR."""

    opset: int
    end2end: bool
    out_dir: str
    record: str


@dataclass(frozen=True)
class BaselineParams:
    """`baseline:` FP32 mAP of the exported IR with pycocotools."""

    inference_precision: str
    split: str
    conf: float
    iou: float
    max_det: int
    metrics: str
    per_class: str
    detections: str


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
class QuantizeParams:
    """`quantize:` NNCF post-training INT8 quantization of the FP32 IR."""

    preset: str
    model_type: str
    subset_size: int
    fast_bias_correction: bool
    calibration_split: str
    allow_val_calibration: bool
    seed: int
    keep_decode_float: bool
    ignored_scope: IgnoredScopeParams
    out_dir: str
    precision_table: str
    record: str
    metrics: str


@dataclass(frozen=True)
class Int8EvalParams:
    """`int8_eval:` the INT8 IR measured like the baseline, plus the images that changed most."""

    metrics: str
    per_class: str
    detections: str
    bad_cases: str
    bad_case_conf: float
    bad_case_iou: float
    bootstrap_samples: int
    ci_level: float
    seed: int


@dataclass(frozen=True)
class BenchmarkParams:
    """`benchmark:` benchmark_app on the FP32 and INT8 IRs with identical settings."""

    device: str
    hint: str
    seconds: int
    repeats: int
    max_seconds: float
    ci_level: float
    batch: int
    bf16: bool
    report_dir: str
    metrics: str


@dataclass(frozen=True)
class DivergenceParams:
    """`divergence:` per-layer FP32 vs INT8 comparison on a few images."""

    images: int
    bad_cases: int
    seed: int
    sqnr_floor_db: float
    local_drop_db: float
    concat_range_ratio: float
    top_k: int
    csv: str
    table: str
    plot: str
    metrics: str


@dataclass(frozen=True)
class SensitivityParams:
    """`sensitivity:` rank the INT8 model's quantizer groups by how much float there removes the error."""

    images: int
    conf: float
    rank_quantile: float
    top_k: int
    csv: str
    plot: str
    metrics: str


@dataclass(frozen=True)
class AutofixParams:
    """`autofix:` revert ranked quantizer groups to float until the mAP50-95 drop is within `target_drop`."""

    target_drop: float
    max_evaluations: int
    ci_level: float
    out_dir: str
    steps: str
    scope: str
    metrics: str


@dataclass(frozen=True)
class GatesParams:
    """`gates:` every threshold `make gate` judges the metrics with (null switches an optional gate off)."""

    max_map50_95_drop: float
    max_map50_95_drop_rel: float | None
    min_int8_map50_95: float | None
    max_class_map50_95_drop: float | None
    max_latency_ms: float | None
    min_speedup: float
    min_output_sqnr_db: float
    max_layers_below_sqnr_floor: int
    confidence: float | None
    inconclusive: str
    junit: str
    report_md: str
    report_html: str
    report_bad_cases: int


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

    backend: str
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
    export: ExportParams
    baseline: BaselineParams
    quantize: QuantizeParams
    int8_eval: Int8EvalParams
    benchmark: BenchmarkParams
    divergence: DivergenceParams
    sensitivity: SensitivityParams
    autofix: AutofixParams
    gates: GatesParams
    promote: PromoteParams
    compute: ComputeParams


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    """Read and validate params.yaml; raise QgateError naming the file and the offending key."""
    path = Path(path)
    raw = read_yaml(path, "params file not found; run from the project root or pass --params")
    if not isinstance(raw, dict):
        raise QgateError(f"{path}: expected a mapping of sections at the top level")
    params = _build(Params, raw, path, prefix="")
    _check_values(params, path)
    return params


def _build(cls: type, raw: Any, path: Path, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise QgateError(f"{path}: '{prefix.rstrip('.')}' must be a mapping")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
            raise QgateError(f"{path}: unknown key '{prefix}{key}'{hint}")
    values = {}
    for name in names:
        if name not in raw:
            raise QgateError(f"{path}: missing key '{prefix}{name}'; add it (see the README's params table)")
        values[name] = _coerce(hints[name], raw[name], path, f"{prefix}{name}")
    return cls(**values)


def _coerce(hint: Any, value: Any, path: Path, key: str) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path, prefix=f"{key}.")
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        if value is None:
            value = []
        if not isinstance(value, list):
            raise QgateError(f"{path}: '{key}' must be a list")
        return tuple(_coerce(item, v, path, f"{key}[{i}]") for i, v in enumerate(value))
    expected = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}[hint]
    if hint is bool:
        if not isinstance(value, bool):
            raise QgateError(f"{path}: '{key}' must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, expected):
        raise QgateError(f"{path}: '{key}' must be of type {hint.__name__}, got {value!r}")
    return hint(value)


def _check_values(params: Params, path: Path) -> None:
    _one_of(path, "baseline.inference_precision", params.baseline.inference_precision, INFERENCE_PRECISIONS)
    if params.model.imgsz % 32:
        raise QgateError(f"{path}: 'model.imgsz' is {params.model.imgsz}; use a multiple of 32")
    for section, key in (("baseline", "conf"), ("baseline", "iou"), ("int8_eval", "bad_case_conf"),
                         ("int8_eval", "bad_case_iou")):
        if not 0.0 <= getattr(getattr(params, section), key) <= 1.0:
            raise QgateError(f"{path}: '{section}.{key}' must be within [0, 1]")
    if not params.demo.classes:
        raise QgateError(f"{path}: 'demo.classes' must list at least one class")
    _one_of(path, "quantize.preset", params.quantize.preset, ("performance", "mixed"))
    _one_of(path, "quantize.model_type", params.quantize.model_type, ("none", "transformer"))
    _one_of(path, "benchmark.hint", params.benchmark.hint, ("throughput", "latency"))
    for key in ("subset_size",):
        if getattr(params.quantize, key) < 1:
            raise QgateError(f"{path}: 'quantize.{key}' must be >= 1")
    if params.divergence.images < 1 or params.divergence.bad_cases < 0:
        raise QgateError(f"{path}: 'divergence.images' must be >= 1 and 'divergence.bad_cases' >= 0")
    if not 0.0 <= params.sensitivity.conf <= 1.0 or params.sensitivity.images < 1:
        raise QgateError(f"{path}: 'sensitivity.conf' must be within [0, 1] and 'sensitivity.images' >= 1")
    if not 0.0 < params.sensitivity.rank_quantile <= 1.0:
        raise QgateError(f"{path}: 'sensitivity.rank_quantile' is {params.sensitivity.rank_quantile}; "
                         "use a value in (0, 1], e.g. 0.1")
    if params.autofix.max_evaluations < 1:
        raise QgateError(f"{path}: 'autofix.max_evaluations' is {params.autofix.max_evaluations}; the search needs "
                         "at least 1 full evaluation of the val split (a few are typical: set 8 or more)")
    if params.gates.report_bad_cases < 0:
        raise QgateError(f"{path}: 'gates.report_bad_cases' must be >= 0")
    if params.benchmark.seconds <= 0 or params.benchmark.repeats < 2 or params.benchmark.batch < 1:
        raise QgateError(f"{path}: 'benchmark.seconds' must be > 0, 'repeats' >= 2 (an interval needs two pairs) "
                         f"and 'batch' >= 1; "
                         f"got {params.benchmark.seconds}, {params.benchmark.repeats}, {params.benchmark.batch}")
    _check_statistics(params, path)
    _check_promote(params, path)
    _check_compute(params.compute, path)


def _check_promote(params: Params, path: Path) -> None:
    """Registry names GTO and DVC accept, and a version bump rule."""
    for key, value in (("promote.name", params.promote.name), ("promote.stage", params.promote.stage)):
        if not REGISTRY_NAME.fullmatch(value):
            raise QgateError(f"{path}: '{key}' is {value!r}; use letters, digits, '-', '_' or '/', starting and "
                             "ending with a letter or digit (GTO's rule for artifact and stage names)")
    for key in ("bump", "bump_new_model"):
        _one_of(path, f"promote.{key}", getattr(params.promote, key), ("patch", "minor", "major"))


def _check_compute(compute: ComputeParams, path: Path) -> None:
    """A known backend, a Ray address Ray can join, and positive sizes."""
    _one_of(path, "compute.backend", compute.backend, ("local", "ray"))
    if compute.address is not None and compute.address != "auto" and not RAY_ADDRESS.fullmatch(compute.address):
        raise QgateError(f"{path}: 'compute.address' is {compute.address!r}; use null (a private Ray instance for "
                         "this run), auto (the cluster this machine joined) or ray://host:port / host:port")
    for key in ("workers", "cpus_per_worker", "shard_images"):
        value = getattr(compute, key)
        if value is not None and value < 1:
            raise QgateError(f"{path}: 'compute.{key}' is {value}; use an integer >= 1"
                             + (" or null (one per CPU the cluster reports)" if key == "workers" else ""))
    if compute.timeout_s <= 0:
        raise QgateError(f"{path}: 'compute.timeout_s' is {compute.timeout_s}; use seconds > 0, e.g. 300")


def _check_statistics(params: Params, path: Path) -> None:
    """Interval levels in (0, 1), enough resamples, and the gates judging the level the stages measured."""
    for key, level in (("int8_eval.ci_level", params.int8_eval.ci_level),
                       ("benchmark.ci_level", params.benchmark.ci_level),
                       ("autofix.ci_level", params.autofix.ci_level), ("gates.confidence", params.gates.confidence)):
        if level is not None and not 0.0 < level < 1.0:
            raise QgateError(f"{path}: '{key}' is {level}; use a level in (0, 1), e.g. 0.95")
    if params.int8_eval.bootstrap_samples < MIN_BOOTSTRAP_SAMPLES:
        raise QgateError(f"{path}: 'int8_eval.bootstrap_samples' is {params.int8_eval.bootstrap_samples}; use at "
                         f"least {MIN_BOOTSTRAP_SAMPLES} (1000 takes seconds)")
    _one_of(path, "gates.inconclusive", params.gates.inconclusive, ("fail", "pass"))
    confidence = params.gates.confidence
    for key, level in (("int8_eval.ci_level", params.int8_eval.ci_level),
                       ("benchmark.ci_level", params.benchmark.ci_level)):
        if confidence is not None and level != confidence:
            raise QgateError(f"{path}: 'gates.confidence' is {confidence} but '{key}' is {level}: the gates judge "
                             "the interval the stage measured; set both to the same level")
    if params.benchmark.max_seconds < params.benchmark.seconds * 2 * params.benchmark.repeats:
        raise QgateError(f"{path}: 'benchmark.max_seconds' is {params.benchmark.max_seconds}, less than its "
                         f"{params.benchmark.repeats} first pairs take (2 x {params.benchmark.repeats} x "
                         f"{params.benchmark.seconds} s); raise it")


def _one_of(path: Path, key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise QgateError(f"{path}: '{key}' is {value!r}; use one of {', '.join(allowed)}")
