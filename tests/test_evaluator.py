"""The evaluator matches Ultralytics' validation pre/post-processing and scores like pycocotools."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from qgate.cocoeval import coco_map
from qgate.heads import End2EndHead, Postprocess, RawHead
from qgate.preprocess import Letterbox, letterbox, load_image, to_tensor
from qgate.tasks import scale_to_original, to_coco
from tests.conftest import pycocotools_stats

SHAPES = [(480, 640), (427, 640), (100, 50), (333, 201), (320, 320)]


@pytest.fixture(scope="module")
def ultralytics_val_dataset(tmp_path_factory):
    from ultralytics.cfg import get_cfg
    from ultralytics.data.build import build_yolo_dataset

    root = tmp_path_factory.mktemp("parity")
    (root / "images").mkdir()
    (root / "labels").mkdir()
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate(SHAPES):
        cv2.imwrite(str(root / "images" / f"{i}.png"), rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        (root / "labels" / f"{i}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    cfg = get_cfg(overrides={"imgsz": 320, "rect": False})
    data = {"names": {0: "a"}, "channels": 3, "nc": 1}
    return build_yolo_dataset(cfg, str(root / "images"), 1, data, mode="val", rect=False, stride=32)


def test_preprocessing_is_pixel_identical_to_ultralytics(ultralytics_val_dataset):
    for i in range(len(ultralytics_val_dataset)):
        item = ultralytics_val_dataset[i]
        image, hw0, hw = load_image(Path(ultralytics_val_dataset.im_files[i]), 320)
        padded, pad = letterbox(image, 320)
        expected = item["img"].numpy().astype(np.float32) / 255.0
        assert np.array_equal(to_tensor(padded)[0], expected), ultralytics_val_dataset.im_files[i]
        assert (hw[0] / hw0[0], hw[1] / hw0[1]) == item["ratio_pad"][0]
        assert pad == tuple(item["ratio_pad"][1])


def _fake_head_output(rng: np.random.Generator, classes: int = 5, anchors: int = 2100) -> np.ndarray:
    centers = rng.uniform(0, 320, (2, anchors))
    sizes = rng.uniform(4, 120, (2, anchors))
    scores = rng.beta(0.3, 8, (classes, anchors))  # mostly near zero, a few confident, like a real head
    return np.concatenate([centers, sizes, scores]).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decode_matches_ultralytics_nms(seed):
    from ultralytics.utils import nms, ops

    output = _fake_head_output(np.random.default_rng(seed))
    settings = Postprocess(conf=0.001, iou=0.7, max_det=300)
    ours = RawHead().detections(output, settings)
    theirs = nms.non_max_suppression(torch.from_numpy(output[None]), settings.conf, settings.iou, multi_label=True,
                                     max_det=settings.max_det)[0].numpy()
    assert ours.shape == theirs.shape

    def key(rows):
        return rows[np.lexsort((rows[:, 0], rows[:, 5], -rows[:, 4]))]

    np.testing.assert_allclose(key(ours), key(theirs), rtol=1e-5, atol=1e-3)
    hw0, hw, pad = (480, 640), (240, 320), (0, 40)
    expected = ops.scale_boxes((320, 320), torch.from_numpy(theirs[:, :4].copy()), hw0,
                               ratio_pad=((hw[0] / hw0[0], hw[1] / hw0[1]), pad)).numpy()
    np.testing.assert_allclose(key(scale_to_original(theirs, Letterbox(hw0, hw, pad)))[:, :4],
                               key(np.concatenate([expected, theirs[:, 4:]], axis=1))[:, :4], atol=1e-3)


def test_decode_with_nothing_above_conf():
    output = np.zeros((9, 100), dtype=np.float32)
    assert RawHead().detections(output, Postprocess()).shape == (0, 6)
    assert End2EndHead().detections(np.zeros((300, 6), np.float32), Postprocess()).shape == (0, 6)


@pytest.mark.parametrize("seed", [0, 1])
def test_end2end_decode_matches_ultralytics(seed):
    from ultralytics.utils import nms

    rng = np.random.default_rng(seed)
    corners = np.sort(rng.uniform(0, 320, (300, 2, 2)), axis=1).reshape(300, 4)
    scores = np.sort(rng.beta(0.3, 4, 300))[::-1]  # top-K: best first, as the head emits them
    output = np.concatenate([corners, scores[:, None], rng.integers(0, 5, (300, 1))], axis=1).astype(np.float32)
    settings = Postprocess(conf=0.01, iou=0.7, max_det=100)
    theirs = nms.non_max_suppression(torch.from_numpy(output[None]), settings.conf, settings.iou,
                                     max_det=settings.max_det, end2end=True)[0].numpy()
    np.testing.assert_array_equal(End2EndHead().detections(output, settings), theirs)


def _ground_truth(boxes):
    return {"images": [{"id": 0, "file_name": "a.jpg", "height": 100, "width": 100}],
            "annotations": [{"id": i + 1, "image_id": 0, "category_id": c, "bbox": b, "area": b[2] * b[3],
                             "iscrowd": 0} for i, (c, b) in enumerate(boxes)],
            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}


def test_coco_map_perfect_wrong_and_empty():
    gt = _ground_truth([(1, [10, 10, 30, 30]), (2, [50, 50, 40, 20])])
    rows = np.array([[10, 10, 40, 40, 0.9, 0], [50, 50, 90, 70, 0.8, 1]], dtype=np.float32)
    perfect, perfect50, per_class = coco_map(gt, to_coco(rows, 0))
    assert perfect == pytest.approx(1.0) and perfect50 == pytest.approx(1.0)
    assert [c["map50_95"] for c in per_class] == pytest.approx([1.0, 1.0])
    swapped = rows.copy()
    swapped[:, 5] = swapped[::-1, 5]
    assert coco_map(gt, to_coco(swapped, 0))[0] == pytest.approx(0.0)
    assert coco_map(gt, [])[:2] == (0.0, 0.0)


def test_in_graph_preprocessing_matches_numpy(exported_project):
    import openvino as ov

    from qgate.runtimes.openvino.inference import compile_model

    ir = exported_project / "models" / "export" / "model_fp32.xml"
    image = np.random.default_rng(0).integers(0, 255, (128, 128, 3), dtype=np.uint8)
    plain = ov.Core().compile_model(str(ir), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = plain(to_tensor(image))[0]
    actual = compile_model(ir, "f32")(image[None])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-3)


def test_coco_map_equals_full_pycocotools_summary():
    rng = np.random.default_rng(3)
    boxes = [(int(rng.integers(1, 3)), [float(v) for v in rng.uniform(0, 60, 2)] + [float(v) for v in
                                                                                  rng.uniform(2, 40, 2)])
             for _ in range(40)]
    gt = _ground_truth(boxes)
    detections = []
    for cls, (x, y, w, h) in boxes:  # jittered copies plus clutter, with random scores
        for _ in range(3):
            jitter = rng.normal(0, 2, 4)
            detections.append({"image_id": 0, "category_id": cls if rng.random() > 0.2 else 3 - cls,
                               "bbox": [x + jitter[0], y + jitter[1], max(w + jitter[2], 1), max(h + jitter[3], 1)],
                               "score": float(rng.random())})
    stats = pycocotools_stats(gt, detections)
    map50_95, map50, _ = coco_map(gt, detections)
    assert 0.05 < stats[0] < 0.95
    assert map50_95 == pytest.approx(stats[0], abs=1e-12)
    assert map50 == pytest.approx(stats[1], abs=1e-12)
