"""FP32 vs INT8 per-image agreement: matching and the bad-case ranking."""

from __future__ import annotations

import pytest

from qgate.compare import bad_cases, match


def _det(image, cls, box, score=0.9):
    return {"image_id": image, "category_id": cls, "bbox": box, "score": score}


def test_match_needs_same_class_and_iou():
    ref = [_det(0, 1, [0, 0, 10, 10]), _det(0, 2, [50, 50, 10, 10])]
    cand = [_det(0, 1, [1, 0, 10, 10]), _det(0, 1, [50, 50, 10, 10])]
    ious = match(ref, cand, 0.5)
    assert ious == [pytest.approx(90 / 110)]


def test_bad_cases_rank_changed_images_first():
    images = [{"id": i, "file_name": f"{i}.jpg"} for i in range(3)]
    fp32 = [_det(0, 1, [0, 0, 10, 10]), _det(1, 1, [0, 0, 10, 10]), _det(1, 2, [20, 20, 10, 10]),
            _det(2, 1, [0, 0, 10, 10], score=0.1)]
    int8 = [_det(0, 1, [0, 0, 10, 10]), _det(1, 1, [0, 0, 10, 10]), _det(2, 1, [30, 30, 5, 5], score=0.1)]
    rows = bad_cases(fp32, int8, images, conf=0.25, iou=0.5)
    assert [r["image_id"] for r in rows] == [1, 0, 2]
    assert rows[0]["disagreement"] == pytest.approx(0.5)  # one of two confident detections lost
    assert rows[0]["fp32_detections"] == 2 and rows[0]["int8_detections"] == 1 and rows[0]["matched"] == 1
    assert rows[1]["disagreement"] == 0.0 and rows[2]["disagreement"] == 0.0  # image 2: below conf in both
    assert [r["rank"] for r in rows] == [1, 2, 3]
