"""The deployment gates measured on a candidate INT8 model as `make gate` judges them: recall and F1 at the shipped
threshold, and the task's own metric under each shift at its worst severity. autofix's float scope and tune's
config are fixes only when they pass these too, not the clean drop alone."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from qgate.intervals import Interval, PairedDrop
from qgate.operating_point import Found, at_threshold, int8_conf
from qgate.params import Params
from qgate.pipeline import evaluate_model
from qgate.shifts import Shift
from qgate.task_metrics import Scored, TaskMetrics
from qgate.tasks import Detect, task_for
from qgate.verdicts import decide


@dataclass(frozen=True)
class Check:
    """One deployment gate a candidate must pass: the key of its drop, what it measures, its limit and setting."""

    key: str  # 'recall_at_conf', 'shift_bright' (a candidate's drops are keyed so)
    title: str  # 'recall at deploy.conf', 'mAP50-95 under bright'
    limit: float
    setting: str  # 'gates.max_recall_drop'


def at_conf_checks(params: Params, task: TaskMetrics) -> list[Check]:
    """The active at-threshold gates (recall and F1 drops at deploy.conf) of the task's own metric family; none for
    a task without them (a classifier's top-1 has no threshold; oriented boxes have no pycocotools matches)."""
    g, family = params.gates, task.primary
    if not task.deployment_analyses:
        return []
    rates = (("recall", "recall", g.max_recall_drop, "max_recall_drop"), ("f1", "F1", g.max_f1_drop, "max_f1_drop"))
    return [Check(family.key(f"{rate}_at_conf"), f"{family.title(title)} at deploy.conf", limit, f"gates.{setting}")
            for rate, title, limit, setting in rates if limit is not None]


def shift_checks(params: Params, family: Scored) -> list[Check]:
    """The active shift gates: one per shift of robustness.shifts, on the task's own metric."""
    limit = params.gates.max_shift_drop
    if limit is None:
        return []
    return [Check(f"shift_{name}", f"{family.main.title} under {name.replace('_', ' ')}", limit,
                  "gates.max_shift_drop") for name in params.robustness.shifts]


def candidate_checks(params: Params, task: TaskMetrics) -> list[Check]:
    """Every deployment gate a candidate is judged by beyond the clean mAP drop: the at-threshold ones, then the
    shift ones (tune's table and page columns)."""
    return [*at_conf_checks(params, task), *shift_checks(params, task.primary)]


def failures(params: Params, checks: list[Check], drops: dict[str, Interval]) -> list[str]:
    """What each check a candidate fails measured, as the gates decide (gates.confidence, gates.inconclusive)."""
    g = params.gates
    return [f"{check.title} drop {drops[check.key].text()} above {check.setting} {check.limit:g}" for check in checks
            if not decide("<=", drops[check.key].point, drops[check.key].low, drops[check.key].high, check.limit,
                          g.confidence, g.inconclusive)[1]]


class AtConf:
    """Recall and F1 drops at the deployed threshold of any candidate's detections against FP32's, on one split,
    paired under the same image resamples (`weights`, row 0 every image once) as int8_eval measures them.

    FP32's matches are made when a drop is first asked for: a task without deployment analyses (a classifier,
    oriented boxes: no pycocotools matches) is never asked, so building one for it costs and reads nothing."""

    def __init__(self, params: Params, task: Detect, family: Scored, ground_truth: dict, fp32_detections: list[dict],
                 weights: np.ndarray):
        self.params, self.task, self.family, self.ground_truth = params, task, family, ground_truth
        self.weights, self.fp32_detections = weights, fp32_detections

    @cached_property
    def fp32(self) -> Found:
        """FP32's detections matched at IoU 0.5."""
        images = len(self.ground_truth["images"])
        return self._found(self.fp32_detections, np.zeros(images, dtype=np.int64))

    def drops(self, detections: list[dict]) -> dict[str, Interval]:
        """Each at-threshold rate's drop, FP32 at deploy.conf minus the candidate at INT8's threshold."""
        deploy = self.params.deploy
        point = at_threshold(self.fp32, self._found(detections, self.fp32.objects), deploy.conf, int8_conf(deploy),
                             self.weights, self.params.int8_eval.ci_level)
        return {self.family.key(f"{rate}_at_conf"): point.drop[rate] for rate in ("recall", "f1")}

    def _found(self, detections: list[dict], objects: np.ndarray) -> Found:
        """The detections matched at IoU 0.5; a model that found nothing has recall 0 of FP32's counted `objects`."""
        images = len(self.ground_truth["images"])
        evaluator = self.task.matched(self.family, self.ground_truth, detections)
        return Found.nothing(images, objects) if evaluator is None else Found.of(evaluator, images)


def worst_shift_drop(params: Params, task: Detect, family: Scored, evaluated: dict) -> tuple[Shift, PairedDrop, dict]:
    """Of one shift's severities (`evaluated`: Shift -> (FP32, candidate) evaluations), the one with the largest
    drop of `family`'s main metric, its paired interval (`robustness.bootstrap_samples` at int8_eval's level and seed),
    and every severity's (FP32, candidate) point values: what the shift gate judges."""
    cfg = params.int8_eval
    points = {shift: (fp32.value(family.main.key), int8.value(family.main.key))
              for shift, (fp32, int8) in evaluated.items()}
    worst = max(points, key=lambda shift: points[shift][0] - points[shift][1])
    fp32, int8 = evaluated[worst]
    paired = task.paired(family, fp32.ground_truth, fp32.detections, int8.detections,
                         params.robustness.bootstrap_samples, cfg.ci_level, cfg.seed,
                         (*points[worst], fp32.value(family.second.key), int8.value(family.second.key)))
    return worst, paired, points


class ShiftDrops:
    """A candidate's drop under each shift of robustness.shifts, against FP32 on the same shifted images; FP32 is
    evaluated on them once, on the first candidate, and at model.imgsz (as the clean drop is measured)."""

    def __init__(self, params: Params, record: dict, val: tuple, executor, fp32, family: Scored):
        self.params, self.record, self.val, self.executor = params, record, val, executor
        self.fp32_model, self.task, self.family = fp32, task_for(record), family
        self.shifts = [Shift(name, severity, params.robustness.seed) for name in params.robustness.shifts
                       for severity in params.robustness.severities]
        self.fp32: dict[Shift, object] = {}

    def drops(self, model, params: Params | None = None) -> dict[str, Interval]:
        """`model` (the runtime's, evaluated with `params`: a tune candidate's deploy size) under every shift and
        severity; per shift, the drop at its worst severity (key 'shift_<name>')."""
        evaluated = {}
        for shift in self.shifts:
            if shift not in self.fp32:
                self.fp32[shift] = evaluate_model(self.params, self.fp32_model, self.record, self.executor, self.val,
                                                  shift)
            evaluated[shift] = (self.fp32[shift], evaluate_model(params or self.params, model, self.record,
                                                                 self.executor, self.val, shift))
        out = {}
        for name in self.params.robustness.shifts:
            _, paired, _ = worst_shift_drop(self.params, self.task, self.family,
                                            {s: pair for s, pair in evaluated.items() if s.name == name})
            out[f"shift_{name}"] = paired.drop
        return out
