"""Rank the INT8 model's quantizer groups by how much of the INT8 error on the bad cases float there removes."""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path

import numpy as np
import openvino as ov

from qgate.cli import run_stage
from qgate.compare import match
from qgate.dataset import split_images
from qgate.evaluator import Postprocess, decode, image_tensor, to_coco
from qgate.io import write_csv, write_json, write_text
from qgate.mixed import SWITCH_INPUT, Group, quantizer_groups, revert
from qgate.params import Params
from qgate.pipeline import (export_record, fp32_ir, int8_ir_sha256, model_dataset, require_int8_ir,
                            require_output)
from qgate.plots import sensitivity_figure, svg_text

log = logging.getLogger(__name__)

COLUMNS = ["rank", "group", "quantizer", "ops", "first_op", "error_removed_mean", "error_removed_worst",
           "disagreement_mean", "clip_error_share", "round_error_share", "ignored_names"]


def main(params: Params) -> dict:
    """Score every quantizer group in float, alone, on the worst bad cases; write the ranking, plot and metrics."""
    cfg = params.sensitivity
    for output in (cfg.metrics, cfg.csv, cfg.plot):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    int8_path = require_int8_ir(params)
    core = ov.Core()
    fp32, int8 = core.read_model(fp32_ir(params)), core.read_model(int8_path)
    groups = quantizer_groups(int8)
    images = bad_case_images(params, record)
    start = time.perf_counter()
    log.info("[1/2] sensitivity: %d quantizer groups on %d bad cases", len(groups), len(images))
    scores = score_groups(params, core, fp32, int8, groups, images) if images else None
    rows = rank(groups, scores, images, clip_shares(params)) if scores else []
    log.info("[2/2] sensitivity: writing %s", cfg.csv)
    case_columns = [f"error_removed_{p.stem}" for p in images]
    write_csv(cfg.csv, rows, COLUMNS + case_columns)
    write_text(cfg.plot, svg_text(sensitivity_figure(rows[: cfg.top_k])))
    metrics = {
        "groups": len(groups),
        "bad_cases": len(images),
        "top_quantizer": rows[0]["quantizer"] if rows else "",
        "top_error_removed": rows[0]["error_removed_mean"] if rows else 0.0,
        "int8_output_mse": round(float(np.mean(scores["base"])), 8) if scores else 0.0,
        "seconds": round(time.perf_counter() - start, 2),
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_ir_sha256(params),
    }
    if not images:
        log.warning("no bad case in %s (every image agrees): nothing to rank", params.int8_eval.bad_cases)
    write_json(cfg.metrics, metrics)
    return metrics


def bad_case_images(params: Params, record: dict) -> list[Path]:
    """The worst `sensitivity.images` images of int8_eval's bad cases that changed at all (disagreement > 0)."""
    by_name = {p.name: p for p in split_images(model_dataset(params, record), params.baseline.split)}
    with open(require_output(params.int8_eval.bad_cases, "int8_eval")) as handle:
        rows = [r for r in csv.DictReader(handle) if float(r["disagreement"]) > 0 and r["file_name"] in by_name]
    return [by_name[r["file_name"]] for r in rows[: params.sensitivity.images]]


def score_groups(params: Params, core: ov.Core, fp32: ov.Model, int8: ov.Model, groups: list[Group],
                 images: list[Path]) -> dict:
    """Output error (MSE against FP32 on confident anchors) and detection disagreement, per group and image."""
    config = {"INFERENCE_PRECISION_HINT": params.baseline.inference_precision}
    reference = core.compile_model(fp32, "CPU", config).create_infer_request()
    request = core.compile_model(revert(int8, fp32, groups), "CPU", config).create_infer_request()
    settings = Postprocess(conf=params.int8_eval.bad_case_conf, iou=params.baseline.iou,
                           max_det=params.baseline.max_det)
    n = len(groups)
    errors, disagreements, base = np.zeros((n, len(images))), np.zeros((n, len(images))), np.zeros(len(images))
    for j, path in enumerate(images):
        x = image_tensor(path, params.model.imgsz)
        fp32_out = reference.infer({0: x})[0][0].copy()
        fp32_dets = to_coco(decode(fp32_out, settings), 0)
        quantized = request.infer({0: x, SWITCH_INPUT: np.zeros(n, bool)})[0][0].copy()
        mask = confident(fp32_out, quantized, params.sensitivity.conf)
        base[j] = _mse(quantized, fp32_out, mask)
        for i in range(n):
            switches = np.zeros(n, bool)
            switches[i] = True
            out = request.infer({0: x, SWITCH_INPUT: switches})[0][0]
            errors[i, j] = _mse(out, fp32_out, mask)
            disagreements[i, j] = _disagreement(fp32_dets, to_coco(decode(out, settings), 0),
                                                params.int8_eval.bad_case_iou)
    return {"base": base, "errors": errors, "disagreements": disagreements}


def confident(fp32_out: np.ndarray, int8_out: np.ndarray, conf: float) -> np.ndarray:
    """Anchors where FP32 or INT8 scores any class at least `conf` (the ones that become detections)."""
    mask = np.maximum(fp32_out[4:].max(0), int8_out[4:].max(0)) >= conf
    return mask if mask.any() else np.ones_like(mask)  # nothing confident: compare every anchor


def _mse(out: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> float:
    return float(np.mean((out[:, mask] - reference[:, mask]) ** 2))


def _disagreement(reference: list[dict], candidate: list[dict], iou: float) -> float:
    total = max(len(reference), len(candidate))
    return 1 - sum(match(reference, candidate, iou)) / total if total else 0.0


def rank(groups: list[Group], scores: dict, images: list[Path], clip: dict[str, float]) -> list[dict]:
    """Rows by mean share of the INT8 output error removed, largest first."""
    removed = 1 - scores["errors"] / np.maximum(scores["base"], 1e-30)[None, :]
    order = np.argsort(-removed.mean(1), kind="stable")
    rows = []
    for position, i in enumerate(order, start=1):
        group = groups[i]
        shares = [clip[name] for name in group.ops if name in clip]
        rows.append({
            "rank": position, "group": int(i), "quantizer": group.quantizer, "ops": len(group.ops),
            "first_op": group.ops[0], "error_removed_mean": round(float(removed[i].mean()), 5),
            "error_removed_worst": round(float(removed[i].min()), 5),
            "disagreement_mean": round(float(scores["disagreements"][i].mean()), 5),
            "clip_error_share": round(max(shares), 4) if shares else "",
            "round_error_share": round(1 - max(shares), 4) if shares else "",  # the two shares add up to 1
            "ignored_names": ";".join(group.ops),
            **{f"error_removed_{p.stem}": round(float(removed[i, j]), 5) for j, p in enumerate(images)},
        })
    return rows


def clip_shares(params: Params) -> dict[str, float]:
    """Clipping's share of the quantization error per op, from the divergence stage (empty if absent)."""
    path = Path(params.divergence.csv)
    if not path.is_file():
        return {}
    with open(path) as handle:
        return {r["name"]: float(r["clip_error_share"]) for r in csv.DictReader(handle) if r["clip_error_share"]}


if __name__ == "__main__":
    run_stage(main, __doc__)
