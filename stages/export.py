"""Ultralytics .pt -> static ONNX -> the runtime's FP32 model, and an export record (hashes, ops, classes, task fields)."""

from __future__ import annotations

import logging
from pathlib import Path

from qgate.cli import run_stage
from qgate.io import atomic_dir, sha256_file, write_json
from qgate.params import Params
from qgate.tasks import TASKS
from qgate.artifacts import model_name, weights_file
from qgate.runtimes import Runtime, runtime_for
from qgate.yolo import ONNX_NAME, export_onnx, load_detector, versions

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Export `model.weights` into `export.out_dir` (replaced atomically) and write the export record."""
    out_dir, record_path = Path(params.export.out_dir), Path(params.export.record)
    record_path.unlink(missing_ok=True)
    model = load_detector(params.model.weights)
    runtime = runtime_for(params)
    with atomic_dir(out_dir) as staging:
        log.info("[1/2] export: %s -> ONNX (opset %d, imgsz %d)", params.model.weights,
                 params.export.opset, params.model.imgsz)
        onnx_path = export_onnx(model, params.model.weights, params.model.imgsz, params.export, staging)
        log.info("[2/2] export: ONNX -> FP32 %s model", runtime.name)
        ir = runtime.from_onnx(onnx_path, params.model.weights, params.export.end2end)
        task = TASKS[model.task]
        shapes = runtime.output_shapes(ir)
        fields = task.export_fields(shapes, model, Path(params.model.dataset))
        layout = task.head_layout(shapes, len(model.names), params.model.weights, fields)
        runtime.save(ir, staging / model_name(params, "fp32"))
        record = _record(params, runtime, model.names, ir, staging) | fields | {
            "task": model.task, "head_layout": layout, "head_decode_ops": len(runtime.decode_ops(ir))}
    write_json(record_path, record)
    log.info("export: %s head, %d decode ops, output %s", layout, record["head_decode_ops"], record["output_shape"])
    return {k: v for k, v in record.items() if isinstance(v, (int, float))}


def _record(params: Params, runtime: Runtime, names: dict, ir, folder: Path) -> dict:
    return {
        "model_sha256": sha256_file(params.model.weights),
        "onnx_sha256": sha256_file(folder / ONNX_NAME),
        "ir_xml_sha256": sha256_file(folder / model_name(params, "fp32")),
        "ir_bin_sha256": sha256_file(weights_file(folder / model_name(params, "fp32"))),
        "weights": params.model.weights,
        "imgsz": params.model.imgsz,
        "opset": params.export.opset,
        "input_shape": runtime.input_shape(ir),
        "output_shape": runtime.output_shapes(ir)[0],
        "num_classes": len(names),
        "class_names": [names[i] for i in sorted(names)],
        "runtime": runtime.name,
        "runtime_version": runtime.version(),
        **runtime.op_inventory(ir),
        "onnx_size_mb": round((folder / ONNX_NAME).stat().st_size / 2**20, 3),
        "ir_size_mb": round(weights_file(folder / model_name(params, "fp32")).stat().st_size / 2**20, 3),
        **versions(),
    }


if __name__ == "__main__":
    run_stage(main, __doc__)
