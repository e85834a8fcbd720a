"""FP32 OpenVINO IR + dataset val split -> pycocotools mAP at an explicit inference precision."""

from __future__ import annotations

import logging
from pathlib import Path

from qgate.cli import run_stage
from qgate.dataset import load_dataset, split_images, validate_labels
from qgate.errors import QgateError
from qgate.evaluator import Postprocess, compile_model, evaluate, measured_precision
from qgate.io import read_json, sha256_file, write_json
from qgate.params import Params
from stages.export import IR_NAME

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Evaluate the exported FP32 IR; write metrics, per-class AP and the detections."""
    cfg = params.baseline
    for output in (cfg.metrics, cfg.per_class, cfg.detections):
        Path(output).unlink(missing_ok=True)
    ir_path = Path(params.export.out_dir) / IR_NAME
    record = _export_record(params, ir_path)
    dataset = load_dataset(params.model.dataset)
    if list(dataset.names) != record["class_names"]:
        raise QgateError(f"{dataset.yaml_path}: {len(dataset.names)} class names differ from the model's "
                         f"{record['num_classes']}; use the dataset the model was trained on")
    images = split_images(dataset, cfg.split)
    validate_labels(images, len(dataset.names))
    log.info("[1/1] baseline: %d %s images at %s precision", len(images), cfg.split, cfg.inference_precision)
    compiled = compile_model(ir_path, cfg.inference_precision)
    result = evaluate(compiled, images, dataset.names, params.model.imgsz,
                      Postprocess(conf=cfg.conf, iou=cfg.iou, max_det=cfg.max_det))
    metrics = {
        "map50_95": round(result.map50_95, 5),
        "map50": round(result.map50, 5),
        "images": result.images,
        "instances": result.instances,
        "detections": len(result.detections),
        "images_per_second": round(result.images_per_second, 2),
        "inference_precision": measured_precision(compiled),
        "requested_precision": cfg.inference_precision,
        "model_sha256": record["model_sha256"],
        "ir_bin_sha256": record["ir_bin_sha256"],
    }
    write_json(cfg.detections, result.detections)
    write_json(cfg.per_class, result.per_class)
    write_json(cfg.metrics, metrics)
    return metrics


def _export_record(params: Params, ir_path: Path) -> dict:
    record_path = Path(params.export.record)
    if not ir_path.is_file() or not record_path.is_file():
        raise QgateError(f"{ir_path}: FP32 IR or its export record is missing; run `dvc repro export`")
    record = read_json(record_path)
    if sha256_file(ir_path.with_suffix(".bin")) != record["ir_bin_sha256"]:
        raise QgateError(f"{ir_path}: IR does not match {record_path}; re-run `dvc repro export`")
    return record


if __name__ == "__main__":
    run_stage(main, __doc__)
