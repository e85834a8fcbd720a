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
    """One accuracy metric family: how it is scored (a pycocotools iouType), its keys' prefix, what people call it.

    `main` is the metric its drop gate judges, `second` the one measured beside it; the task scores them
    (`qgate.tasks`).
    """

    iou_type: str
    prefix: str
    label: str
    named: bool = True  # say the label in titles: boxes are plain "mAP50-95" where they are all a task scores

    @property
    def name(self) -> str:
        """What records name the family by (autofix's `aimed_at`): its iouType, `bbox`, `segm` or `keypoints`."""
        return self.iou_type

    @property
    def main(self) -> Metric:
        """mAP50-95: what the family's drop gate judges."""
        return Metric(self.key("map50_95"), self.title("mAP50-95"))

    @property
    def second(self) -> Metric:
        """mAP50: measured and shown beside `main`."""
        return Metric(self.key("map50"), self.title("mAP50"))

    @property
    def is_box(self) -> bool:
        """Boxes: the keys without a prefix, which carry the interval level and resample count."""
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


@dataclass(frozen=True)
class TaskMetrics:
    """A task's scored families, boxes first; the last is the task's own metric, the one it is judged on first."""

    name: str
    scored: tuple[Scored, ...]

    @property
    def primary(self) -> Scored:
        """The family the task exists for (masks of a segment model)."""
        return self.scored[-1]

    def family(self, name: str) -> Scored | None:
        """The scored family of this name (autofix records the one it aimed at); None if the task has none."""
        return next((f for f in self.scored if f.name == name), None)


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


def shift_key(family: Scored, shift: str) -> str:
    """'bright_2_map50_95' (a shift at one severity), 'bright_mask_map50_95' (a shift's worst severity): the keys of
    metrics/robustness.json."""
    return f"{shift}_{family.main.key}"
