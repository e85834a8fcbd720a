"""qgate.operating_point on hand-made detections: P, R and F1 at a threshold, the score shift, the advised threshold."""

from __future__ import annotations

import numpy as np
import pytest

from qgate.cocoeval import coco_map, matched
from qgate.intervals import ImageMatches, resample_weights
from qgate.operating_point import Found, _weighted_medians, at_threshold
from tests.conftest import pycocotools_stats
from tests.test_intervals import synthetic_pair


def _found(truth: dict, detections: list[dict], sizes: bool = True) -> Found:
    return Found.of(matched(truth, detections, sizes=sizes), len(truth["images"]))


def _weights(images: int, samples: int = 300) -> np.ndarray:
    return np.vstack([np.ones((1, images), dtype=np.int64), resample_weights(images, samples, 0)])


def _box(image: int, x: float, score: float, category: int = 1) -> dict:
    return {"image_id": image, "category_id": category, "bbox": [x, 10.0, 20.0, 20.0], "score": score}


def test_counts_on_a_hand_made_split():
    """Two images, three objects: a hit at 0.9, a hit at 0.3, a false detection at 0.8 and one of the wrong class;
    the third object is never found."""
    truth = {"images": [{"id": i, "file_name": f"{i}.jpg", "height": 100, "width": 100} for i in range(2)],
             "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
             "annotations": [{"id": 1, "image_id": 0, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 400,
                              "iscrowd": 0},
                             {"id": 2, "image_id": 1, "category_id": 1, "bbox": [50, 10, 20, 20], "area": 400,
                              "iscrowd": 0},
                             {"id": 3, "image_id": 1, "category_id": 2, "bbox": [10, 60, 20, 20], "area": 400,
                              "iscrowd": 0}]}
    detections = [_box(0, 10, 0.9), _box(1, 50, 0.3), _box(0, 70, 0.8), _box(1, 10, 0.95, category=1)]
    found = _found(truth, detections)
    ones = np.ones((1, 2), dtype=np.int64)
    at_half = {rate: float(value[0]) for rate, value in found.rates(0.5, ones).items()}
    assert at_half == pytest.approx({"precision": 1 / 3, "recall": 1 / 3, "f1": 1 / 3})
    at_low = {rate: float(value[0]) for rate, value in found.rates(0.25, ones).items()}
    assert at_low == pytest.approx({"precision": 2 / 4, "recall": 2 / 3, "f1": 2 * (0.5 * 2 / 3) / (0.5 + 2 / 3)})
    assert found.threshold_for_recall(2 / 3) == 0.3 and found.threshold_for_recall(1.0) is None
    nothing = Found.nothing(2, found.objects)
    assert {rate: float(v[0]) for rate, v in nothing.rates(0.25, ones).items()} == {"precision": 0, "recall": 0,
                                                                                  "f1": 0}


def test_a_score_shift_that_keeps_the_ranking_keeps_map_and_costs_recall():
    """Every INT8 score x 0.6 (a monotonic shift): mAP50-95 is the same number, recall at 0.25 falls beyond its
    interval, the shift's interval lies below 0, and the advised threshold finds what FP32 finds at 0.25."""
    truth, reference, _ = synthetic_pair(120, seed=5)
    shifted = [{**d, "score": d["score"] * 0.6} for d in reference]
    assert coco_map(truth, shifted)[:2] == coco_map(truth, reference)[:2]
    fp32, int8 = _found(truth, reference), _found(truth, shifted)
    point = at_threshold(fp32, int8, 0.5, 0.5, _weights(120), 0.95)
    assert point.drop["recall"].low > 0.1 and point.drop["f1"].low > 0
    assert point.score_shift.high < 0 and point.shifted_objects > 50
    assert point.advised_int8_conf == pytest.approx(0.3, abs=0.006)  # 0.5 x 0.6, to the 2-decimal scores
    restored = at_threshold(fp32, int8, 0.5, point.advised_int8_conf, _weights(120), 0.95)
    assert restored.int8["recall"].point >= restored.fp32["recall"].point
    assert restored.drop["recall"].low <= 0 <= restored.drop["recall"].high
    assert round(restored.int8["recall"].point, 5) == point.advised_int8["recall"]


def test_identical_models_have_zero_drops_and_no_shift():
    truth, reference, _ = synthetic_pair(60, seed=6)
    fp32, int8 = _found(truth, reference), _found(truth, [dict(d) for d in reference])
    point = at_threshold(fp32, int8, 0.25, 0.25, _weights(60), 0.95)
    assert all((i.low, i.point, i.high) == (0.0, 0.0, 0.0) for i in point.drop.values())
    assert (point.score_shift.low, point.score_shift.point, point.score_shift.high) == (0.0, 0.0, 0.0)
    fields = point.fields("mask_")
    assert fields["mask_recall_at_conf_drop"] == 0.0 and "mask_baseline_recall_at_conf" not in fields
    assert fields["baseline_mask_recall_at_conf"] == fields["mask_recall_at_conf"]


def test_weighted_median_is_the_median_of_the_drawn_values():
    rng = np.random.default_rng(1)
    values = np.sort(rng.normal(size=9))
    weights = rng.integers(0, 3, (40, 9))
    weights[0] = 1
    expected = [np.median(np.repeat(values, row)) if row.sum() else np.nan for row in weights]
    assert np.allclose(_weighted_medians(values, weights.astype(float)), expected, equal_nan=True)


def test_sizes_leave_the_all_range_as_it_was():
    """Matching with COCO's size ranges too changes nothing of the 'all' range the mAP and its intervals read."""
    truth, reference, _ = synthetic_pair(50, seed=7)
    weights = _weights(50, 20)
    plain = ImageMatches(truth, reference).map(weights)
    sized = ImageMatches(truth, reference, evaluator=matched(truth, reference, sizes=True)).map(weights)
    assert all((a == b).all() for a, b in zip(plain, sized))


def test_per_size_map_is_pycocotools_summarize():
    """The paired bootstrap's full-set mAP50-95 of one size range is pycocotools' own stats[3:6] (the reference's
    int8.json is checked the same way in test_reference.py)."""
    truth, reference, _ = synthetic_pair(80, seed=8)
    for annotation in truth["annotations"][::3]:  # some large objects too
        annotation["area"] *= 30
    evaluator = matched(truth, reference, sizes=True)
    ones = np.ones((1, 80), dtype=np.int64)
    measured = [ImageMatches(truth, reference, evaluator=evaluator, area=size).map(ones)[0][0]
                for size in ("small", "medium", "large")]
    assert measured == pytest.approx(list(pycocotools_stats(truth, reference)[3:6]), abs=1e-12)
