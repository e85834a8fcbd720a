"""Where the stages' models live, the export record that ties them to the .pt (and the dataset to its classes)."""

from __future__ import annotations

from pathlib import Path

from qgate.dataset import Dataset
from qgate.errors import QgateError
from qgate.io import read_json, sha256_file
from qgate.params import Params
from qgate.deploy import RUNTIMES



def model_name(params: Params, precision: str) -> str:
    """The file name of a model at `precision` (fp32, int8) in the runtime's format: `model_int8.xml`, ..."""
    return f"model_{precision}{RUNTIMES[params.deploy.runtime].model_suffix}"


def weights_file(model: Path) -> Path:
    """The file holding a saved model's weights (an IR's .bin; an ONNX file itself): its identity."""
    suffixes = {d.model_suffix: d.weights_suffix for d in RUNTIMES.values()}
    return model.with_suffix(suffixes.get(model.suffix, model.suffix))


def fp32_model(params: Params) -> Path:
    """Path of the exported FP32 model."""
    return Path(params.export.out_dir) / model_name(params, "fp32")


def int8_model(params: Params) -> Path:
    """Path of the quantized INT8 model."""
    return Path(params.quantize.out_dir) / model_name(params, "int8")


def fixed_model(params: Params) -> Path:
    """Path of autofix's INT8 model (the plain INT8 model's copy when nothing needed fixing)."""
    return Path(params.autofix.out_dir) / model_name(params, "int8")


def require_output(path: str | Path, stage: str) -> Path:
    """An upstream stage's output; an error saying which stage to run when it is missing."""
    path = Path(path)
    if not path.is_file():
        raise QgateError(f"{path}: missing; run `dvc repro {stage}`")
    return path


def require_int8_model(params: Params) -> Path:
    """The INT8 model's path; an error saying which stage to run when it is missing."""
    path = int8_model(params)
    if not path.is_file():
        raise QgateError(f"{path}: INT8 model is missing; run `dvc repro quantize`")
    return path


def int8_weights_sha256(params: Params) -> str:
    """sha256 of the INT8 model's weights: ties INT8 metrics to the exact quantized model they measured."""
    return sha256_file(weights_file(int8_model(params)))


def export_record(params: Params) -> dict:
    """The export record, checked against the FP32 model on disk (a stale or missing one is an error)."""
    record_path, model_path = Path(params.export.record), fp32_model(params)
    if not model_path.is_file() or not record_path.is_file():
        raise QgateError(f"{model_path}: FP32 model or its export record is missing; run `dvc repro export`")
    record = read_json(record_path)
    if sha256_file(weights_file(model_path)) != record["ir_bin_sha256"]:
        raise QgateError(f"{model_path}: model does not match {record_path}; re-run `dvc repro export`")
    return record


def model_dataset(params: Params, record: dict) -> Dataset:
    """The dataset of `model.dataset` in the layout the record's task reads, whose class names must be the model's."""
    from qgate.tasks import task_for  # here: the gates read this module and must not import a task's scoring

    dataset = task_for(record).dataset(params.model.dataset)
    if list(dataset.names) != record["class_names"]:
        raise QgateError(f"{dataset.yaml_path}: {len(dataset.names)} class names differ from the model's "
                         f"{record['num_classes']}; use the dataset the model was trained on")
    return dataset
