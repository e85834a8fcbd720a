"""What a model's outputs mean, per Ultralytics task: which outputs it reads, decode, ground truth, scoring, match.

Stages and gates ask the task the export record names (`task_for`), never `if task == ...`: everything
that knows whether a prediction is a box, a mask or a set of keypoints lives in one class per task.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qgate.compare import match
from qgate.dataset import coco_ground_truth
from qgate.errors import QgateError
from qgate.heads import HEADS, Postprocess, RawHead


@dataclass(frozen=True)
class Letterbox:
    """How an image became the model's input: original (h, w), resized (h, w), and the padding (left, top)."""

    hw0: tuple[int, int]
    hw: tuple[int, int]
    pad: tuple[int, int]


class Detect:
    """Boxes: output 0 in one of the detection head layouts (`qgate.heads`), scored by pycocotools `bbox`."""

    name = "detect"
    iou_type = "bbox"
    outputs = 1  # how many of the model's outputs the task reads, from the first
    metric = "map50_95"  # the metrics files' key of the number the accuracy gate judges

    def __init__(self, head=RawHead()):
        self.head = head

    def predictions(self, outputs: tuple, settings: Postprocess, image_id: int,
                    letterbox: Letterbox | None = None) -> list[dict]:
        """COCO-format detections of one image: in original pixels given its `letterbox`, else input pixels."""
        rows = self.head.detections(outputs[0], settings)
        return to_coco(scale_to_original(rows, letterbox) if letterbox else rows, image_id)

    def confident(self, outputs: tuple, conf: float) -> np.ndarray:
        """The anchors or rows whose detections the sensitivity error compares."""
        return self.head.confident(outputs[0], conf)

    def detection_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """The head's error of `candidate` against `reference` on the reference's confident anchors or rows."""
        return self.head.detection_error(candidate[0], reference[0], mask)

    def match(self, reference: list[dict], candidate: list[dict], iou: float) -> list[float]:
        """Greedy same-class one-to-one matching by box IoU; the IoU of each matched pair."""
        return match(reference, candidate, iou)

    def ground_truth(self, images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
        """COCO instances of `images` (ids 0..n-1) from their YOLO label files."""
        return coco_ground_truth(images, shapes, names)


TASKS = {"detect": Detect}


def task_for(record: dict) -> Detect:
    """The task (with its head layout) the export record names; an error for a record written before tasks were."""
    name, layout = record.get("task"), record.get("head_layout")
    if name not in TASKS:
        raise QgateError(f"export record names no known task ({name!r}); re-run `dvc repro export`")
    if layout not in HEADS:
        raise QgateError(f"export record names no known head layout ({layout!r}); re-run `dvc repro export`")
    return TASKS[name](HEADS[layout])


def scale_to_original(rows: np.ndarray, letterbox: Letterbox) -> np.ndarray:
    """Undo letterbox padding and resize, then clip to the original image."""
    (h0, w0), (h, w), (left, top) = letterbox.hw0, letterbox.hw, letterbox.pad
    boxes = rows[:, :4].copy()
    boxes[:, [0, 2]] = (boxes[:, [0, 2]] - left) / (w / w0)
    boxes[:, [1, 3]] = (boxes[:, [1, 3]] - top) / (h / h0)
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, w0)
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, h0)
    return np.concatenate([boxes, rows[:, 4:]], axis=1)


def to_coco(rows: np.ndarray, image_id: int) -> list[dict]:
    """Rows (x1, y1, x2, y2, score, class) -> COCO detections; category id = class + 1."""
    return [{"image_id": image_id, "category_id": int(c) + 1,
             "bbox": [round(float(x1), 3), round(float(y1), 3), round(float(x2 - x1), 3), round(float(y2 - y1), 3)],
             "score": round(float(s), 5)} for x1, y1, x2, y2, s, c in rows[:, :6]]
