"""Segment masks: decode equal to Ultralytics' own steps, RLE and scoring checked on hand-made cases."""

import numpy as np
import pytest

from qgate.cocoeval import coco_map
from qgate.dataset import coco_segment_truth
from qgate.heads import End2EndHead, Postprocess, RawHead
from qgate.masks import instance_masks, mask_iou, rle
from qgate.preprocess import Letterbox
from qgate.tasks import Detect, Segment


@pytest.mark.parametrize("hw0, hw, pad", [((120, 160), (120, 160), (0, 20)), ((300, 400), (120, 160), (0, 20)),
                                          ((100, 50), (160, 80), (40, 0))], ids=["same-size", "down", "up-portrait"])
def test_masks_equal_ultralytics_process_mask_native_then_scale_masks(hw0, hw, pad):
    torch = pytest.importorskip("torch")
    from ultralytics.utils import ops

    rng = np.random.default_rng(0)
    protos = rng.normal(size=(32, 40, 40)).astype(np.float32)
    coefficients = rng.normal(size=(6, 32)).astype(np.float32)
    boxes = np.array([[10.3, 20.7, 90.2, 130.5], [0, 0, 160, 160], [-5, 30, 50.5, 60], [100, 100, 101, 101],
                      [40, 40, 40, 40], [12.5, 3, 150, 159.99]], np.float32)
    ours = list(instance_masks(coefficients, protos, boxes, 160, Letterbox(hw0, hw, pad)))
    theirs = ops.process_mask_native(torch.from_numpy(protos), torch.from_numpy(coefficients),
                                     torch.from_numpy(boxes), (160, 160))
    theirs = ops.scale_masks(theirs[None], hw0, ratio_pad=((hw[0] / hw0[0], hw[1] / hw0[1]), pad))[0].byte().numpy()
    assert np.array_equal(np.stack(ours), theirs)
    assert 0 < np.stack(ours).sum() < np.stack(ours).size  # a test of something: some pixels in, some out


SQUARE = [0.2, 0.2, 0.8, 0.2, 0.8, 0.8, 0.2, 0.8]  # normalized: 20..80 px of a 100 px image


def test_segm_scores_a_mask_with_a_hole_by_its_pixels_and_its_box_by_the_box(tmp_path):
    labels = tmp_path / "labels"
    labels.mkdir()
    (tmp_path / "images").mkdir()
    image, empty = tmp_path / "images/a.jpg", tmp_path / "images/b.jpg"
    (labels / "a.txt").write_text("0 " + " ".join(map(str, SQUARE)) + "\n")  # square 20..80 px
    truth = coco_segment_truth([image, empty], [(100, 100), (100, 100)], ("thing",))
    ring = np.zeros((100, 100), np.uint8)
    ring[20:80, 20:80] = 1
    ring[38:62, 38:62] = 0  # a hole: IoU with the square = (3600 - 576) / 3600 = 0.84
    stray = np.zeros((100, 100), np.uint8)
    stray[:10, :10] = 1
    predictions = [{"image_id": 0, "category_id": 1, "bbox": [20, 20, 60, 60], "score": 0.9, "segmentation": rle(ring)},
                   {"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.1,
                    "segmentation": rle(stray)}]  # on the image without instances: a false positive, scored last
    assert mask_iou([rle(ring)], [rle(ring), rle(stray)]) == pytest.approx(np.array([[1.0, 0.0]]))
    box, box50, _ = coco_map(truth, [dict(p) for p in predictions], "bbox")
    mask, mask50, per_class = coco_map(truth, [dict(p) for p in predictions], "segm")
    assert (box, box50) == pytest.approx((1.0, 1.0))
    assert mask50 == pytest.approx(1.0)
    assert mask == pytest.approx(0.7)  # passes IoU 0.50 .. 0.80 (7 of 10 thresholds), fails 0.85 .. 0.95
    assert per_class[0]["map50_95"] == pytest.approx(0.7)
    # the task scores each family its own way and names the numbers by its vocabulary, boxes first
    metrics, classes = Segment(RawHead(32), 100).score(truth, [dict(p) for p in predictions])
    assert list(metrics.items()) == [("map50_95", box), ("map50", box50), ("mask_map50_95", mask),
                                     ("mask_map50", mask50)]
    assert classes == [{"class_id": 0, "class_name": "thing", "map50_95": box, "map50": box50, "mask_map50_95": mask,
                        "mask_map50": mask50}]


def test_segment_predictions_carry_box_and_mask_of_each_detection():
    rng = np.random.default_rng(1)
    output = np.zeros((4 + 1 + 32, 2), np.float32)
    output[:4] = [[40, 120], [40, 120], [30, 20], [30, 20]]
    output[4] = [0.9, 0.8]
    output[5:] = rng.normal(size=(32, 2))
    protos = rng.normal(size=(32, 40, 40)).astype(np.float32)
    task = Segment(RawHead(32), 160)
    predictions = task.predictions((output, protos), Postprocess(), 3, Letterbox((160, 160), (160, 160), (0, 0)))
    assert [p["bbox"] for p in predictions] == [[25.0, 25.0, 30.0, 30.0], [110.0, 110.0, 20.0, 20.0]]
    assert all(p["segmentation"]["size"] == [160, 160] and p["image_id"] == 3 for p in predictions)
    assert task.match(predictions, predictions, 0.5) == [1.0, 1.0]


@pytest.mark.parametrize("head", [RawHead(32), End2EndHead(32)], ids=["raw", "end2end"])
def test_the_detection_error_of_a_segment_model_sees_masks_that_break_while_boxes_hold(head):
    rng = np.random.default_rng(2)
    protos = rng.normal(size=(32, 40, 40)).astype(np.float32)
    boxes = np.array([[20, 20, 60, 60], [80, 90, 150, 150]], np.float32)
    coefficients = rng.normal(size=(2, 32)).astype(np.float32)
    if isinstance(head, RawHead):  # two anchors: xywh, one class score, 32 coefficients
        output = np.concatenate([np.c_[(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]].T,
                                 [[0.9, 0.8]], coefficients.T]).astype(np.float32)
        broken = output.copy()
        broken[5:] *= -1  # every mask inverted inside its box; boxes and scores untouched
    else:
        output = np.c_[boxes, [0.9, 0.8], [0, 0], coefficients].astype(np.float32)
        broken = output.copy()
        broken[:, 6:] *= -1
    task = Segment(head, 160)
    mask = head.confident(output, 0.25)
    assert task.detection_error((output, protos), (output, protos), mask) == 0
    assert Detect(head).detection_error((broken,), (output,), mask) == pytest.approx(0)  # boxes alone see nothing
    assert task.detection_error((broken, protos), (output, protos), mask) > 1  # two masks mostly wrong
