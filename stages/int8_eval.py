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
from qgate.task_metrics import BOX, Scored
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
    task = task_for(record)
    log.info("[2/3] int8_eval: %d paired bootstrap resamples of the %d images", cfg.bootstrap_samples, result.images)
    start = time.perf_counter()
    accuracy = {family: _paired(params, family, baseline, baseline_detections, result)
                for family in task.metrics.scored}
    log.info("bootstrap took %.2f s (logged only: autofix depends on the metrics file)", time.perf_counter() - start)
    log.info("[3/3] int8_eval: ranking images by FP32/INT8 disagreement")
    cases = bad_cases(baseline_detections, result.detections, result.ground_truth["images"],
                      cfg.bad_case_conf, cfg.bad_case_iou, task.match)
    box, *own = task.metrics.scored
    metrics = {
        **drop_metrics(box, baseline, result),
        "images": result.images,
        "instances": result.instances,
        "images_changed": sum(c["disagreement"] > 0 for c in cases),
        "mean_disagreement": round(sum(c["disagreement"] for c in cases) / max(len(cases), 1), 5),
        **interval_metrics(accuracy[box]),
    }
    for family in own:  # masks of a segment model: the same keys, prefixed
        metrics |= drop_metrics(family, baseline, result) | interval_metrics(accuracy[family], family)
    metrics |= {"inference_precision": result.precision, "model_sha256": record["model_sha256"],
                "int8_ir_bin_sha256": int8_ir_sha256(params)}
    write_json(cfg.detections, result.detections)
    write_json(cfg.per_class, result.per_class)
    write_csv(cfg.bad_cases, cases, BAD_CASE_COLUMNS)
    write_json(cfg.metrics, metrics)
    return metrics


def _paired(params: Params, family: Scored, baseline: dict, reference: list[dict], result) -> PairedDrop:
    """The paired bootstrap of one metric family's drop (boxes, masks), around the full-set values measured."""
    cfg = params.int8_eval
    points = (baseline[family.key("map50_95")], result.value(family.key("map50_95")), baseline[family.key("map50")],
              result.value(family.key("map50")))
    return paired_drop(result.ground_truth, reference, result.detections, cfg.bootstrap_samples, cfg.ci_level,
                       cfg.seed, points, family.iou_type)


def drop_metrics(family: Scored, baseline: dict, result) -> dict:
    """INT8's value of one family (`map50_95`, `mask_map50_95`), FP32's, and the absolute and relative drops."""
    fp32, int8 = baseline[family.key("map50_95")], result.value(family.key("map50_95"))
    drop = fp32 - int8
    return {
        family.key("map50_95"): round(int8, 5),
        family.key("map50"): round(result.value(family.key("map50")), 5),
        f"baseline_{family.key('map50_95')}": fp32,
        family.key("map50_95_drop"): round(drop, 5),
        family.key("map50_95_drop_rel"): round(drop / fp32, 5) if fp32 else 0.0,
        family.key("map50_drop"): round(baseline[family.key("map50")] - result.value(family.key("map50")), 5),
    }


def interval_metrics(paired: PairedDrop, family: Scored = BOX) -> dict:
    """The bootstrap intervals as flat metrics: drops, each model's value, and the drop this val set resolves.

    The level and the resample count are written once, with the boxes' intervals.
    """
    drop, rel, key = paired.map50_95_drop, paired.map50_95_drop_rel, family.key
    return {
        key("map50_95_drop_ci_low"): round(drop.low, 5), key("map50_95_drop_ci_high"): round(drop.high, 5),
        key("map50_95_drop_rel_ci_low"): round(rel.low, 5), key("map50_95_drop_rel_ci_high"): round(rel.high, 5),
        key("map50_drop_ci_low"): round(paired.map50_drop.low, 5),
        key("map50_drop_ci_high"): round(paired.map50_drop.high, 5),
        key("map50_95_ci_low"): round(paired.int8_map50_95.low, 5),
        key("map50_95_ci_high"): round(paired.int8_map50_95.high, 5),
        f"baseline_{key('map50_95')}_ci_low": round(paired.fp32_map50_95.low, 5),
        f"baseline_{key('map50_95')}_ci_high": round(paired.fp32_map50_95.high, 5),
        key("map50_95_drop_resolution"): round(drop.half_width, 5),
        **({"ci_level": drop.level, "bootstrap_samples": paired.samples} if family.is_box else {}),
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
