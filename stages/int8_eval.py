"""INT8 model -> mAP measured exactly like the FP32 baseline, the drop, and the images that changed most."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from qgate.cli import run_stage
from qgate.compare import BAD_CASE_COLUMNS, bad_cases
from qgate.executors import open_executor
from qgate.errors import QgateError
from qgate.cocoeval import area_entries, counted_objects
from qgate.intervals import PairedDrop, scoring_weights
from qgate.io import read_json, write_csv, write_json
from qgate.operating_point import Found, at_threshold, int8_conf
from qgate.params import Params
from qgate.artifacts import export_record, int8_weights_sha256, require_int8_model
from qgate.pipeline import evaluate_model
from qgate.task_metrics import Scored
from qgate.tasks import Detect, task_for

log = logging.getLogger(__name__)

SIZES = ("small", "medium", "large")  # COCO's object area ranges: under 32^2, to 96^2, above (original pixels)


def main(params: Params) -> dict:
    """Evaluate the INT8 model; compare with the baseline's metrics and detections."""
    cfg = params.int8_eval
    for output in (cfg.metrics, cfg.per_class, cfg.detections, cfg.bad_cases):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    baseline, baseline_detections = _baseline(params, record)
    ir_path = require_int8_model(params)
    log.info("[1/3] int8_eval: evaluating the INT8 model")
    with open_executor(params.compute) as executor:
        result = evaluate_model(params, ir_path, record, executor)
    task = task_for(record)
    log.info("[2/3] int8_eval: %d paired bootstrap resamples of the %d images", cfg.bootstrap_samples, result.images)
    start = time.perf_counter()
    matches = {family: _matched(task, result, baseline_detections, family) for family in task.metrics.scored}
    accuracy = {family: _paired(params, task, family, baseline, baseline_detections, result, matches[family])
                for family in task.metrics.scored}
    weights = scoring_weights(len(result.ground_truth["images"]), cfg.bootstrap_samples, cfg.seed)
    log.info("bootstrap took %.2f s (logged only: autofix depends on the metrics file)", time.perf_counter() - start)
    log.info("[3/3] int8_eval: ranking images by FP32/INT8 disagreement")
    objects = task.metrics.objects  # a classifier's bad case is any image whose class changed, at any confidence
    cases = bad_cases(baseline_detections, result.detections, result.ground_truth["images"],
                      cfg.bad_case_conf if objects else 0.0, cfg.bad_case_iou, task.match)
    box, *own = task.metrics.scored
    metrics = {
        **drop_metrics(box, baseline, result),
        "images": result.images,
        "instances": result.instances,
        "images_changed": sum(c["disagreement"] > 0 for c in cases),
        "mean_disagreement": round(sum(c["disagreement"] for c in cases) / max(len(cases), 1), 5),
        **interval_metrics(accuracy[box], box),
        **({"deploy_conf": params.deploy.conf, "deploy_int8_conf": int8_conf(params.deploy)}
           if task.metrics.deployment_analyses else {}),
    }
    for family in own:  # masks of a segment model: the same keys, prefixed
        metrics |= drop_metrics(family, baseline, result) | interval_metrics(accuracy[family], family)
    if task.metrics.deployment_analyses:  # at the deployed threshold, and per object size
        for family in task.metrics.scored:
            metrics |= _operating_point(params, family, result, matches[family], weights)
            metrics |= _size_drops(params, task, family, baseline_detections, result, matches[family])
    metrics |= {"inference_precision": result.precision, "model_sha256": record["model_sha256"],
                "int8_ir_bin_sha256": int8_weights_sha256(params)}
    write_json(cfg.detections, result.detections)
    write_json(cfg.per_class, result.per_class)
    write_csv(cfg.bad_cases, cases, BAD_CASE_COLUMNS)
    write_json(cfg.metrics, metrics)
    return metrics


def _matched(task: Detect, result, reference: list[dict], family: Scored) -> tuple:
    """pycocotools' matching of FP32's and INT8's detections, every area range (None for a model that found
    nothing): the mAP intervals, the per-size drops and the operating point all read it."""
    return tuple(task.matched(family, result.ground_truth, detections, sizes=True)
                 for detections in (reference, result.detections))


def _paired(params: Params, task: Detect, family: Scored, baseline: dict, reference: list[dict], result,
            matches: tuple) -> PairedDrop:
    """The paired bootstrap of one metric family's drop (boxes, masks), around the full-set values measured."""
    cfg = params.int8_eval
    points = (baseline[family.main.key], result.value(family.main.key), baseline[family.second.key],
              result.value(family.second.key))
    return task.paired(family, result.ground_truth, reference, result.detections, cfg.bootstrap_samples,
                       cfg.ci_level, cfg.seed, points, matches)


def _operating_point(params: Params, family: Scored, result, matches: tuple, weights) -> dict:
    """Precision, recall and F1 of FP32 at `deploy.conf` and INT8 at its own, paired; the score shift; the advice."""
    images = len(result.ground_truth["images"])
    found = [Found.of(evaluator, images) if evaluator else None for evaluator in matches]
    objects = next((f.objects for f in found if f), np.zeros(images, dtype=np.int64))
    fp32, int8 = (f or Found.nothing(images, objects) for f in found)
    point = at_threshold(fp32, int8, params.deploy.conf, int8_conf(params.deploy), weights,
                         params.int8_eval.ci_level)
    return point.fields(family.prefix)


def _size_drops(params: Params, task: Detect, family: Scored, reference: list[dict], result, matches: tuple) -> dict:
    """mAP50-95 of FP32 and INT8 on the objects of each COCO size range (pycocotools' stats[3:6]), the drop with
    its paired interval, and how many objects the range holds; null values for a range without objects."""
    cfg = params.int8_eval
    evaluator = next((m for m in matches if m is not None), None)
    if evaluator is None:
        return {}
    out = {}
    for area in SIZES:
        objects = (sum(counted_objects(e) for entries in area_entries(evaluator, area) for e in entries
                       if e is not None)
                   if area in evaluator.params.areaRngLbl else 0)  # keypoints: no small range
        key = family.key(f"{area}_map50_95")
        out[f"{family.prefix}{area}_objects"] = objects
        if not objects:
            out |= {key: None, f"baseline_{key}": None, f"{key}_drop": None}
            continue
        paired = task.paired(family, result.ground_truth, reference, result.detections, cfg.bootstrap_samples,
                             cfg.ci_level, cfg.seed, matches=matches, area=area)
        out |= (paired.int8.fields(key, 5) | paired.fp32.fields(f"baseline_{key}", 5)
                | paired.drop.fields(f"{key}_drop", 5))
    return out


def drop_metrics(family: Scored, baseline: dict, result) -> dict:
    """INT8's value of one family (`map50_95`, `mask_map50_95`), FP32's, and the absolute and relative drops."""
    fp32, int8 = baseline[family.main.key], result.value(family.main.key)
    drop = fp32 - int8
    return {
        family.main.key: round(int8, 5),
        family.second.key: round(result.value(family.second.key), 5),
        f"baseline_{family.main.key}": fp32,
        family.main.stat("drop"): round(drop, 5),
        family.main.stat("drop_rel"): round(drop / fp32, 5) if fp32 else 0.0,
        family.second.stat("drop"): round(baseline[family.second.key] - result.value(family.second.key), 5),
    }


def interval_metrics(paired: PairedDrop, family: Scored) -> dict:
    """The bootstrap intervals of one family as flat metrics: drops, each model's value, and the drop this val set
    resolves.

    The level and the resample count are written once, with the unprefixed family's (boxes, a classifier's classes).
    """
    main, second = family.main, family.second
    return {
        main.stat("drop_ci_low"): round(paired.drop.low, 5), main.stat("drop_ci_high"): round(paired.drop.high, 5),
        main.stat("drop_rel_ci_low"): round(paired.drop_rel.low, 5),
        main.stat("drop_rel_ci_high"): round(paired.drop_rel.high, 5),
        second.stat("drop_ci_low"): round(paired.second_drop.low, 5),
        second.stat("drop_ci_high"): round(paired.second_drop.high, 5),
        main.stat("ci_low"): round(paired.int8.low, 5),
        main.stat("ci_high"): round(paired.int8.high, 5),
        f"baseline_{main.key}_ci_low": round(paired.fp32.low, 5),
        f"baseline_{main.key}_ci_high": round(paired.fp32.high, 5),
        main.stat("drop_resolution"): round(paired.drop.half_width, 5),
        **({"ci_level": paired.drop.level, "bootstrap_samples": paired.samples} if family.unprefixed else {}),
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
