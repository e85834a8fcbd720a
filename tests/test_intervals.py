"""qgate.intervals: weighted re-accumulation equals pycocotools, intervals cover what they should, speed pairs."""

from __future__ import annotations

import numpy as np
import pytest

from qgate.cocoeval import coco_map
from qgate.params import load_params
from qgate.intervals import (ImageMatches, PairedScorer, difference, paired_drop, ratio_interval, resample_indices,
                             resample_weights)
from qgate.verdicts import FAIL, INCONCLUSIVE, PASS, verdict


def synthetic_pair(images: int, seed: int, classes: int = 5, miss_rate: float = 0.25):
    """Ground truth, a reference model's detections and a worse candidate's (it misses and jitters more).

    Class `classes + 1` is named but never present (an absent class); scores are rounded so ties happen.
    """
    rng = np.random.default_rng(seed)
    gt_images = [{"id": i, "file_name": f"{i}.jpg", "height": 100, "width": 100} for i in range(images)]
    annotations, reference, candidate = [], [], []
    for i in range(images):
        for _ in range(rng.integers(0, 5)):
            x, y = rng.uniform(0, 70, 2)
            w, h = rng.uniform(5, 30, 2)
            c = int(rng.integers(1, classes + 1))
            annotations.append({"id": len(annotations) + 1, "image_id": i, "category_id": c, "bbox": [x, y, w, h],
                                "area": w * h, "iscrowd": 0})
            score = round(float(rng.uniform(0.3, 1.0)), 2)
            jitter = rng.normal(0, 1.5, 2)
            reference.append({"image_id": i, "category_id": c, "bbox": [x + jitter[0], y + jitter[1], w, h],
                              "score": score})
            if rng.random() > miss_rate:
                jitter = rng.normal(0, 3.0, 2)
                candidate.append({"image_id": i, "category_id": c, "bbox": [x + jitter[0], y + jitter[1], w, h],
                                  "score": round(score * rng.uniform(0.8, 1.0), 2)})
        for _ in range(rng.integers(0, 8)):  # background false positives, the same in both models
            noise = {"image_id": i, "category_id": int(rng.integers(1, classes + 1)),
                     "bbox": list(rng.uniform(0, 60, 4)), "score": round(float(rng.uniform(0, 0.5)), 2)}
            reference.append(noise)
            candidate.append(dict(noise))
    categories = [{"id": c + 1, "name": str(c)} for c in range(classes + 1)]
    return {"images": gt_images, "annotations": annotations, "categories": categories}, reference, candidate


def _subset(ground_truth: dict, detections: list[dict], keep: set[int]) -> tuple[dict, list[dict]]:
    return ({**ground_truth, "images": [i for i in ground_truth["images"] if i["id"] in keep],
             "annotations": [a for a in ground_truth["annotations"] if a["image_id"] in keep]},
            [d for d in detections if d["image_id"] in keep])


def test_every_weight_one_is_pycocotools_bit_for_bit():
    ground_truth, reference, candidate = synthetic_pair(80, seed=1)
    for detections in (reference, candidate):
        expected = coco_map(ground_truth, detections)[:2]
        measured = ImageMatches(ground_truth, detections).map(np.ones((1, 80), dtype=np.int64))
        assert (measured[0][0], measured[1][0]) == expected  # exact, not approximate


def test_zero_one_weights_are_pycocotools_on_the_kept_images():
    ground_truth, reference, _ = synthetic_pair(60, seed=2)
    weights = (np.random.default_rng(0).random((6, 60)) < 0.6).astype(np.int64)
    map50_95, map50 = ImageMatches(ground_truth, reference).map(weights)
    for row in range(len(weights)):
        keep = set(np.flatnonzero(weights[row]).tolist())
        assert (map50_95[row], map50[row]) == coco_map(*_subset(ground_truth, reference, keep))[:2]


def test_weights_above_one_are_pycocotools_on_the_images_repeated_crowds_included():
    """A resample draws an image k times: its mAP is pycocotools' on a set holding that image k times. Crowd regions
    make which detection is ignored depend on the IoU threshold (the path where no running count is shared)."""
    ground_truth, reference, _ = synthetic_pair(40, seed=8)
    for index, detection in enumerate(reference):  # distinct scores: an image's copies of a detection sort together
        detection["score"] += index * 1e-7
    for annotation in ground_truth["annotations"][::7]:
        annotation["iscrowd"] = 1
    weights = np.random.default_rng(9).integers(0, 4, (4, 40))
    map50_95, map50 = ImageMatches(ground_truth, reference).map(weights)
    for row in range(len(weights)):
        repeated = {"images": [], "annotations": [], "categories": ground_truth["categories"]}
        detections = []
        for image in ground_truth["images"]:
            for copy in range(weights[row, image["id"]]):
                new_id = image["id"] * 10 + copy
                repeated["images"].append({**image, "id": new_id})
                repeated["annotations"] += [{**a, "id": len(repeated["annotations"]) + n + 1, "image_id": new_id}
                                            for n, a in enumerate(a for a in ground_truth["annotations"]
                                                                  if a["image_id"] == image["id"])]
                detections += [{**d, "image_id": new_id} for d in reference if d["image_id"] == image["id"]]
        assert (map50_95[row], map50[row]) == coco_map(repeated, detections)[:2]


def test_resample_weights_count_the_drawn_indices():
    picks, weights = resample_indices(30, 5, seed=3), resample_weights(30, 5, seed=3)
    assert weights.shape == (5, 30) and (weights.sum(1) == 30).all()
    assert all((np.bincount(picks[r], minlength=30) == weights[r]).all() for r in range(5))


def test_identical_models_have_a_zero_width_drop_interval():
    ground_truth, reference, _ = synthetic_pair(40, seed=4)
    paired = paired_drop(ground_truth, reference, [dict(d) for d in reference], samples=200, level=0.95, seed=0)
    assert (paired.drop.low, paired.drop.point, paired.drop.high) == (0.0, 0.0, 0.0)
    assert paired.fp32.low < paired.fp32.point < paired.fp32.high


def test_the_interval_covers_the_population_drop():
    """Draw val sets from a large synthetic population: the 90% interval holds the population's drop in most."""
    population, reference, candidate = synthetic_pair(1500, seed=5)
    true_drop = coco_map(population, reference)[0] - coco_map(population, candidate)[0]
    assert true_drop > 0.02  # the candidate really is worse
    rng, covered, draws = np.random.default_rng(6), 0, 20
    for draw in range(draws):
        keep = set(rng.choice(1500, 150, replace=False).tolist())
        ground_truth, ref = _subset(population, reference, keep)
        _, cand = _subset(population, candidate, keep)
        drop = paired_drop(ground_truth, ref, cand, samples=300, level=0.9, seed=draw).drop
        assert drop.low < drop.point < drop.high
        covered += drop.low <= true_drop <= drop.high
    assert covered >= 15, f"the 90% interval covered the population drop in {covered} of {draws} val sets"


def test_the_scorer_pairs_models_on_the_same_resamples():
    ground_truth, reference, candidate = synthetic_pair(60, seed=7)
    scorer = PairedScorer(ground_truth, samples=300, seed=0)
    ref, cand = scorer.scores(reference)[0], scorer.scores(candidate)[0]
    paired = difference(ref, cand, 0.95)
    unpaired = difference(ref, np.roll(cand, 1), 0.95)  # the candidate scored on other resamples
    assert paired.point == pytest.approx(ref[0] - cand[0])
    assert paired.half_width < unpaired.half_width  # pairing removes the image mix from the noise


@pytest.mark.parametrize("direction, point, low, high, expected", [
    ("<=", 0.002, -0.003, 0.007, PASS), ("<=", 0.02, 0.012, 0.028, FAIL), ("<=", 0.008, 0.002, 0.014, INCONCLUSIVE),
    (">=", 1.5, 1.4, 1.6, PASS), (">=", 1.1, 1.0, 1.2, FAIL), (">=", 1.3, 1.2, 1.4, INCONCLUSIVE),
])
def test_verdict_on_the_interval(direction, point, low, high, expected):
    limit = 0.01 if direction == "<=" else 1.25
    assert verdict(direction, point, low, high, limit, confidence=0.95) == expected
    point_verdict = verdict(direction, point, low, high, limit, confidence=None)
    assert point_verdict == (PASS if (point <= limit if direction == "<=" else point >= limit) else FAIL)


def test_ratio_interval_of_pairs():
    steady = ratio_interval([200.0, 202.0, 198.0, 201.0], [100.0, 101.0, 99.0, 100.0], 0.95)
    assert steady.point == pytest.approx(2.0, abs=0.01) and steady.low < 2.0 < steady.high
    assert steady.high - steady.low < 0.05
    noisy = ratio_interval([200.0, 150.0, 250.0, 180.0], [100.0, 100.0, 100.0, 100.0], 0.95)
    assert noisy.high - noisy.low > 10 * (steady.high - steady.low)


@pytest.mark.slow
def test_every_weight_one_is_pycocotools_on_the_demo(demo_checkout, monkeypatch):
    """The demo pipeline's own FP32 and INT8 detections, against its ground truth."""
    import json

    monkeypatch.chdir(demo_checkout)  # the demo yaml's `path` is relative to the project root

    import cv2

    from qgate.dataset import coco_ground_truth, load_dataset, split_images

    params = load_params(demo_checkout / "params.yaml")
    dataset = load_dataset(demo_checkout / params.model.dataset)
    images = split_images(dataset, params.baseline.split)
    shapes = [cv2.imread(str(path)).shape[:2] for path in images]
    ground_truth = coco_ground_truth(images, shapes, dataset.names)
    for name in ("baseline_detections.json", "int8_detections.json"):
        detections = json.loads((demo_checkout / "artifacts" / name).read_text())
        expected = coco_map(ground_truth, detections)[:2]
        measured = ImageMatches(ground_truth, detections).map(np.ones((1, len(images)), dtype=np.int64))
        assert (measured[0][0], measured[1][0]) == expected, name
