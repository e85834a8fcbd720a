"""Ultralytics .pt -> static ONNX -> FP32 OpenVINO IR, plus an export record (hashes, ops, classes, task fields)."""

from __future__ import annotations

import logging
from pathlib import Path

import openvino as ov

from qgate.cli import run_stage
from qgate.heads import decode_ops, output_layout
from qgate.io import atomic_dir, sha256_file, write_json
from qgate.params import Params
from qgate.tasks import TASKS
from qgate.artifacts import FP32_IR_NAME, op_inventory
from qgate.yolo import ONNX_NAME, convert_onnx, export_onnx, load_detector, versions

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Export `model.weights` into `export.out_dir` (replaced atomically) and write the export record."""
    out_dir, record_path = Path(params.export.out_dir), Path(params.export.record)
    record_path.unlink(missing_ok=True)
    model = load_detector(params.model.weights)
    with atomic_dir(out_dir) as staging:
        log.info("[1/2] export: %s -> ONNX (opset %d, imgsz %d)", params.model.weights,
                 params.export.opset, params.model.imgsz)
        onnx_path = export_onnx(model, params.model.weights, params.model.imgsz, params.export, staging)
        log.info("[2/2] export: ONNX -> FP32 OpenVINO IR")
        ir = convert_onnx(onnx_path, params.model.weights, params.export.end2end)
        task = TASKS[model.task]
        fields = task.export_fields(ir, model, Path(params.model.dataset))
        layout = output_layout(ir, len(model.names), params.model.weights, task.extra_columns(fields))
        ov.save_model(ir, staging / FP32_IR_NAME, compress_to_fp16=False)  # default would halve weights to FP16
        record = _record(params, model.names, ir, staging) | fields | {"task": model.task, "head_layout": layout,
                                                              "head_decode_ops": len(decode_ops(ir))}
    write_json(record_path, record)
    log.info("export: %s head, %d decode ops, output %s", layout, record["head_decode_ops"], record["output_shape"])
    return {k: v for k, v in record.items() if isinstance(v, (int, float))}


def _record(params: Params, names: dict, ir: ov.Model, folder: Path) -> dict:
    shape = [int(d) for d in ir.inputs[0].get_shape()]
    return {
        "model_sha256": sha256_file(params.model.weights),
        "onnx_sha256": sha256_file(folder / ONNX_NAME),
        "ir_xml_sha256": sha256_file(folder / FP32_IR_NAME),
        "ir_bin_sha256": sha256_file((folder / FP32_IR_NAME).with_suffix(".bin")),
        "weights": params.model.weights,
        "imgsz": params.model.imgsz,
        "opset": params.export.opset,
        "input_shape": shape,
        "output_shape": [int(d) for d in ir.outputs[0].get_shape()],
        "num_classes": len(names),
        "class_names": [names[i] for i in sorted(names)],
        **op_inventory(ir),
        "onnx_size_mb": round((folder / ONNX_NAME).stat().st_size / 2**20, 3),
        "ir_size_mb": round((folder / FP32_IR_NAME).with_suffix(".bin").stat().st_size / 2**20, 3),
        **versions(),
    }


if __name__ == "__main__":
    run_stage(main, __doc__)
