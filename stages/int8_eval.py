"""INT8 IR -> mAP measured exactly like the FP32 baseline, the drop, and the images that changed most."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from qgate.cli import run_stage
from qgate.compare import BAD_CASE_COLUMNS, bad_cases
from qgate.backends import open_executor
from qgate.errors import QgateError
from qgate.intervals import PairedDrop, paired_drop
from qgate.io import read_json, write_csv, write_json
from qgate.params import Params
from qgate.artifacts import export_record, int8_ir_sha256, require_int8_ir
from qgate.pipeline import evaluate_ir
from qgate.tasks import task_for

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Evaluate the INT8 IR; compare with the baseline's metrics and detections."""
    cfg = params.int8_eval
    for output in (cfg.metrics, cfg.per_class, cfg.detections, cfg.bad_cases):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    baseline, baseline_detections = _baseline(params, record)
    ir_path = require_int8_ir(params)
    log.info("[1/3] int8_eval: evaluating the INT8 IR")
    with open_executor(params.compute) as executor:
        result = evaluate_ir(params, ir_path, record, executor)
    log.info("[2/3] int8_eval: %d paired bootstrap resamples of the %d images", cfg.bootstrap_samples, result.images)
    start = time.perf_counter()
    paired = paired_drop(result.ground_truth, baseline_detections, result.detections, cfg.bootstrap_samples,
                         cfg.ci_level, cfg.seed, (baseline["map50_95"], result.map50_95, baseline["map50"],
                                                  result.map50))
    log.info("bootstrap took %.2f s (logged only: autofix depends on the metrics file)", time.perf_counter() - start)
    log.info("[3/3] int8_eval: ranking images by FP32/INT8 disagreement")
    cases = bad_cases(baseline_detections, result.detections, result.ground_truth["images"],
                      cfg.bad_case_conf, cfg.bad_case_iou, task_for(record).match)
    drop = baseline["map50_95"] - result.map50_95
    metrics = {
        "map50_95": round(result.map50_95, 5),
        "map50": round(result.map50, 5),
        "baseline_map50_95": baseline["map50_95"],
        "map50_95_drop": round(drop, 5),
        "map50_95_drop_rel": round(drop / baseline["map50_95"], 5) if baseline["map50_95"] else 0.0,
        "map50_drop": round(baseline["map50"] - result.map50, 5),
        "images": result.images,
        "instances": result.instances,
        "images_changed": sum(c["disagreement"] > 0 for c in cases),
        "mean_disagreement": round(sum(c["disagreement"] for c in cases) / max(len(cases), 1), 5),
        **interval_metrics(paired),
        "inference_precision": result.precision,
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_ir_sha256(params),
    }
    write_json(cfg.detections, result.detections)
    write_json(cfg.per_class, result.per_class)
    write_csv(cfg.bad_cases, cases, BAD_CASE_COLUMNS)
    write_json(cfg.metrics, metrics)
    return metrics


def interval_metrics(paired: PairedDrop) -> dict:
    """The bootstrap intervals as flat metrics: drops, each model's mAP, and the drop this val set resolves."""
    drop, rel = paired.map50_95_drop, paired.map50_95_drop_rel
    return {
        "map50_95_drop_ci_low": round(drop.low, 5), "map50_95_drop_ci_high": round(drop.high, 5),
        "map50_95_drop_rel_ci_low": round(rel.low, 5), "map50_95_drop_rel_ci_high": round(rel.high, 5),
        "map50_drop_ci_low": round(paired.map50_drop.low, 5), "map50_drop_ci_high": round(paired.map50_drop.high, 5),
        "map50_95_ci_low": round(paired.int8_map50_95.low, 5), "map50_95_ci_high": round(paired.int8_map50_95.high, 5),
        "baseline_map50_95_ci_low": round(paired.fp32_map50_95.low, 5),
        "baseline_map50_95_ci_high": round(paired.fp32_map50_95.high, 5),
        "map50_95_drop_resolution": round(drop.half_width, 5),
        "ci_level": drop.level, "bootstrap_samples": paired.samples,
    }


def _baseline(params: Params, record: dict) -> tuple[dict, list[dict]]:
    metrics_path, detections_path = Path(params.baseline.metrics), Path(params.baseline.detections)
    if not metrics_path.is_file() or not detections_path.is_file():
        raise QgateError(f"{metrics_path}: baseline metrics or detections missing; run `dvc repro baseline`")
    baseline = read_json(metrics_path)
    if baseline.get("model_sha256") != record["model_sha256"]:
        raise QgateError(f"{metrics_path}: measured another model than {params.export.record}; "
                         "run `dvc repro baseline`")
    return baseline, read_json(detections_path)


if __name__ == "__main__":
    run_stage(main, __doc__)
