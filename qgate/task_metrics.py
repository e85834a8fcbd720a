"""What each task is scored and judged on: pycocotools iouTypes and the metric names stages, gates and report share.

Light on purpose (no model code): the gates and the report read it; `qgate.tasks` builds the decode on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Scored:
    """One accuracy metric family: its pycocotools iouType, the prefix of its keys and what people call it."""

    iou_type: str
    prefix: str
    label: str
    named: bool = True  # say the label in titles: boxes are plain "mAP50-95" where they are all a task scores

    @property
    def is_box(self) -> bool:
        """Boxes: the keys without a prefix, which carry the interval level and resample count."""
        return not self.prefix

    def key(self, base: str = "map50_95") -> str:
        """The metrics files' key of `base` for this family (`map50_95`, `mask_map50_95_drop`, ...)."""
        return f"{self.prefix}{base}"

    def title(self, base: str = "mAP50-95") -> str:
        """`base` as people read it: 'mask mAP50-95', 'box mAP50-95' beside masks, plain 'mAP50-95' for a detector."""
        return f"{self.label} {base}" if self.named else base


BOX = Scored("bbox", "", "box", named=False)  # a detector's only family
MASK = Scored("segm", "mask_", "mask")
KEYPOINTS = Scored("keypoints", "pose_", "keypoint")


@dataclass(frozen=True)
class TaskMetrics:
    """A task's scored families, boxes first; the last is the task's own metric, the one it is judged on first."""

    name: str
    scored: tuple[Scored, ...]

    @property
    def primary(self) -> Scored:
        """The family the task exists for (masks of a segment model)."""
        return self.scored[-1]

    def family(self, iou_type: str) -> Scored:
        """The scored family of this iouType (autofix records the one it aimed at)."""
        return next(f for f in self.scored if f.iou_type == iou_type)


TASK_METRICS = {task.name: task for task in (
    TaskMetrics("detect", (BOX,)),
    TaskMetrics("segment", (Scored("bbox", "", "box"), MASK)),
    TaskMetrics("pose", (Scored("bbox", "", "box"), KEYPOINTS)),
)}
GATED_TASKS = list(TASK_METRICS)  # export refuses the others (OBB, classify)


def recorded(record_path: str | Path) -> TaskMetrics:
    """The metrics of the task the export record names; detection when there is no readable record yet.

    A missing record is not an error here: the gates it would feed then fail on their missing metrics.
    """
    try:
        name = json.loads(Path(record_path).read_text()).get("task", "detect")
    except (OSError, ValueError, AttributeError):
        name = "detect"
    return TASK_METRICS.get(name, TASK_METRICS["detect"])


def shift_key(family: Scored, shift: str, metric: str = "map50_95") -> str:
    """'bright_2_map50_95' (a shift at one severity), 'bright_mask_map50_95' (a shift's worst severity): the keys of
    metrics/robustness.json."""
    return f"{shift}_{family.key(metric)}"
