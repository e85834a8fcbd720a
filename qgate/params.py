"""Load params.yaml into frozen, typed dataclasses; unknown or misspelled keys are errors."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from qgate.errors import QgateError

DEFAULT_PARAMS = Path("params.yaml")
INFERENCE_PRECISIONS = ("f32", "bf16", "f16")


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
class Params:
    """All sections of params.yaml."""

    demo: DemoParams
    model: ModelParams
    export: ExportParams
    baseline: BaselineParams


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    """Read and validate params.yaml; raise QgateError naming the file and the offending key."""
    path = Path(path)
    if not path.is_file():
        raise QgateError(f"{path}: params file not found; run from the project root or pass --params")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise QgateError(f"{path}: not valid YAML ({exc.__class__.__name__}); fix the syntax") from exc
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
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path, prefix=f"{key}.")
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, list) or not value:
            raise QgateError(f"{path}: '{key}' must be a non-empty list")
        return tuple(str(v) for v in value)
    expected = {int: (int,), float: (int, float), str: (str,)}[hint]
    if isinstance(value, bool) or not isinstance(value, expected):
        raise QgateError(f"{path}: '{key}' must be of type {hint.__name__}, got {value!r}")
    return hint(value)


def _check_values(params: Params, path: Path) -> None:
    precision = params.baseline.inference_precision
    if precision not in INFERENCE_PRECISIONS:
        raise QgateError(
            f"{path}: 'baseline.inference_precision' is {precision!r}; use one of {', '.join(INFERENCE_PRECISIONS)}"
        )
    if params.model.imgsz % 32:
        raise QgateError(f"{path}: 'model.imgsz' is {params.model.imgsz}; use a multiple of 32")
    for key in ("conf", "iou"):
        if not 0.0 <= getattr(params.baseline, key) <= 1.0:
            raise QgateError(f"{path}: 'baseline.{key}' must be within [0, 1]")
