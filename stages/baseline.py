"""FP32 model + dataset val split -> the task's metrics (pycocotools mAP) at an explicit inference precision, on the
runtime deployed to."""

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
    """Evaluate the exported FP32 model; write its metrics, per class, and the detections."""
    cfg = params.baseline
    for output in (cfg.metrics, cfg.per_class, cfg.detections):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    log.info("[1/1] baseline")
    with open_executor(params.compute) as executor:
        result = evaluate_model(params, fp32_model(params), record, executor)
    # no timings here: int8_eval depends on this file, and a wall-clock field would re-run it for nothing
    metrics = {
        **{key: round(value, 5) for key, value in result.metrics.items()},  # boxes, then masks or keypoints
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
