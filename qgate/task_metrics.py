"""What each task is scored and judged on: its metric vocabulary (key, title, direction), family by family.

Light on purpose (no model code, no scoring): the gates and the report read it; `qgate.tasks` scores each family.
Stages, gates, report, autofix and tune name a metric through it (`family.main.key`, `family.main.stat("drop")`),
never by spelling `map50_95`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Metric:
    """One number a model is scored on: its metrics files' key, what people call it, and which way is better."""

    key: str
    title: str
    higher_is_better: bool = True  # every metric scored so far (mAP); a drop is FP32 - INT8 of such a metric

    def stat(self, name: str) -> str:
        """The key of a statistic of this metric: `mask_map50_95_drop`, `map50_95_drop_ci_low`."""
        return f"{self.key}_{name}"


@dataclass(frozen=True)
class Scored:
    """One accuracy metric family: how it is scored, its keys' prefix, what people call it, its two metrics.

    `main` is the metric its drop gate judges, `second` the one measured beside it; the task scores them
    (`qgate.tasks`).
    """

    name: str  # how it is scored and what records name it: a pycocotools iouType, `rotated` (Ultralytics' mAP of
    # oriented boxes) or `classes` (top-k accuracy)
    prefix: str
    label: str
    named: bool = True  # say the label in titles: boxes are plain "mAP50-95" where they are all a task scores
    bases: tuple[tuple[str, str], tuple[str, str]] = (("map50_95", "mAP50-95"), ("map50", "mAP50"))  # main, second
    scorer: str = "pycocotools mAP"  # how the report says it was scored

    @property
    def iou_type(self) -> str:
        """The pycocotools iouType that scores a detection family (`bbox`, `segm`, `keypoints`)."""
        return self.name

    @property
    def main(self) -> Metric:
        """What the family's drop gate judges: mAP50-95, top-1 accuracy."""
        return Metric(self.key(self.bases[0][0]), self.title(self.bases[0][1]))

    @property
    def second(self) -> Metric:
        """Measured and shown beside `main`: mAP50, top-5 accuracy."""
        return Metric(self.key(self.bases[1][0]), self.title(self.bases[1][1]))

    @property
    def unprefixed(self) -> bool:
        """Keys without a prefix (boxes, a classifier's classes): the family that carries the interval level and
        resample count."""
        return not self.prefix

    def key(self, base: str) -> str:
        """The metrics files' key of a detection statistic of this family (`small_map50_95`, `mask_recall_at_conf`)."""
        return f"{self.prefix}{base}"

    def title(self, base: str) -> str:
        """`base` as people read it: 'mask recall', 'box mAP50-95' beside masks, plain 'mAP50-95' for a detector."""
        return f"{self.label} {base}" if self.named else base


BOX = Scored("bbox", "", "box", named=False)  # a detector's only family
MASK = Scored("segm", "mask_", "mask")
KEYPOINTS = Scored("keypoints", "pose_", "keypoint")
ROTATED = Scored("rotated", "", "oriented box", named=False,
                 scorer="Ultralytics' OBB mAP (ProbIoU matching, 101-point trapezoid AP)")
CLASSES = Scored("classes", "", "class", named=False, bases=(("top1", "top-1 accuracy"), ("top5", "top-5 accuracy")),
                 scorer="top-1 and top-5 accuracy of each image's class probabilities")


@dataclass(frozen=True)
class TaskMetrics:
    """A task's scored families, boxes first; the last is the task's own metric, the one it is judged on first.

    `objects`: its predictions are objects with a confidence (boxes, masks, keypoints, oriented boxes): bad cases
    count the confident ones; a classifier's one class per image has no threshold. `deployment_analyses`: the
    analyses of a deployed threshold (recall, F1, the score shift) and of object sizes apply; they read pycocotools'
    matches, which oriented boxes do not have. `prediction` names one of what the drift error is averaged over,
    `drift_error` says what it measures there (`qgate.tasks`' detection_error)."""

    name: str
    scored: tuple[Scored, ...]
    objects: bool = True
    deployment_analyses: bool = True
    prediction: str = "detection"
    drift_error: str = "1 - IoU + squared score change"

    @property
    def primary(self) -> Scored:
        """The family the task exists for (masks of a segment model)."""
        return self.scored[-1]

    def family(self, name: str) -> Scored | None:
        """The scored family of this name (autofix records the one it aimed at); None if the task has none."""
        return next((f for f in self.scored if f.name == name), None)


TASK_METRICS = {task.name: task for task in (
    TaskMetrics("detect", (BOX,)),
    TaskMetrics("segment", (Scored("bbox", "", "box"), MASK),
                drift_error="1 - box IoU + squared score change + 1 - mask IoU"),
    TaskMetrics("pose", (Scored("bbox", "", "box"), KEYPOINTS),
                drift_error="1 - box IoU + squared score change + 1 - OKS"),
    TaskMetrics("obb", (ROTATED,), deployment_analyses=False,
                drift_error="1 - ProbIoU of the oriented boxes + squared score change"),
    TaskMetrics("classify", (CLASSES,), objects=False, deployment_analyses=False, prediction="top-class prediction",
                drift_error="how far the other model's probability of that class moved"),
)}
GATED_TASKS = list(TASK_METRICS)  # every Ultralytics task


def recorded(record_path: str | Path) -> TaskMetrics:
    """The metrics of the task the export record names; detection when there is no readable record yet.

    A missing record is not an error here: the gates it would feed then fail on their missing metrics.
    """
    try:
        name = json.loads(Path(record_path).read_text()).get("task", "detect")
    except (OSError, ValueError, AttributeError):
        name = "detect"
    return TASK_METRICS.get(name, TASK_METRICS["detect"])


def shift_key(family: Scored, shift: str) -> str:
    """'bright_2_map50_95' (a shift at one severity), 'bright_mask_map50_95' (a shift's worst severity): the keys of
    metrics/robustness.json."""
    return f"{shift}_{family.main.key}"
