"""Seconds for the paired bootstrap of the mAP drop: qgate's weighted re-accumulation vs pycocotools per resample.

Runs baseline, quantize and int8_eval with the repository's params (outputs in a temporary folder), then
times `qgate.intervals` on the FP32 and INT8 detections: pycocotools' per-image matching once per model,
then 1000 weighted re-accumulations; and the naive way, a new pycocotools evaluation of a resampled
dataset (duplicated images get new ids) per resample, on a few resamples, extrapolated to 1000. Prints
the intervals, and how far the two ways' resampled drops differ on the same resamples (duplicates tie
differently in pycocotools' sort, nothing else differs).

    python benchmarks/bootstrap.py                                    # the demo (after `dvc repro baseline`)
    python benchmarks/bootstrap.py --reference ../shared/reference    # official yolov8n + COCO128 at 640
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

from qgate.cpu import cpu_info, describe  # noqa: E402
from benchmarks.peers import benchmark_case  # noqa: E402
from qgate.cocoeval import coco_map  # noqa: E402
from qgate.intervals import ImageMatches, interval, resample_indices, resample_weights  # noqa: E402
from qgate.io import read_json  # noqa: E402
from qgate.artifacts import export_record, int8_model  # noqa: E402
from qgate.pipeline import evaluate_model  # noqa: E402
from stages import baseline, int8_eval, quantize  # noqa: E402

SAMPLES, NAIVE_SAMPLES = 1000, 5


def resampled_dataset(ground_truth: dict, detections: list[dict], picks: np.ndarray) -> tuple[dict, list[dict]]:
    """The resample as a dataset of its own: drawn image k becomes image k, with copies of its boxes."""
    by_image: dict[int, list] = {}
    for d in detections:
        by_image.setdefault(d["image_id"], []).append(d)
    annotations_by_image: dict[int, list] = {}
    for a in ground_truth["annotations"]:
        annotations_by_image.setdefault(a["image_id"], []).append(a)
    images, annotations, dets = [], [], []
    for new_id, old_id in enumerate(int(i) for i in picks):
        images.append({**ground_truth["images"][old_id], "id": new_id})
        annotations += [{**a, "id": len(annotations) + k + 1, "image_id": new_id}
                        for k, a in enumerate(annotations_by_image.get(old_id, []))]
        dets += [{**d, "image_id": new_id} for d in by_image.get(old_id, [])]
    return {**ground_truth, "images": images, "annotations": annotations}, dets


def main() -> None:
    with benchmark_case(__doc__.splitlines()[0]) as (params, work):
        baseline.main(params)
        quantize.main(params)
        metrics = int8_eval.main(params)
        result = evaluate_model(params, int8_model(params), export_record(params))
        ground_truth, fp32, int8 = result.ground_truth, read_json(params.baseline.detections), result.detections
        images = len(ground_truth["images"])
        picks = resample_indices(images, SAMPLES, params.int8_eval.seed)
        weights = resample_weights(images, SAMPLES, params.int8_eval.seed)  # the counts of those same picks

        start = time.perf_counter()
        fp32_matches, int8_matches = ImageMatches(ground_truth, fp32), ImageMatches(ground_truth, int8)
        match_seconds = time.perf_counter() - start
        fp32_maps, int8_maps = fp32_matches.map(weights)[0], int8_matches.map(weights)[0]
        qgate_seconds = time.perf_counter() - start

        start = time.perf_counter()
        naive = [coco_map(*resampled_dataset(ground_truth, fp32, picks[r]))[0]
                 - coco_map(*resampled_dataset(ground_truth, int8, picks[r]))[0] for r in range(NAIVE_SAMPLES)]
        naive_seconds = (time.perf_counter() - start) / NAIVE_SAMPLES * SAMPLES
        drops = fp32_maps - int8_maps
        level = params.int8_eval.ci_level
        drop = interval(metrics["map50_95_drop"], drops, level)
        print(f"\n{params.model.weights} at imgsz {params.model.imgsz}, {images} '{params.baseline.split}' images, "
              f"{len(fp32)} FP32 / {len(int8)} INT8 detections; CPU {describe(cpu_info())}, {os.cpu_count()} cores")
        print(f"{'approach (both models, ' + str(SAMPLES) + ' resamples)':<62}{'seconds':>10}")
        print(f"{'qgate: pycocotools evaluate once per model (part of the next row)':<62}{match_seconds:>10.2f}")
        print(f"{'qgate: that + weighted re-accumulation of every resample':<62}{qgate_seconds:>10.2f}")
        print(f"{'naive: pycocotools per resample (' + str(NAIVE_SAMPLES) + ' timed, extrapolated)':<62}"
              f"{naive_seconds:>10.1f}")
        print(f"speed-up {naive_seconds / qgate_seconds:.0f}x")
        print(f"largest |naive - weighted| resampled drop over the {NAIVE_SAMPLES} shared resamples: "
              f"{max(abs(n - d) for n, d in zip(naive, drops)):.5f}")
        fp32_ci = interval(metrics["baseline_map50_95"], fp32_maps, level)
        int8_ci = interval(metrics["map50_95"], int8_maps, level)
        print(f"FP32 mAP50-95 {fp32_ci.text()}\nINT8 mAP50-95 {int8_ci.text()}\ndrop          {drop.text()}: "
              f"this val set resolves drops of about {drop.half_width:.4f}")


if __name__ == "__main__":
    main()
