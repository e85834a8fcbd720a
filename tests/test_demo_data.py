"""The demo's labels per task: segment and pose demos label the same shapes (outlines, extreme points) and qgate's
own readers accept them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from qgate.class_folders import class_of
from qgate.dataset import label_path, load_dataset, read_keypoints, read_labels, read_segments, split_images
from qgate.params import load_params
from qgate.tasks import TASKS
from stages import demo_data

SMALL = {"train_images": 2, "calib_images": 1, "val_images": 6}


def _demo(root, monkeypatch, task: str):
    (root / task).mkdir()
    monkeypatch.chdir(root / task)
    (root / task / "params.yaml").write_text(yaml.safe_dump({"demo": {"task": task, **SMALL}}))
    demo_data.main(load_params("params.yaml"))
    dataset = load_dataset("data/demo/demo.yaml")
    return dataset, [label_path(image) for image in split_images(dataset, "val")]


def test_segment_and_pose_demos_label_the_same_shapes(tmp_path, monkeypatch):
    _, segment_labels = _demo(tmp_path, monkeypatch, "segment")
    pose, pose_labels = _demo(tmp_path, monkeypatch, "pose")
    spec = yaml.safe_load(pose.yaml_path.read_text())
    assert spec["kpt_shape"] == [4, 3] and spec["flip_idx"] == [0, 3, 2, 1]
    count = 0
    for outline_file, pose_file in zip(segment_labels, pose_labels):
        outlines = read_segments(outline_file, len(pose.names))
        poses = read_keypoints(pose_file, len(pose.names), tuple(spec["kpt_shape"]))
        assert [cls for cls, _ in outlines] == [cls for cls, _, _ in poses]
        for (_, polygon), (_, (cx, cy, w, h), points) in zip(outlines, poses):
            low, high = polygon.min(axis=0), polygon.max(axis=0)
            # the pose box is the drawn pixels' (one pixel past the outline's last vertex): within a pixel of it
            pixel = 1 / 240 + 1e-6  # the demo's images are at least 240 px on a side
            np.testing.assert_allclose(low, [cx - w / 2, cy - h / 2], atol=pixel)
            np.testing.assert_allclose(high, [cx + w / 2, cy + h / 2], atol=pixel)
            # top, right, bottom, left: each on the outline's extreme in its direction, all labelled visible
            assert points[0, 1] == pytest.approx(low[1], abs=1e-5) and points[2, 1] == pytest.approx(high[1], abs=1e-5)
            assert points[1, 0] == pytest.approx(high[0], abs=1e-5) and points[3, 0] == pytest.approx(low[0], abs=1e-5)
            assert np.all(points[:, 2] == 2)
            count += 1
    assert count > 6  # shapes were drawn


def test_the_detect_demo_has_box_labels_and_no_task_keys(tmp_path, monkeypatch):
    dataset, labels = _demo(tmp_path, monkeypatch, "detect")
    assert "kpt_shape" not in yaml.safe_load(dataset.yaml_path.read_text())
    assert sum(len(read_labels(path, len(dataset.names))) for path in labels) > 6
    assert all(len(line.split()) == 5 for path in labels if path.exists() for line in path.read_text().splitlines())


def test_the_classify_demo_files_one_centred_shape_per_image_under_its_class(tmp_path, monkeypatch):
    (tmp_path / "classify").mkdir()
    monkeypatch.chdir(tmp_path / "classify")
    demo = {"task": "classify", "train_images": 40, "calib_images": 4, "val_images": 8}
    Path("params.yaml").write_text(yaml.safe_dump({"demo": demo, "model": {"dataset": "data/demo"}}))
    counts = demo_data.main(load_params("params.yaml"))
    dataset = TASKS["classify"].dataset("data/demo")  # the classifier's own reader accepts it
    assert sorted(dataset.names) == sorted(load_params("params.yaml").demo.classes)
    assert not Path("data/demo/demo.yaml").exists() and not Path("data/demo/labels").exists()
    for split in ("train", "calib", "val"):
        images = split_images(dataset, split)
        assert len(images) == counts[f"{split}_images"] == counts[f"{split}_instances"] == demo[f"{split}_images"]
        assert all(class_of(image, dataset.names) >= 0 for image in images)
    assert len({image.parent.name for image in split_images(dataset, "train")}) == len(dataset.names)


def test_a_classify_demo_shape_is_large_and_inside_the_centre_square():
    classes = set()
    for seed in range(40):
        image, cls, (x1, y1, x2, y2) = demo_data.draw_centred_shape(np.random.default_rng(seed), 4)
        h, w = image.shape[:2]
        side = min(h, w)
        left, top = (w - side) / 2, (h - side) / 2
        assert left - 1 <= x1 and x2 <= left + side + 1 and top - 1 <= y1 and y2 <= top + side + 1
        assert max(x2 - x1, y2 - y1) >= 0.9 * demo_data.CENTRED_SIZE[0] * side  # a star spans 95% of its square
        classes.add(cls)
    assert classes == {0, 1, 2, 3}
