"""Rank the INT8 model's quantizer groups by how much of its detection error putting each one in float removes."""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path

import numpy as np

from qgate import group_scores
from qgate.cli import run_stage
from qgate.executors import open_executor
from qgate.dataset import split_images
from qgate.heads import Postprocess
from qgate.intervals import resample_indices
from qgate.io import write_csv, write_json, write_text
from qgate.groups import Group
from qgate.params import Params
from qgate.artifacts import export_record, fp32_model, int8_weights_sha256, model_dataset, require_int8_model
from qgate.plots import sensitivity_figure, svg_text
from qgate.runtimes import runtime_for
from qgate.tasks import task_for

log = logging.getLogger(__name__)

RESAMPLES = 1000  # bootstrap resamples of the ranking images behind `error_removed_low`

COLUMNS = ["rank", "group", "quantizer", "ops", "first_op", "error_removed", "error_removed_low",
           "error_removed_worst", "disagreement_mean", "clip_error_share", "round_error_share", "ignored_names"]


def main(params: Params) -> dict:
    """Score every quantizer group in float, alone, on a spread of val images; write the ranking, plot and metrics."""
    cfg = params.sensitivity
    for output in (cfg.metrics, cfg.csv, cfg.plot):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    int8_path = require_int8_model(params)
    runtime = runtime_for(params)
    fp32, int8 = runtime.read(fp32_model(params)), runtime.read(int8_path)
    groups = runtime.quantizer_groups(int8)
    images = ranking_images(params, record)
    start = time.perf_counter()
    log.info("[1/2] sensitivity: %d quantizer groups, each compiled in float alone, on %d val images",
             len(groups), len(images))
    with open_executor(params.compute) as executor:
        scores = score_groups(params, fp32, int8, groups, images, task_for(record), executor=executor)
    layers = divergence_rows(params)
    rows = (rank(groups, scores, images, clip_shares(layers), cfg.rank_quantile) if scores["base"].sum() > 0
            else [])
    lead, lead_rank = lead_divergent(rows, [r["name"] for r in layers if r.get("divergent") == "1"])
    log.info("[2/2] sensitivity: writing %s", cfg.csv)
    write_csv(cfg.csv, rows, COLUMNS + [f"error_removed_{p.stem}" for p in images])
    write_text(cfg.plot, svg_text(sensitivity_figure(rows[: cfg.top_k])))
    metrics = {
        "groups": len(groups),
        "images": len(images),
        "top_quantizer": rows[0]["quantizer"] if rows else "",
        "top_error_removed": rows[0]["error_removed"] if rows else 0.0,
        "top_first_op": rows[0]["first_op"] if rows else "",
        "clip_error_share": ranked_clip_share(rows),
        "lead_divergent_layer": lead,
        "lead_divergent_rank": lead_rank,
        "int8_detection_error": round(float(np.mean(scores["base"])), 6),
        "seconds": round(time.perf_counter() - start, 2),
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_weights_sha256(params),
    }
    if not rows:
        log.warning("no detection error on any ranking image (FP32 confident nowhere, or INT8 equal to it): "
                    "nothing to rank")
    write_json(cfg.metrics, metrics)
    return metrics


def ranking_images(params: Params, record: dict) -> list[Path]:
    """`sensitivity.images` images spread evenly over the val split (all of it when smaller).

    Not the worst bad cases: on the demo's naive INT8 model those ranked the three groups whose float
    version recovers the most mAP50-95 18th, 10th and 15th, an even spread 2nd, 7th and 3rd
    (`benchmarks/ranking.py`).
    """
    images = split_images(model_dataset(params, record), params.baseline.split)
    count = min(params.sensitivity.images, len(images))
    return [images[i * len(images) // count] for i in range(count)]


def score_groups(params: Params, fp32, int8, groups: list[Group], images: list[Path], task,
                 error=None, executor=None) -> dict:
    """`qgate.group_scores.score_groups` with this project's settings (precision, thresholds, image size)."""
    settings = Postprocess(conf=params.int8_eval.bad_case_conf, iou=params.baseline.iou,
                           max_det=params.baseline.max_det)
    return group_scores.score_groups(runtime_for(params), fp32, int8, groups, images, params.model.imgsz,
                                     params.baseline.inference_precision, settings, params.int8_eval.bad_case_iou,
                                     params.sensitivity.conf, task, error, executor)


def error_removed(scores: dict) -> np.ndarray:
    """Per group, the share of the INT8 detection error summed over the images that its float version removes."""
    # a share of the total, not a mean of per-image shares: one nearly error-free image cannot dominate
    return 1 - scores["errors"].sum(1) / max(float(scores["base"].sum()), 1e-30)


def error_removed_low(scores: dict, quantile: float, resamples: int = RESAMPLES) -> np.ndarray:
    """Per group, the `quantile` of `error_removed` over bootstrap resamples of the images (seeded, repeatable).

    A group whose total comes from one image while it adds error on others ranks below one that removes
    a little everywhere: on the COCO reference the first kind (backbone and neck groups) moved mAP50-95
    by up to 0.006 either way when autofix tried them, the second (head convs) by at most 0.0012.
    """
    base, errors = scores["base"], scores["errors"]
    picks = resample_indices(base.size, resamples, seed=0)
    totals = base[picks].sum(1)
    # a resample of only images without error (FP32 confident nowhere) has no share: left out
    shares = np.where(totals > 0, 1 - errors[:, picks].sum(2) / np.maximum(totals, 1e-30), np.nan)
    return np.nanquantile(shares, quantile, axis=1)


def rank(groups: list[Group], scores: dict, images: list[Path], clip: dict[str, float],
         quantile: float) -> list[dict]:
    """Rows by the low quantile of the share of INT8 detection error removed (`error_removed_low`), largest first."""
    removed, low = error_removed(scores), error_removed_low(scores, quantile)
    base = scores["base"][None, :]
    # nan (a blank cell) where FP32 is confident nowhere: that image has no error to remove
    per_image = np.where(base > 0, 1 - scores["errors"] / np.maximum(base, 1e-30), np.nan)
    order = np.lexsort((-removed, -low))  # by the quantile, equal quantiles by the total
    rows = []
    for position, i in enumerate(order, start=1):
        group = groups[i]
        shares = [clip[name] for name in group.ops if name in clip]
        rows.append({
            "rank": position, "group": int(i), "quantizer": ";".join(group.quantizers), "ops": len(group.ops),
            "first_op": group.ops[0], "error_removed": round(float(removed[i]), 5),
            "error_removed_low": round(float(low[i]), 5),
            "error_removed_worst": round(float(np.nanmin(per_image[i])), 5),
            "disagreement_mean": round(float(scores["disagreements"][i].mean()), 5),
            "clip_error_share": round(max(shares), 4) if shares else "",
            "round_error_share": round(1 - max(shares), 4) if shares else "",  # the two shares add up to 1
            "ignored_names": ";".join(group.ops),
            **{f"error_removed_{p.stem}": "" if np.isnan(per_image[i, j]) else round(float(per_image[i, j]), 5)
               for j, p in enumerate(images)},
        })
    return rows


def divergence_rows(params: Params) -> list[dict]:
    """The divergence stage's per-layer rows (empty if absent)."""
    path = Path(params.divergence.csv)
    if not path.is_file():
        return []
    with open(path) as handle:
        return list(csv.DictReader(handle))


def clip_shares(layers: list[dict]) -> dict[str, float]:
    """Clipping's share of the quantization error per op, from the divergence rows."""
    return {r["name"]: float(r["clip_error_share"]) for r in layers if r["clip_error_share"]}


def ranked_clip_share(rows: list[dict]) -> float:
    """Clipping's share of the ranked groups' quantization error, each group weighted by the detection error float
    there removes: high when what breaks the detections is ranges too narrow (a wider range estimator's case)."""
    weighted = [(max(r["error_removed"], 0.0), r["clip_error_share"]) for r in rows if r["clip_error_share"] != ""]
    total = sum(weight for weight, _ in weighted)
    return round(sum(weight * share for weight, share in weighted) / total, 4) if total else 0.0


def lead_divergent(rows: list[dict], divergent: list[str]) -> tuple[str, int]:
    """Of the divergent layers, the one whose quantizer group ranks highest (its error matters most to the
    detections), with that rank; ('', 0) when no divergent layer is in any ranked group."""
    for row in rows:
        names = set(row["ignored_names"].split(";"))
        found = next((name for name in divergent if name in names), None)
        if found:
            return found, int(row["rank"])
    return "", 0


if __name__ == "__main__":
    run_stage(main, __doc__)
