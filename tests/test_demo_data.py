"""The demo's labels per task: segment and pose demos label the same shapes (outlines, extreme points) and qgate's
own readers accept them."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from qgate.dataset import label_path, load_dataset, read_keypoints, read_labels, read_segments, split_images
from qgate.params import load_params
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
