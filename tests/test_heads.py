"""Head adapters: each output layout's decode and detection error, and the box decode found from the graph."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from qgate.heads import End2EndHead, RawHead
from qgate.runtimes.openvino.head_graph import decode_ops


def test_raw_detection_error_counts_box_overlap_and_class_score_on_fp32_confident_anchors():
    fp32 = np.zeros((4 + 2, 3), np.float32)
    fp32[:4] = [[10, 50, 90], [10, 50, 90], [4, 40, 8], [4, 40, 8]]  # centre x, y, width, height
    fp32[4] = [0.9, 0.8, 0.1]  # the third anchor is not confident
    mask = RawHead().confident(fp32, 0.25)
    assert mask.tolist() == [True, True, False]
    assert RawHead().detection_error(fp32, fp32, mask) == 0
    shifted = fp32.copy()
    shifted[0] += [2, 2, 0]  # moved by half its width: IoU 1/3; the large box by a 20th: IoU 38/42
    assert RawHead().detection_error(shifted, fp32, mask) == pytest.approx((1 - 1 / 3) + (1 - 38 / 42))
    unsure = fp32.copy()
    unsure[4, 0] = 0.5  # a class-only change, same boxes
    assert RawHead().detection_error(unsure, fp32, mask) == pytest.approx(0.4 ** 2)
    assert RawHead().detection_error(unsure, fp32, np.zeros(3, bool)) == 0  # an image FP32 finds nothing on


def test_end2end_detection_error_matches_rows_by_overlap_not_by_position():
    fp32 = np.array([[0, 0, 10, 10, 0.9, 1], [20, 20, 40, 40, 0.8, 0], [0, 0, 5, 5, 0.1, 0]], np.float32)
    head = End2EndHead()
    mask = head.confident(fp32, 0.25)
    assert mask.tolist() == [True, True, False]
    assert head.detection_error(fp32[::-1].copy(), fp32, mask) == 0  # top-K reordered the same detections
    moved = fp32.copy()
    moved[0, :4] = [5, 0, 15, 10]  # half the box's width: IoU 1/3
    assert head.detection_error(moved, fp32, mask) == pytest.approx(1 - 1 / 3)
    relabelled = fp32.copy()
    relabelled[1, 5] = 2  # another class: the only class-0 row left does not overlap (IoU 0, score 0.1)
    assert head.detection_error(relabelled, fp32, mask) == pytest.approx(1 + (0.8 - 0.1) ** 2)
    relabelled[2, 5] = 2  # no class-0 row at all: 1 + the score squared
    assert head.detection_error(relabelled, fp32, mask) == pytest.approx(1 + 0.8 ** 2)


def test_decode_ops_are_the_head_after_its_last_learned_convolutions(exported_project):
    model = ov.Core().read_model(exported_project / "models" / "export" / "model_fp32.xml")
    ops = decode_ops(model)
    types = {op.get_friendly_name(): op.get_type_name() for op in model.get_ordered_ops()}
    assert ops[-1] == "output0" and "/model.22/Sigmoid" in ops
    assert "/model.22/dfl/conv/Conv" in ops  # DFL: fixed weights 0..15, a weighted sum, not a learned layer
    learned = [name for name in ops if types[name] in {"Convolution", "MatMul"} and "dfl" not in name]
    assert not learned, learned
    assert not any(name.startswith("/model.22/cv") for name in ops)  # the last convs and their biases are learned
