"""Where the stages' models live, the export record that ties them to the .pt (and the dataset to its classes)."""

from __future__ import annotations

import collections
from pathlib import Path

from qgate.dataset import Dataset, load_dataset
from qgate.errors import QgateError
from qgate.io import read_json, sha256_file
from qgate.params import Params

FP32_IR_NAME = "model_fp32.xml"
INT8_IR_NAME = "model_int8.xml"
INVENTORY_SKIPPED = {"Constant", "Parameter", "Result"}  # renamed or re-created freely by graph passes


def fp32_ir(params: Params) -> Path:
    """Path of the exported FP32 IR."""
    return Path(params.export.out_dir) / FP32_IR_NAME


def int8_ir(params: Params) -> Path:
    """Path of the quantized INT8 IR."""
    return Path(params.quantize.out_dir) / INT8_IR_NAME


def fixed_ir(params: Params) -> Path:
    """Path of autofix's INT8 IR (the plain INT8 IR's copy when nothing needed fixing)."""
    return Path(params.autofix.out_dir) / INT8_IR_NAME


def require_output(path: str | Path, stage: str) -> Path:
    """An upstream stage's output; an error saying which stage to run when it is missing."""
    path = Path(path)
    if not path.is_file():
        raise QgateError(f"{path}: missing; run `dvc repro {stage}`")
    return path


def require_int8_ir(params: Params) -> Path:
    """The INT8 IR's path; an error saying which stage to run when it is missing."""
    path = int8_ir(params)
    if not path.is_file():
        raise QgateError(f"{path}: INT8 IR is missing; run `dvc repro quantize`")
    return path


def int8_ir_sha256(params: Params) -> str:
    """sha256 of the INT8 IR's weights: ties INT8 metrics to the exact quantized model they measured."""
    return sha256_file(int8_ir(params).with_suffix(".bin"))


def op_inventory(model) -> dict:
    """Op counts by type and the friendly names of the computing ops (constants aside) of an OpenVINO model."""
    ops = model.get_ordered_ops()
    types = collections.Counter(op.get_type_name() for op in ops)
    return {
        "ir_op_count": len(ops),
        "ir_op_types": dict(sorted(types.items())),
        "ir_op_names": sorted(op.get_friendly_name() for op in ops if op.get_type_name() not in INVENTORY_SKIPPED),
    }


def fake_quantize_count(model) -> int:
    """The FakeQuantize ops NNCF inserted in an OpenVINO model: how much of it runs in INT8."""
    return sum(op.get_type_name() == "FakeQuantize" for op in model.get_ops())


def export_record(params: Params) -> dict:
    """The export record, checked against the FP32 IR on disk (a stale or missing one is an error)."""
    record_path, ir_path = Path(params.export.record), fp32_ir(params)
    if not ir_path.is_file() or not record_path.is_file():
        raise QgateError(f"{ir_path}: FP32 IR or its export record is missing; run `dvc repro export`")
    record = read_json(record_path)
    if sha256_file(ir_path.with_suffix(".bin")) != record["ir_bin_sha256"]:
        raise QgateError(f"{ir_path}: IR does not match {record_path}; re-run `dvc repro export`")
    return record


def model_dataset(params: Params, record: dict) -> Dataset:
    """The dataset of `model.dataset`, whose class names must be the model's."""
    dataset = load_dataset(params.model.dataset)
    if list(dataset.names) != record["class_names"]:
        raise QgateError(f"{dataset.yaml_path}: {len(dataset.names)} class names differ from the model's "
                         f"{record['num_classes']}; use the dataset the model was trained on")
    return dataset
