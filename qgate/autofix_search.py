"""autofix's search: which quantizer groups go back to float, each choice a real evaluation judged on its interval."""

from __future__ import annotations

import logging
from collections.abc import Callable

from qgate.deployment_checks import AtConf, Check, ShiftDrops, at_conf_checks, failures, shift_checks
from qgate.group_prices import Prices
from qgate.intervals import Interval, PairedScorer, difference
from qgate.groups import ignored_names
from qgate.params import Params
from qgate.pipeline import evaluate_model, val_images
from qgate.runtimes import runtime_for
from qgate.task_metrics import Scored, TaskMetrics
from qgate.tasks import task_for
from qgate.verdicts import decide

log = logging.getLogger(__name__)


def step_columns(family: Scored, checks: list[Check]) -> list[str]:
    """The steps table's columns; the metric ones named by the family autofix aims at (`mask_map50_95`, ...), then
    the drop of each at-threshold gate the step is judged by too, and what it fails."""
    return ["evaluation", "tried", "groups_float", "ops_float", family.main.key, family.second.key,
            family.main.stat("drop"), "drop_ci_low", "drop_ci_high", "gain", "gain_ci_low", "gain_ci_high",
            *(f"{check.key}_drop" for check in checks), "within_target", "fails", "kept", "images_per_second"]


def plain_failures(params: Params, task: TaskMetrics, int8_metrics: dict) -> list[str]:
    """The at-threshold gates the plain INT8 model fails, from int8_eval's metrics (as `make gate` judges them)."""
    level = int8_metrics["ci_level"]
    checks = at_conf_checks(params, task)
    drops = {c.key: Interval(*(int8_metrics[f"{c.key}_drop{end}"] for end in ("", "_ci_low", "_ci_high")), level)
             for c in checks}
    return failures(params, checks, drops)


def plain_int8(int8_metrics: dict, family: Scored, within_target: int) -> dict:
    """The plain INT8 model as a search step: its value of the task's metric, the drop and its interval."""
    drop, low, high = plain_drop(int8_metrics, family)
    return {key: int8_metrics[key] for key in (family.main.key, family.second.key)} | {
        family.main.stat("drop"): drop, "drop_ci_low": low, "drop_ci_high": high, "within_target": within_target,
        "fails": ""}


def plain_drop(int8_metrics: dict, family: Scored) -> tuple[float, float, float]:
    """The plain INT8 model's drop of one family's main metric and its interval."""
    return tuple(int8_metrics[family.main.stat(name)] for name in ("drop", "drop_ci_low", "drop_ci_high"))


def aimed_family(task: TaskMetrics, int8_metrics: dict, params: Params) -> Scored:
    """The metric autofix aims at: of the task's gated families whose plain INT8 drop misses autofix.target_drop,
    the one that misses it most (a pose model's boxes when its keypoints pass); else the task's own metric."""
    missing = [f for f in task.scored if not meets_target(params, *plain_drop(int8_metrics, f))]
    return max(missing, key=lambda f: plain_drop(int8_metrics, f)[0]) if missing else task.primary


def meets_target(params: Params, drop: float, low: float, high: float) -> bool:
    """Whether a drop meets autofix.target_drop the way the accuracy gate judges its limit (gates.confidence and
    gates.inconclusive: under `point`, autofix aims at the target by the point estimate)."""
    g = params.gates
    return decide("<=", drop, low, high, params.autofix.target_drop, g.confidence, g.inconclusive)[1]


class Search:
    """Greedy over the sensitivity ranking, then pruning; every step is a real evaluation on the whole val split.

    Not a bisection over ranking prefixes: reverting a group can lower mAP (bias correction downstream had
    compensated its error), so mAP is not monotonic in the prefix length. On the demo's naive config the top 4
    groups measured a drop of 0.010, the top 8 0.014 and the top 32 0.018. A group is kept only when its
    mAP50-95 gain over the current model is above noise: the lower end of the gain's paired bootstrap interval
    (same resampled images for both models, `autofix.ci_level`) is above 0. The mAP is `family`'s: the gated
    metric the plain INT8 model misses the target on most (`aimed_family`).
    """

    def __init__(self, params: Params, record: dict, family: Scored, fp32, int8, groups, order: list[int],
                 int8_metrics: dict, detections: tuple[list[dict], list[dict]], executor,
                 price: Callable[[list[int]], Prices] | None = None):
        self.params, self.fp32, self.int8, self.groups, self.order = params, fp32, int8, groups, order
        self.record, self.detections, self.executor = record, detections, executor
        self.val = val_images(params, record)  # read and validated once, not per evaluation
        self.family = family
        self.task = task_for(record)
        task = self.task.metrics
        self.own = task.primary  # the at-threshold and shift gates judge the task's own metric
        self.start = plain_int8(int8_metrics, self.family, within_target=0) | {
            "fails": "; ".join(plain_failures(params, task, int8_metrics))}
        self.steps: list[dict] = []
        self.scorer: PairedScorer | None = None  # built on the first evaluation, which brings the ground truth
        self.fp32_scores = self.current_scores = None
        self.stopped = ""  # why the greedy search ended: target | budget | noise | ranking
        self.price = price  # the greedy's groups -> each one's price in speed (None: op count orders the pruning)
        self.prices: Prices | None = None
        self.checks, self.shift_checks = at_conf_checks(params, task), shift_checks(params, self.own)
        self.at_conf: AtConf | None = None  # built with the scorer
        self.shift_drops: dict[str, Interval] = {}  # the chosen model's, once it is within target on clean images

    def run(self) -> tuple[list[int], dict]:
        """The chosen groups and their evaluation (the first within target, else the lowest drop reached)."""
        target, total = self.params.autofix.target_drop, len(self.order)
        if target < 0:  # every group float computes FP32's output, so drop 0 is the floor: show it, stop
            log.warning("autofix.target_drop %.4f < 0 cannot be reached even with every group in float", target)
            self.stopped = "ranking"
            return self.order, self.evaluate(self.order, f"all {total} groups")
        chosen, best = self._greedy()
        if self.price is not None and chosen:
            self.prices = self.price(chosen)
        if not best["within_target"]:
            log.warning("autofix: %d evaluations spent without reaching the target; best drop %.4f",
                        len(self.steps), best[self.family.main.stat("drop")])
            return chosen, best
        chosen, best = self._prune(chosen, best)
        return chosen, self._under_shifts(chosen, best)

    def _under_shifts(self, chosen: list[int], best: dict) -> dict:
        """The chosen model judged by the shift gates too, on every shift and severity (FP32 evaluated on them
        here: the robustness stage keeps no detections); within target only when it passes them. Once, at the end:
        the search aims at clean images, and each step under shifts would cost a robustness stage."""
        if not self.shift_checks:
            return best
        model = runtime_for(self.params).revert(self.int8, self.fp32, self.groups, set(chosen))
        shifts = ShiftDrops(self.params, self.record, self.val, self.executor, self.fp32, self.own)
        self.shift_drops = shifts.drops(model)
        failed = failures(self.params, self.shift_checks, self.shift_drops)
        for text in failed:
            log.warning("autofix: the chosen scope is within target on clean images but fails %s", text)
        return best | {"within_target": int(not failed), "fails": "; ".join(filter(None, [best["fails"], *failed]))}

    def _greedy(self) -> tuple[list[int], dict]:
        """Add groups in ranked order, keeping each one only if it gains significantly, until within target."""
        chosen, best = [], self.start
        self.stopped = "ranking"
        for group in self.order:
            if not self._budget_left():
                self.stopped = "budget"
                break
            if self._nothing_can_gain():
                self.stopped = "noise"
                break
            step = self.evaluate([*chosen, group], f"+ {self.groups[group].ops[0]}")
            if step["gain_ci_low"] > 0:
                chosen, best, self.current_scores = [*chosen, group], step, self.last_scores
                step["kept"] = 1
                if step["within_target"]:
                    self.stopped = "target"
                    break
        return chosen, best

    def _nothing_can_gain(self) -> bool:
        """The current model is within noise of FP32: no group's float version can gain significantly.

        Every group in float is the FP32 model, so the largest gain left is the current drop; when its
        interval (at `autofix.ci_level`) reaches 0, no candidate's gain can clear the noise either.
        """
        if self.scorer is None:
            return False
        drop = difference(self.fp32_scores, self.current_scores, self.params.autofix.ci_level)
        if drop.low <= 0:
            log.info("autofix: the current drop %.4f [%.4f, %.4f] is within noise of FP32; stopping", drop.point,
                     drop.low, drop.high)
            return True
        return False

    def _prune(self, chosen: list[int], best: dict) -> tuple[list[int], dict]:
        """Put chosen groups back to int8 one at a time, the costliest in speed first (measured; unpriced: the
        largest first), while still within target.

        A group that helped early can be unnecessary once later ones are float; each one left costs speed.
        """
        def price(g: int) -> float:
            return self.prices.per_group[g].point if self.prices else 1.0

        # the last group added is what reached the target
        candidates = sorted(chosen[:-1], key=lambda g: (-price(g), -len(self.groups[g].ops), -chosen.index(g)))
        for group in candidates:
            if not self._budget_left():
                break
            trial = [g for g in chosen if g != group]
            step = self.evaluate(trial, f"- {self.groups[group].ops[0]}")
            if step["within_target"]:
                chosen, best, self.current_scores = trial, step, self.last_scores
                step["kept"] = 1
        return chosen, best

    def _budget_left(self) -> bool:
        return len(self.steps) < self.params.autofix.max_evaluations

    def evaluate(self, selected: list[int], tried: str) -> dict:
        """Real mAP of the INT8 model with `selected` groups in float (compiled as a true mixed-precision model)."""
        chosen, p, main, second = set(selected), self.params, self.family.main, self.family.second
        model = runtime_for(p).revert(self.int8, self.fp32, self.groups, chosen)
        result = evaluate_model(p, model, self.record, self.executor, self.val)
        if self.scorer is None:
            self.scorer = self.task.scorer(self.family, result.ground_truth, p.int8_eval.bootstrap_samples,
                                           p.int8_eval.seed)
            self.fp32_scores = self.scorer.scores(self.detections[0])[0]
            self.current_scores = self.scorer.scores(self.detections[1])[0]
            self.at_conf = AtConf(p, self.task, self.own, result.ground_truth, self.detections[0], self.scorer.weights)
        self.last_scores = self.scorer.scores(result.detections)[0]
        drop = difference(self.fp32_scores, self.last_scores, p.int8_eval.ci_level)
        gain = difference(self.last_scores, self.current_scores, p.autofix.ci_level)
        at_conf = self.at_conf.drops(result.detections) if self.checks else {}
        failed = failures(p, self.checks, at_conf)
        step = {"evaluation": len(self.steps) + 1, "tried": tried, "groups_float": len(chosen),
                "ops_float": len(ignored_names(self.groups, chosen)), main.key: round(result.value(main.key), 5),
                second.key: round(result.value(second.key), 5), main.stat("drop"): round(drop.point, 5),
                "drop_ci_low": round(drop.low, 5), "drop_ci_high": round(drop.high, 5),
                "gain": round(gain.point, 5), "gain_ci_low": round(gain.low, 5), "gain_ci_high": round(gain.high, 5),
                **{f"{check.key}_drop": round(at_conf[check.key].point, 5) for check in self.checks},
                "within_target": int(meets_target(p, drop.point, drop.low, drop.high) and not failed),
                "fails": "; ".join(failed), "kept": 0, "images_per_second": round(result.images_per_second, 1)}
        log.info("autofix step %d (%s): %d groups float (%d ops): %s %.4f, drop %s, gain %s",
                 step["evaluation"], tried, len(chosen), step["ops_float"], main.title,
                 result.value(main.key), drop.text(), gain.text())
        self.steps.append(step)
        return step
