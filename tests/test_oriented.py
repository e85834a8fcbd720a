"""Oriented boxes (OBB): ProbIoU, rotated NMS and mAP are Ultralytics' own (its functions on the same inputs give
the same numbers), hand-made cases score as they must, labels without an angle are refused, and an exported OBB
model's detections are Ultralytics' predict() of the same ONNX."""

from __future__ import annotations

import numpy as np
import pytest

from qgate import offline
from qgate.errors import QgateError
from qgate.heads import Postprocess
from qgate.rotated_boxes import corners_to_xywhr, fast_nms, paired_probiou, probiou, xywhr_to_corners
from qgate.rotated_map import OrientedMatches, OrientedScorer, oriented_map
from qgate.tasks import Oriented


def _truth(boxes_by_image: list[list[tuple[int, list[float]]]], classes: int = 3) -> dict:
    """A ground truth of oriented boxes: per image, (class id, xywhr) pairs."""
    truth = {"images": [{"id": i, "file_name": f"{i}.jpg", "height": 200, "width": 200}
                        for i in range(len(boxes_by_image))],
             "categories": [{"id": c + 1, "name": f"c{c}"} for c in range(classes)], "annotations": []}
    for image, boxes in enumerate(boxes_by_image):
        for category_id, box in boxes:
            truth["annotations"].append({"id": len(truth["annotations"]) + 1, "image_id": image,
                                         "category_id": category_id, "rbox": box})
    return truth


def _detection(image: int, category_id: int, box: list[float], score: float) -> dict:
    return {"image_id": image, "category_id": category_id, "rbox": list(box), "score": score}


def _random_case(seed: int, images: int = 12, classes: int = 3) -> tuple[dict, list[dict]]:
    """Objects of every class but the last, detections near them (some of the wrong class) and strays."""
    rng = np.random.default_rng(seed)
    boxes, detections = [], []
    for image in range(images):
        own = []
        for _ in range(rng.integers(0, 5)):
            box = [*rng.uniform(20, 180, 2), *rng.uniform(8, 60, 2), rng.uniform(-np.pi / 4, 3 * np.pi / 4)]
            category_id = int(rng.integers(1, classes))
            own.append((category_id, box))
            for _ in range(rng.integers(0, 3)):
                moved = np.array(box) + np.r_[rng.normal(0, 4, 2), rng.normal(0, 3, 2), rng.normal(0, 0.2)]
                label = category_id if rng.random() > 0.2 else int(rng.integers(1, classes + 1))
                detections.append(_detection(image, label, moved.tolist(), float(rng.uniform(0.01, 1))))
        for _ in range(rng.integers(0, 3)):
            stray = [*rng.uniform(20, 180, 2), *rng.uniform(8, 60, 2), 0.3]
            detections.append(_detection(image, int(rng.integers(1, classes + 1)), stray, float(rng.uniform(0.01, 1))))
        boxes.append(own)
    return _truth(boxes, classes), detections


def _ultralytics_map(truth: dict, detections: list[dict]) -> tuple[float, float]:
    """mAP50-95 and mAP50 by Ultralytics' own OBB steps: batch_probiou, match_predictions, ap_per_class."""
    offline.configure()
    import torch
    from ultralytics.engine.validator import BaseValidator
    from ultralytics.utils.metrics import ap_per_class, batch_probiou

    validator = BaseValidator.__new__(BaseValidator)  # only match_predictions and its IoU thresholds are used
    validator.iouv = torch.linspace(0.5, 0.95, 10)
    hits, scores, predicted, true = [], [], [], []
    for image in truth["images"]:
        own = sorted((d for d in detections if d["image_id"] == image["id"]), key=lambda d: -d["score"])
        objects = [a for a in truth["annotations"] if a["image_id"] == image["id"]]
        true += [a["category_id"] for a in objects]
        if not own:
            continue
        classes = torch.tensor([d["category_id"] for d in own])
        if objects:
            overlap = batch_probiou(torch.tensor([a["rbox"] for a in objects], dtype=torch.float32),
                                    torch.tensor([d["rbox"] for d in own], dtype=torch.float32))
            hits.append(validator.match_predictions(classes, torch.tensor([a["category_id"] for a in objects]),
                                                    overlap).numpy())
        else:
            hits.append(np.zeros((len(own), 10), dtype=bool))
        scores += [d["score"] for d in own]
        predicted += [d["category_id"] for d in own]
    ap = ap_per_class(np.concatenate(hits), np.array(scores), np.array(predicted), np.array(true))[5]
    return float(ap.mean()), float(ap[:, 0].mean())


@pytest.mark.parametrize("seed", range(4))
def test_oriented_map_is_ultralytics_obb_validator_s(seed):
    truth, detections = _random_case(seed)
    ours = oriented_map(truth, detections)[:2]
    assert 0.05 < ours[0] < ours[1] < 1  # neither trivial nor perfect
    assert ours == pytest.approx(_ultralytics_map(truth, detections), abs=1e-12)


def test_probiou_and_fast_nms_are_ultralytics_own():
    """ProbIoU within float32 noise of `batch_probiou`; Fast-NMS keeps exactly the boxes `TorchNMS.fast_nms` keeps
    (classes apart by Ultralytics' 7680-pixel offset there), in the same order."""
    offline.configure()
    import torch
    from ultralytics.utils.metrics import batch_probiou
    from ultralytics.utils.nms import TorchNMS

    rng = np.random.default_rng(0)
    boxes = np.c_[rng.uniform(0, 100, (600, 2)), rng.uniform(2, 40, (600, 2)),
                  rng.uniform(-np.pi / 4, 3 * np.pi / 4, 600)].astype(np.float32)
    np.testing.assert_allclose(probiou(boxes, boxes), batch_probiou(boxes, boxes).numpy(), atol=2e-4)
    scores, classes = rng.uniform(0, 1, 600).astype(np.float32), rng.integers(0, 3, 600)
    offset = np.c_[boxes[:, :2] + classes[:, None] * 7680, boxes[:, 2:]]
    theirs = TorchNMS.fast_nms(torch.from_numpy(offset), torch.from_numpy(scores), 0.3, iou_func=batch_probiou)
    ours = fast_nms(boxes, scores, classes, 0.3)
    assert 50 < len(ours) < 550  # some boxes go, some stay
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_a_box_turned_90_degrees_is_its_axis_aligned_twin():
    """(w, h, 0) and (h, w, pi/2) are one box: same corners, ProbIoU of a box with itself, a perfect score."""
    flat, turned = [100, 80, 60, 20, 0.0], [100, 80, 20, 60, np.pi / 2]
    np.testing.assert_allclose(np.sort(xywhr_to_corners([flat])[0], 0), np.sort(xywhr_to_corners([turned])[0], 0),
                               atol=1e-9)
    assert paired_probiou([flat], [turned])[0] == pytest.approx(paired_probiou([flat], [flat])[0], abs=1e-6)
    assert corners_to_xywhr(xywhr_to_corners([turned])) == pytest.approx(np.array([flat]), abs=1e-4)
    truth = _truth([[(1, flat)]], classes=1)
    perfect = oriented_map(truth, [_detection(0, 1, flat, 0.9)])[:2]
    assert perfect == pytest.approx((0.995, 0.995), abs=1e-12)  # Ultralytics' AP tops out there (its trapezoid)
    assert oriented_map(truth, [_detection(0, 1, turned, 0.9)])[:2] == perfect
    askew = [100, 80, 20, 60, np.pi / 4]  # turned 45 degrees instead: far from the object at 0.5
    assert oriented_map(truth, [_detection(0, 1, askew, 0.9)])[:2] == (0.0, 0.0)


def test_an_image_without_objects_counts_only_its_false_detections():
    """A detection on an image without objects lowers precision; an image with neither changes nothing; a
    split without objects scores 0; a class predicted but absent is not in the mean."""
    box = [50, 50, 30, 10, 0.3]
    found = [_detection(0, 1, box, 0.9)]
    alone = oriented_map(_truth([[(1, box)]]), found)[:2]
    assert alone == pytest.approx((0.995, 0.995), abs=1e-12)
    assert oriented_map(_truth([[(1, box)], []]), found)[:2] == alone  # nothing there, nothing found
    stray = found + [_detection(1, 1, box, 0.95)]  # a more confident detection where there is nothing
    worse = oriented_map(_truth([[(1, box)], []]), stray)
    assert worse[1] < alone[1] - 0.1
    assert worse[:2] == pytest.approx(_ultralytics_map(_truth([[(1, box)], []]), stray), abs=1e-12)
    assert oriented_map(_truth([[(1, box)]]), found + [_detection(0, 3, box, 0.99)])[:2] == alone
    nothing = oriented_map(_truth([[], []]), stray)
    assert nothing[:2] == (0.0, 0.0) and all(row["map50_95"] is None for row in nothing[2])


def test_every_resample_weight_one_is_the_full_set_and_resamples_pair():
    truth, detections = _random_case(0)
    scorer = OrientedScorer(truth, 200, seed=0)
    main, second = scorer.scores(detections)
    assert (main[0], second[0]) == oriented_map(truth, detections)[:2]
    assert np.std(main[1:]) > 0.01  # resamples move it
    same = scorer.scores(detections, OrientedMatches.of(truth, detections))
    np.testing.assert_array_equal(same[0], main)
    with pytest.raises(QgateError, match="gates.max_small_map50_95_drop to null"):
        scorer.scores(detections, area="small")


def test_a_label_without_an_angle_is_refused_naming_its_line(tmp_path):
    (tmp_path / "labels").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "labels" / "a.txt").write_text("0 0.1 0.1 0.5 0.1 0.5 0.4 0.1 0.4\n1 0.5 0.5 0.2 0.2\n")
    with pytest.raises(QgateError, match=r"a\.txt:2: an oriented-box label is 'class x1 y1 x2 y2 x3 y3 x4 y4'"):
        Oriented().labels(tmp_path / "images" / "a.jpg", ("ellipse", "rectangle"))


def test_the_obb_head_is_ultralytics_nms_on_a_raw_output():
    """Rows of one raw output [4+nc+1, anchors]: the boxes, scores and classes Ultralytics' own non_max_suppression
    (rotated, multi-label, class-aware) keeps, in its order."""
    offline.configure()
    import torch
    from ultralytics.utils.nms import non_max_suppression

    rng = np.random.default_rng(1)
    anchors, classes = 400, 3
    output = np.r_[rng.uniform(0, 128, (2, anchors)), rng.uniform(4, 40, (2, anchors)),
                   rng.uniform(0, 1, (classes, anchors)) ** 3, rng.uniform(-np.pi / 4, 3 * np.pi / 4, (1, anchors))]
    output = output.astype(np.float32)
    settings = Postprocess(conf=0.2, iou=0.5, max_det=100)
    ours = Oriented().head.detections(output, settings)
    theirs = non_max_suppression(torch.from_numpy(output[None]), settings.conf, settings.iou, nc=classes,
                                 multi_label=True, max_det=settings.max_det, rotated=True)[0].numpy()
    assert 20 < len(ours) <= 100
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-5)


@pytest.mark.model
def test_a_detection_dataset_given_to_an_obb_model_stops_baseline_in_one_line(tmp_path):
    """Export reads no labels; the first stage that does names the label line, what an OBB label is and that the
    dataset is the wrong task's; exit 2 and no metrics file."""
    from tests.conftest import assert_fails_cleanly, make_dataset, stage_in_process, write_params
    from tests.test_families import tiny_detector

    weights = tiny_detector(tmp_path / "model", "v8/yolov8-obb.yaml", task="obb")
    dataset = make_dataset(tmp_path / "data", images=2, task="detect")
    write_params(tmp_path, weights, dataset, imgsz=64)
    assert stage_in_process("export", tmp_path).returncode == 0
    assert_fails_cleanly("baseline", tmp_path, [".txt:1: an oriented-box label is 'class x1 y1 x2 y2 x3 y3 x4 y4'",
                                                "an OBB model is judged on an OBB dataset"], "metrics/baseline.json")
