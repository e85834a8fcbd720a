"""FP32 model + dataset val split -> pycocotools mAP at an explicit inference precision, on the runtime deployed to."""

from __future__ import annotations

import logging
from pathlib import Path

from qgate.cli import run_stage
from qgate.executors import open_executor
from qgate.io import write_json
from qgate.params import Params
from qgate.artifacts import export_record, fp32_model
from qgate.pipeline import evaluate_model

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Evaluate the exported FP32 model; write metrics, per-class AP and the detections."""
    cfg = params.baseline
    for output in (cfg.metrics, cfg.per_class, cfg.detections):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    log.info("[1/1] baseline")
    with open_executor(params.compute) as executor:
        result = evaluate_model(params, fp32_model(params), record, executor)
    # no timings here: int8_eval depends on this file, and a wall-clock field would re-run it for nothing
    metrics = {
        "map50_95": round(result.map50_95, 5),
        "map50": round(result.map50, 5),
        **{key: round(value, 5) for key, value in result.task_metrics.items()},  # masks' mAP of a segment model
        "images": result.images,
        "instances": result.instances,
        "detections": len(result.detections),
        "inference_precision": result.precision,
        "requested_precision": cfg.inference_precision,
        "model_sha256": record["model_sha256"],
        "ir_bin_sha256": record["ir_bin_sha256"],
    }
    write_json(cfg.detections, result.detections)
    write_json(cfg.per_class, result.per_class)
    write_json(cfg.metrics, metrics)
    return metrics


if __name__ == "__main__":
    run_stage(main, __doc__)
