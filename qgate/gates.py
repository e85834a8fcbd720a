"""Gate verdicts: the pipeline's metrics files judged against the `gates:` thresholds of params.yaml."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from qgate.consistency import problems
from qgate.cpu import describe
from qgate.divergence import CLIP_GROWTH
from qgate.io import sha256_file
from qgate.paste import paste_block
from qgate.params import Params
from qgate.task_metrics import Scored, recorded, shift_key
from qgate.verdicts import FAIL, INCONCLUSIVE, PASS, decide, samples_to_resolve

# The DVC stages whose outputs the gates read (the Makefile's GATED_STAGES, checked by tests/test_setup.py):
# `make gate` runs these and what they need, promote requires them (not the demo's, for your model) up to date.
GATED_STAGES = ("export", "baseline", "quantize", "int8_eval", "robustness", "benchmark", "divergence", "sensitivity",
                "autofix")


PAIRS = "benchmark pairs"  # the speed-up's samples: more of them need a larger benchmark.max_seconds


class MetricsUnavailable(Exception):
    """A metrics file a gate needs is missing, unreadable, incomplete or from another model."""


@dataclass(frozen=True)
class Verdict:
    """One gate's outcome: what was measured (with its interval), against which limit, and what to do about it."""

    gate: str
    metric: str
    value: str
    limit: str
    passed: bool
    message: str  # the whole verdict in one line: pytest's failure text and the JUnit XML
    state: str = PASS  # pass | fail | inconclusive (the limit lies inside the measured interval)
    interval: str = ""  # '[low, high] (95%)' when the gate decided on an interval
    label: str = ""  # what the value measures, with its unit: the terminal table's and the report's column
    hint: str = ""  # where to look and what to paste (autofix's scope block spans lines)
    caveat: str = ""  # what the data resolves, shown whatever the verdict
    undecided: str = ""  # for an inconclusive verdict: how it was counted and what would resolve it


@dataclass(frozen=True)
class Reading:
    """What a gate reads: the point value, its interval when the metric has one, what to look at, and a caveat."""

    value: Any
    hint: str
    low: float | None = None
    high: float | None = None
    level: float | None = None
    caveat: str = ""  # e.g. "100 images resolve drops of about 0.008": shown whatever the verdict
    samples: int = 0  # how many images (or benchmark pairs) the interval comes from
    sample_unit: str = "images"


class Metrics:
    """The stages' output files, each read once; every access checks the file is there, parses and is current."""

    def __init__(self, params: Params):
        self.params = params
        self._files: dict[str, Any] = {}
        self._consistent: set[str] = set()
        self._producers = {
            params.export.record: "export", params.baseline.metrics: "baseline",
            params.baseline.per_class: "baseline", params.quantize.metrics: "quantize",
            params.quantize.record: "quantize", params.quantize.precision_table: "quantize",
            params.int8_eval.metrics: "int8_eval", params.int8_eval.per_class: "int8_eval",
            params.robustness.metrics: "robustness", params.robustness.csv: "robustness",
            params.benchmark.metrics: "benchmark", params.divergence.metrics: "divergence",
            params.divergence.csv: "divergence", params.divergence.shifts_csv: "divergence",
            params.divergence.histograms: "divergence",
            params.sensitivity.metrics: "sensitivity",
            params.sensitivity.csv: "sensitivity", params.autofix.metrics: "autofix", params.autofix.scope: "autofix",
            params.autofix.steps: "autofix", params.autofix.prices: "autofix", params.int8_eval.bad_cases: "int8_eval",
        }

    def paths(self) -> list[str]:
        """Every file the gates read (the stages' metrics and tables), in a stable order."""
        return sorted(self._producers)

    def rerun(self, path: str) -> str:
        """The command that rewrites `path`."""
        stage = self._producers.get(path)
        return f"`dvc repro {stage}` (or `make gate`)" if stage else "`dvc repro` (or `make gate`)"

    def read(self, path: str) -> Any:
        """The parsed file (JSON, or CSV rows); MetricsUnavailable saying which stage to run when it is not usable."""
        if path not in self._files:
            self._files[path] = self._load(path)
        return self._files[path]

    def value(self, path: str, key: str) -> Any:
        """One key of a JSON metrics file, which must be current: its model hashes are the export's and quantize's."""
        data = self.read(path)
        if not isinstance(data, dict) or key not in data:
            raise MetricsUnavailable(f"{path} has no '{key}' (written by an older qgate?); re-run {self.rerun(path)}")
        self._check_current(path, data)
        self._check_consistent(path, data)
        return data[key]

    def number(self, path: str, key: str) -> float:
        """A numeric metric; NaN or a non-number is unusable."""
        value = self.value(path, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise MetricsUnavailable(f"{path}: '{key}' is {value!r}, not a number; re-run {self.rerun(path)}")
        return float(value)

    def _load(self, path: str) -> Any:
        file = Path(path)
        if not file.is_file():
            raise MetricsUnavailable(f"{path} is missing; run {self.rerun(path)}")
        try:
            if file.suffix == ".csv":
                with open(file, newline="") as handle:
                    return list(csv.DictReader(handle))
            if file.suffix in (".yaml", ".yml"):
                return file.read_text()
            return json.loads(file.read_text())
        except (OSError, ValueError, csv.Error) as exc:
            raise MetricsUnavailable(f"{path} is unreadable ({exc.__class__.__name__}); "
                                     f"re-run {self.rerun(path)}") from exc

    def _check_consistent(self, path: str, data: dict) -> None:
        """Once per file: what qgate.consistency finds wrong in it fails every gate that reads it."""
        if path in self._consistent:
            return
        found = problems(self.params, path, data, self._producers.get(path, ""), self.read)
        if found:
            raise MetricsUnavailable(f"{path} cannot be trusted: {'; '.join(found)}; re-run {self.rerun(path)}")
        self._consistent.add(path)

    def _check_current(self, path: str, data: dict) -> None:
        # (hash key, the file that owns it, what the hash names, how that file states it)
        owners = [("model_sha256", self.params.export.record, "model", "is model"),
                  ("ir_bin_sha256", self.params.export.record, "FP32 model", "wrote"),
                  ("int8_ir_bin_sha256", self.params.quantize.metrics, "INT8 model", "wrote")]
        for key, owner, what, states in owners:
            if path == owner or key not in data:
                continue
            expected = self.value(owner, key)
            if data[key] != expected:
                raise MetricsUnavailable(f"{path} is stale: measured on {what} {str(data[key])[:12]}, but {owner} "
                                         f"{states} {str(expected)[:12]}; re-run {self.rerun(path)}")


@dataclass(frozen=True)
class Gate:
    """A named check: `read` measures, `direction` says which side of `limit` passes (None limit = gate off)."""

    name: str
    metric: str
    limit: Any
    direction: str  # "<=": the value must not exceed the limit; ">=": it must reach it
    read: Callable[["Metrics", Any], Reading]
    label: str = ""  # what the metric measures, with its unit, for people


def gates(params: Params) -> list[Gate]:
    """Every gate, in report order; optional ones whose threshold is null have `limit` None.

    The accuracy gates follow the task the export record names: a drop gate per scored metric (boxes, and a
    segment model's masks, each with its own `gates.max_..._drop`); the optional ones judge the task's own metric.
    """
    g = params.gates
    task = recorded(params.export.record)
    own = task.primary
    return [
        *(Gate(f"accuracy_{f.main.stat('drop')}", f.main.stat("drop"), g.max_drop[f.main.key], "<=",
               _reader(_map_drop, f), f"{f.main.title} drop, FP32 - INT8") for f in task.scored),
        Gate(f"accuracy_{own.main.stat('drop_rel')}", own.main.stat("drop_rel"), g.max_drop_rel, "<=",
             _reader(_map_drop_rel, own), f"{own.main.title} drop / FP32 {own.main.title}"),
        Gate(f"accuracy_int8_{own.main.key}_floor", f"int8 {own.main.key}", g.min_int8_score,
             ">=" if own.main.higher_is_better else "<=",
             _reader(_map_floor, own), f"INT8 {own.main.title}"),
        Gate("accuracy_per_class_drop" if own.unprefixed else f"accuracy_per_class_{own.label}_drop",
             f"worst class {own.main.key} drop", g.max_class_drop, "<=", _reader(_class_drop, own),
             f"worst class's {own.main.title} drop"),
        *(_object_gates(g, own) if task.deployment_analyses else ()),
        *(Gate(f"accuracy_shift_{name}_{own.main.stat('drop')}", f"{name} {own.main.stat('drop')}",
               g.max_shift_drop, "<=", _reader(_shift_drop, own, name),
               f"{own.main.title} drop under {name.replace('_', ' ')}, FP32 - INT8")
          for name in params.robustness.shifts),
        Gate("speed_int8_latency", "int8_latency_ms", g.max_latency_ms, "<=", _latency, "INT8 median latency, ms"),
        Gate("speed_speedup", "speedup_fps", g.min_speedup, ">=", _speedup, "INT8 / FP32 throughput, x"),
        Gate("drift_detection_error", "detection_error", g.max_detection_error, "<=", _detection_error,
             f"error per {task.prediction}"),
        Gate("drift_nan_inf", "nan_inf_layers", 0, "<=", _nan_inf, "layers with NaN or Inf"),
        Gate("drift_layers_below_floor", "layers_below_sqnr_floor_frac", g.max_layers_below_sqnr_floor_frac, "<=",
             _layers_below, "layers below the SQNR floor"),
        Gate("structure_op_inventory", "fp32 ops missing from int8", 0, "<=", _inventory, "FP32 ops missing in INT8"),
        Gate("structure_quantized", "quantizer_count", 1, ">=", _quantized, "quantizers in INT8"),
        Gate("structure_ignored_scope_float", "ignored ops not float", 0, "<=", _ignored_float,
             "ignored ops not in float"),
        Gate("provenance_same_model", "files from another model", 0, "<=", _provenance,
             "files from another model"),
    ]


def _object_gates(g, own: Scored) -> list[Gate]:
    """The gates of a task with deployment analyses: at the deployed threshold, and on small objects (a classifier's
    one class per image has neither; oriented boxes are not matched by pycocotools, which both read)."""
    return [
        *(Gate(f"accuracy_{own.key(f'{rate}_at_conf_drop')}", own.key(f"{rate}_at_conf_drop"), limit, "<=",
               _reader(_at_conf_drop, own, rate), f"{own.title(title)} at deploy.conf drop, FP32 - INT8")
          for rate, title, limit in (("recall", "recall", g.max_recall_drop), ("f1", "F1", g.max_f1_drop))),
        Gate(f"accuracy_{own.key('small_map50_95_drop')}", own.key("small_map50_95_drop"), g.max_small_map50_95_drop,
             "<=", _reader(_small_drop, own), f"{own.main.title} drop on small objects"),
    ]


def active_gates(params: Params) -> list[Gate]:
    """The gates that judge this run (optional gates with a null threshold are off)."""
    return [gate for gate in gates(params) if gate.limit is not None]


def judge(gate: Gate, metrics: Metrics) -> Verdict:
    """Run one gate; an unusable metrics file is a failed verdict whose message says what to run."""
    limit_text = f"{gate.direction} {_fmt(gate.limit)}"
    try:
        reading = gate.read(metrics, gate.limit)
    except MetricsUnavailable as exc:
        return Verdict(gate.name, gate.metric, "unavailable", limit_text, False, f"{gate.name}: {exc}", FAIL,
                       label=gate.label, hint=str(exc))
    g = metrics.params.gates
    state, passed = decide(gate.direction, reading.value, reading.low, reading.high, gate.limit, g.confidence,
                           g.inconclusive)
    interval = (f"[{_fmt(reading.low)}, {_fmt(reading.high)}] ({reading.level:.0%})"
                if reading.low is not None and reading.level is not None else "")
    measured = f"{gate.metric} = {_fmt(reading.value)}" + (f" {interval}" if interval else "")
    relation = {PASS: "within", FAIL: "violates", INCONCLUSIVE: "is inconclusive against"}[state]
    message = f"{gate.name}: {measured} {relation} limit {limit_text}"
    undecided = _undecided(reading, gate.limit, passed, g.inconclusive) if state == INCONCLUSIVE else ""
    if undecided:
        message += f" ({undecided})"
    if reading.caveat:
        message += f". {reading.caveat}"
    hint = reading.hint if not passed or state == INCONCLUSIVE else ""
    if hint:
        message += f". Look at: {hint}"
    return Verdict(gate.name, gate.metric, _fmt(reading.value), limit_text, passed, message, state, interval,
                   gate.label, hint, reading.caveat, undecided)


def _undecided(reading: Reading, limit: float, passed: bool, policy: str) -> str:
    """How an inconclusive verdict was counted, and about how many samples would decide it."""
    counted = "passed" if passed else "failed"
    how = (f"decided by its point estimate: {counted} (gates.inconclusive: point)" if policy == "point"
           else f"counted as {counted} by gates.inconclusive: {policy}")
    text = f"the limit lies inside the {reading.level:.0%} interval; {how}"
    if reading.samples:
        needed = samples_to_resolve(reading.value, reading.low, reading.high, limit, reading.samples)
        text += (f"; the point sits on the limit: no number of {reading.sample_unit} resolves it" if needed is None
                 else f"; about {needed} {reading.sample_unit} (not {reading.samples}) would resolve it")
    return text


def judge_all(params: Params, metrics: Metrics | None = None) -> list[Verdict]:
    """Verdicts of every active gate, sharing one read of each metrics file (`metrics`, when given)."""
    metrics = metrics or Metrics(params)
    return [judge(gate, metrics) for gate in active_gates(params)]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _look_hint(m: Metrics) -> str:
    """The layer to look at first and the bad cases."""
    bad_cases = m.params.int8_eval.bad_cases
    try:
        return f"{where_to_look(m)}; the images in {bad_cases}"
    except MetricsUnavailable:
        return f"the images in {bad_cases}"


def _accuracy_hint(m: Metrics) -> str:
    return _look_hint(m) + _autofix_hint(m) + _clipping_hint(m)


AUTOFIX_STOPS = {  # why autofix's search ended short of its target, and what would take it further
    "budget": "its budget ran out (raise autofix.max_evaluations); ",
    "noise": ("the drop left is within the val set's noise, so no group could show a real gain (add images, or "
              "set a target the data resolves); "),
    "ranking": "every ranked quantizer group was tried; ",
}


# Over half the error that matters is clipping: ranges too narrow, which a wider range estimator fixes for every
# layer at once (the failing pose demo: 76%, minmax brought its box drop from 0.017 to 0.002; the COCO reference's
# naive config, a decode problem: 9%)
CLIPPING_DOMINATES = 0.5


def _clipping_hint(m: Metrics) -> str:
    """`range_estimator: minmax` to try, when clipping dominates the error of the groups the ranking says matter."""
    sens = m.params.sensitivity
    try:
        share = m.number(sens.metrics, "clip_error_share")
    except MetricsUnavailable:
        return ""  # a hint, not a verdict: an older sensitivity.json only loses this sentence
    if share <= CLIPPING_DOMINATES or m.params.quantize.range_estimator == "minmax":
        return ""
    prediction = recorded(m.params.export.record).prediction
    return (f". Clipping is {share:.0%} of the quantization error where it moves the {prediction}s ({sens.csv}, "
            "weighted by the error each group's float version removes): try `range_estimator: minmax` under "
            "`quantize:` (the widest ranges; `make tune` tries it)")


def autofix_family(m: Metrics) -> Scored:
    """The metric family autofix aimed at (recorded in its metrics: the gated one the plain INT8 missed most)."""
    task, aimed = recorded(m.params.export.record), m.value(m.params.autofix.metrics, "aimed_at")
    family = task.family(aimed)
    if family is None:
        raise MetricsUnavailable(f"{m.params.autofix.metrics}: 'aimed_at' is {aimed!r}, not one of the "
                                 f"{task.name} task's metrics; re-run {m.rerun(m.params.autofix.metrics)}")
    return family


def _autofix_hint(m: Metrics) -> str:
    """autofix's suggestion (the ignored scope to paste and the mAP it reached), or why there is none."""
    cfg = m.params.autofix
    try:
        own = autofix_family(m)
        aim = "" if not own.named else f" (on {own.main.title})"  # a gate's hint must say which metric autofix fixed
        if not m.value(cfg.metrics, "needed"):
            return (f". autofix found the drop within autofix.target_drop {cfg.target_drop}{aim} and suggests "
                    "nothing: lower autofix.target_drop to below this gate's limit")
        fixed_drop = m.number(cfg.metrics, f"fixed_{own.main.stat('drop')}")
        evaluations = m.value(cfg.metrics, "evaluations")
        fails = m.value(cfg.metrics, "fails")
        if not m.value(cfg.metrics, "reached") and fails:
            return (f". autofix's scope (drop {fixed_drop:.4f}{aim}, {evaluations} full evaluations) is no fix: it "
                    f"fails {fails}; see {cfg.steps}. Or `make tune`: other quantize settings (range estimator, "
                    "preset, bias correction) can pass where no small float scope does")
        if not m.value(cfg.metrics, "reached"):
            return (f". autofix did not reach autofix.target_drop {cfg.target_drop}{aim}: best drop {fixed_drop:.4f} "
                    f"after {evaluations} full evaluations; {AUTOFIX_STOPS.get(m.value(cfg.metrics, 'stopped'), '')}"
                    f"see {cfg.steps}. Or `make tune`: other quantize settings (range estimator, preset, bias "
                    "correction) can pass where no small float scope does")
        block = m.read(cfg.scope)
    except MetricsUnavailable as exc:
        return f". (no autofix suggestion: {exc})"
    return (f". Suggested fix: {m.value(cfg.metrics, 'ops_float_added')} more ops in float give {own.main.title} "
            f"{m.number(cfg.metrics, f'fixed_{own.main.key}'):.4f} (drop {fixed_drop:.4f}, {evaluations} evaluations). "
            f"Paste this under `quantize:` in params.yaml (also in {cfg.scope}):\n{block}")


def where_to_look(m: Metrics) -> str:
    """The layer to look at first: of the divergent layers, the one whose quantizers the sensitivity ranking puts
    highest (its error matters most to the detections); else the first divergent one; else the ranking's top."""
    div, sens = m.params.divergence, m.params.sensitivity
    first = m.value(div.metrics, "first_divergent_layer")
    try:
        lead, rank = m.value(sens.metrics, "lead_divergent_layer"), m.value(sens.metrics, "lead_divergent_rank")
        top = m.value(sens.metrics, "top_first_op")
    except MetricsUnavailable:
        lead, rank, top = "", 0, ""
    if lead:
        text = f"divergent layer {lead}{_advice(m, lead)}, whose quantizers rank #{rank} in {sens.csv}"
        return text + (f" (its top group starts at {top})" if rank != 1 else "")
    if first:
        return f"divergent layer {first}{_advice(m, first)}"
    return (f"no divergent layer (none ends below divergence.divergent_sqnr_db {div.divergent_sqnr_db:g} dB after "
            f"losing divergence.local_drop_db {div.local_drop_db:g} dB)"
            + (f"; the top of {sens.csv}, from {top}" if top else f"; the lowest-SQNR rows of {div.csv}"))


def _advice(m: Metrics, layer: str) -> str:
    """' (its SQNR; the divergence table's advice)' for a layer, from the divergence rows."""
    try:
        row = next((r for r in m.read(m.params.divergence.csv) if r.get("name") == layer), {})
    except MetricsUnavailable:
        return ""
    facts = [f"{float(row['sqnr_db']):.1f} dB, {float(row['local_drop_db']):.1f} dB lost there"] if row else []
    return f" ({'; '.join(facts + ([row['advice']] if row.get('advice') else []))})" if facts else ""


def _with_interval(m: Metrics, path: str, key: str, hint: str, caveat: str = "", unit: str = "images") -> Reading:
    """`key` and its `key_ci_low` / `key_ci_high` interval from `path`, at the level the file states."""
    level = m.number(path, "ci_level")
    confidence = m.params.gates.confidence
    if confidence is not None and level != confidence:
        raise MetricsUnavailable(f"{path} has its intervals at {level:g}, gates.confidence is {confidence:g}; "
                                 f"re-run {m.rerun(path)}")
    samples = int(m.number(path, "pairs" if unit == PAIRS else "images"))
    return Reading(m.number(path, key), hint, m.number(path, f"{key}_ci_low"), m.number(path, f"{key}_ci_high"),
                   level, caveat, samples, unit)


# a drop interval of width 0 (e.g. no image changed class): a resample cannot say how large a drop these images miss
SAME_IN_EVERY_RESAMPLE = "every resample gives the same drop (FP32 and INT8 score each image alike)"


def _resolution(m: Metrics, half_width: float, limit: float, what: str) -> str:
    """What the val set can tell apart, and when the limit is too fine for it."""
    images = int(m.number(m.params.int8_eval.metrics, "images"))
    if half_width == 0:
        return f"{images} images: {SAME_IN_EVERY_RESAMPLE}"
    text = f"{images} images resolve {what} of about {half_width:.4f}"
    if half_width >= abs(limit) / 2:
        text += f"; the limit {limit:g} is less than twice that: add images or raise the limit"
    return text


def _reader(read: Callable, family: Scored, *args) -> Callable[["Metrics", Any], Reading]:
    """`read(m, limit, family, *args)` as a gate's reader of one metric family."""
    return lambda m, limit: read(m, limit, family, *args)


def _map_drop(m: Metrics, limit: float, family: Scored) -> Reading:
    path = m.params.int8_eval.metrics
    caveat = _resolution(m, m.number(path, family.main.stat("drop_resolution")), limit,
                         f"{family.main.title} drops")
    return _with_interval(m, path, family.main.stat("drop"), _accuracy_hint(m), caveat)


def _map_drop_rel(m: Metrics, limit: float, family: Scored) -> Reading:
    path, key = m.params.int8_eval.metrics, family.main.stat("drop_rel")
    half = (m.number(path, f"{key}_ci_high") - m.number(path, f"{key}_ci_low")) / 2
    return _with_interval(m, path, key, _accuracy_hint(m), _resolution(m, half, limit, "relative drops"))


def _map_floor(m: Metrics, limit: float, family: Scored) -> Reading:
    path = m.params.int8_eval.metrics
    baseline = m.number(m.params.baseline.metrics, family.main.key)
    hint = f"FP32 {family.main.title} is {baseline:.4f}" + (
        ": the FP32 model is already below the floor (train longer or lower the floor)" if baseline < limit
        else f"; {_accuracy_hint(m)}")
    return _with_interval(m, path, family.main.key, hint)


def _class_drop(m: Metrics, limit: float, family: Scored) -> Reading:
    fp32 = _per_class(m, m.params.baseline.per_class, m.params.baseline.metrics, family.main.key)
    int8 = _per_class(m, m.params.int8_eval.per_class, m.params.int8_eval.metrics, family.main.key)
    if fp32.keys() != int8.keys():
        raise MetricsUnavailable(f"{m.params.baseline.per_class} and {m.params.int8_eval.per_class} list different "
                                 f"classes; re-run {m.rerun(m.params.int8_eval.per_class)}")
    # a class without instances in the split has no AP in either model (None): nothing to judge there
    drops = [(name, fp32[name] - int8[name]) for name in fp32 if fp32[name] is not None and int8[name] is not None]
    if not drops:
        raise MetricsUnavailable(f"{m.params.baseline.per_class}: no class has an instance in the "
                                 f"'{m.params.baseline.split}' split; label some images or turn the gate off")
    name, drop = max(drops, key=lambda item: item[1])
    return Reading(drop, f"class '{name}' (FP32 {fp32[name]:.4f}, INT8 {int8[name]:.4f}); {_accuracy_hint(m)}",
                   caveat="a point estimate: one class has few instances, far noisier than the overall drop")


def _at_conf_drop(m: Metrics, limit: float, family: Scored, rate: str) -> Reading:
    """A rate's drop at the deployed threshold; when INT8's scores moved, the advice is a threshold."""
    path, key = m.params.int8_eval.metrics, family.key(f"{rate}_at_conf")
    conf, int8_conf = m.number(path, "deploy_conf"), m.number(path, "deploy_int8_conf")
    fp32, int8 = m.number(path, f"baseline_{key}"), m.number(path, key)
    shift = _score_shift(m, family)
    at = f"at {conf:g}" + (f" (INT8 at {int8_conf:g})" if int8_conf != conf else "")
    caveat = f"FP32 {rate} {fp32:.4f}, INT8 {int8:.4f} {at}" + (f"; {shift}" if shift else "")
    half = (m.number(path, f"{key}_drop_ci_high") - m.number(path, f"{key}_drop_ci_low")) / 2
    caveat += f"; {_resolution(m, half, limit, f'{rate} drops')}"
    return _with_interval(m, path, f"{key}_drop", _threshold_advice(m, family) or _accuracy_hint(m), caveat)


def _score_shift(m: Metrics, family: Scored) -> str:
    """'INT8 scores the objects FP32 finds -0.12 [-0.14, -0.10] lower (median of 210)', or '' without pairs."""
    path, key = m.params.int8_eval.metrics, family.key("score_shift")
    if m.value(path, key) is None:
        return ""
    shift = m.number(path, key)
    return (f"median score shift INT8 - FP32 {shift:+.4f} [{m.number(path, f'{key}_ci_low'):+.4f}, "
            f"{m.number(path, f'{key}_ci_high'):+.4f}] over {int(m.number(path, f'{key}_objects'))} objects both find")


def scores_moved(m: Metrics, family: Scored) -> bool:
    """Whether INT8's scores moved beyond noise: the score shift's interval excludes 0."""
    path, key = m.params.int8_eval.metrics, family.key("score_shift")
    if m.value(path, key) is None:
        return False
    return m.number(path, f"{key}_ci_high") < 0 or m.number(path, f"{key}_ci_low") > 0


def _threshold_advice(m: Metrics, family: Scored) -> str:
    """The `deploy.int8_conf` that restores FP32's recall, as a block to paste, when INT8's scores moved."""
    path = m.params.int8_eval.metrics
    if not scores_moved(m, family):
        return ""
    advised = m.value(path, family.key("advised_int8_conf"))
    conf, recall = m.number(path, "deploy_conf"), m.number(path, f"baseline_{family.key('recall_at_conf')}")
    if advised is None:
        return (f"INT8's scores moved ({_score_shift(m, family)}), and no INT8 threshold finds as many objects as "
                f"FP32 at {conf:g} (recall {recall:.4f}): lowering the threshold cannot fix it; "
                + _accuracy_hint(m))
    precision = m.number(path, family.key("advised_int8_precision"))
    fp32_precision = m.number(path, f"baseline_{family.key('precision_at_conf')}")
    block = paste_block(f"INT8 at {advised:g} finds what FP32 finds at {conf:g}: recall "
                        f"{m.number(path, family.key('advised_int8_recall')):.4f} (FP32 {recall:.4f}), precision "
                        f"{precision:.4f} (FP32 {fp32_precision:.4f}), measured on the "
                        f"{int(m.number(path, 'images'))} '{m.params.baseline.split}' images", {"int8_conf": advised})
    return (f"INT8's scores moved ({_score_shift(m, family)}): ship INT8 at its own threshold. Paste this under "
            f"`deploy:` in params.yaml:\n{block}")


def _small_drop(m: Metrics, limit: float, family: Scored) -> Reading:
    path, key = m.params.int8_eval.metrics, family.key("small_map50_95")
    objects = m.value(path, f"{family.prefix}small_objects")
    if not objects:
        raise MetricsUnavailable(f"{path}: no small object in the '{m.params.baseline.split}' split "
                                 f"({family.main.title} has no small range, or none is under 32x32 pixels): set "
                                 "gates.max_small_map50_95_drop to null")
    caveat = (f"{objects} small objects; FP32 {m.number(path, f'baseline_{key}'):.4f}, INT8 "
              f"{m.number(path, key):.4f}")
    return _with_interval(m, path, f"{key}_drop", _accuracy_hint(m), caveat)


def _shift_drop(m: Metrics, limit: float, family: Scored, name: str) -> Reading:
    """INT8's drop under one shift at the severity where it is largest, beside the clean drop."""
    path = m.params.robustness.metrics
    severity = int(m.number(path, f"{shift_key(family, name)}_drop_severity"))
    key = shift_key(family, f"{name}_{severity}")
    clean = m.number(m.params.int8_eval.metrics, family.main.stat("drop"))
    caveat = (f"the worst of severities {', '.join(map(str, m.params.robustness.severities))}: at {severity}, FP32 "
              f"{m.number(path, f'baseline_{key}'):.4f}, INT8 {m.number(path, key):.4f}; on clean images the drop "
              f"is {clean:.4f}")
    shifted = name.replace("_", " ")
    fix = (f"Ranges calibrated on clean images can clip what {shifted} makes of them: try `range_estimator: minmax` "
           "under `quantize:`, and judge the clean gates too (wider ranges round coarser)"
           if m.params.quantize.range_estimator != "minmax" else
           f"The ranges are already the widest (`range_estimator: minmax`): calibrate on images like the {shifted} "
           "ones too (a calib split with shifted copies), or keep the layer named float")
    hint = f"{_layer_under_shift(m, name)}the drop per severity in {m.params.robustness.csv}; {_look_hint(m)}. " + fix
    return _with_interval(m, path, f"{shift_key(family, name)}_drop", hint, caveat)


def _layer_under_shift(m: Metrics, name: str) -> str:
    """'under bright (severity 3) layer X diverges: 2.1 dB (31.0 dB on the clean images), 4.2% clipped; ...; ' from
    the divergence stage's pass over the same images shifted, or '' without it."""
    div = m.params.divergence
    try:
        row = next((r for r in m.read(div.shifts_csv) if r.get("shift") == name), None)
        m.value(div.metrics, "model_sha256")  # the table is current when divergence.json is
    except MetricsUnavailable:
        return ""
    if not row or not row.get("layer"):
        return ""
    now, before = (float(row.get(key) or 0) for key in ("clip_fraction", "clean_clip_fraction"))
    what = ("diverges" if row["divergent"] == "1" else "clips more than on the clean images"
            if now - before >= CLIP_GROWTH else "loses the most SQNR against the clean images")
    clipped = (f", {now:.1%} of its values clipped ({before:.1%} clean)" if row.get("clean_clip_fraction")
               else f", {now:.1%} of its values clipped" if row.get("clip_fraction") else "")
    advice = f"; {row['advice']}" if row.get("advice") else ""
    return (f"under {name.replace('_', ' ')} (severity {row['severity']}, the divergence images) layer {row['layer']} "
            f"{what}: {float(row['sqnr_db']):.1f} dB ({float(row['clean_sqnr_db']):.1f} dB clean){clipped}{advice} "
            f"({div.shifts_csv}); ")


def _per_class(m: Metrics, path: str, sibling: str, key: str) -> dict[str, float | None]:
    m.value(sibling, "model_sha256")  # the per-class file is current when the file written beside it is
    rows = m.read(path)
    try:
        return {str(row["class_name"]): None if row[key] is None else float(row[key]) for row in rows}
    except (TypeError, KeyError, ValueError) as exc:
        raise MetricsUnavailable(f"{path} is malformed ({exc.__class__.__name__}); re-run {m.rerun(path)}") from exc


def _latency(m: Metrics, limit: float) -> Reading:
    path = m.params.benchmark.metrics
    return Reading(m.number(path, "int8_latency_ms"), f"benchmark.hint is '{m.value(path, 'hint')}' (latency numbers "
                   f"are lower with the latency hint); the float ops in {m.params.quantize.precision_table}")


def _speedup(m: Metrics, limit: float) -> Reading:
    path = m.params.benchmark.metrics
    pairs = int(m.number(path, "pairs"))
    hint = (f"FP32 {m.number(path, 'fp32_fps'):.1f} FPS vs INT8 {m.number(path, 'int8_fps'):.1f} FPS over {pairs} "
            f"interleaved pairs (a busy or throttled machine moves both; raise benchmark.max_seconds for more pairs); "
            f"ops kept float in {m.params.quantize.precision_table}")
    reading = _with_interval(m, path, "speedup_fps", hint, unit=PAIRS)
    cpu = describe({key: m.value(path, key) for key in ("cpu_model", "cpu_isa")})
    caveat = (f"{pairs} benchmark pairs on {cpu} resolve the speed-up to about {(reading.high - reading.low) / 2:.3f}x "
              "(another CPU gives another ratio: AVX2-only INT8 gains less than VNNI or AMX)")
    return dataclasses.replace(reading, caveat=caveat)


def _detection_error(m: Metrics, limit: float) -> Reading:
    path = m.params.divergence.metrics
    compared = int(m.number(path, "detections_compared"))
    hint = f"{where_to_look(m)}; the ranking in {m.params.sensitivity.csv} (which quantizers, kept float, remove it)"
    task = recorded(m.params.export.record)
    confident = f" (score >= {m.params.int8_eval.bad_case_conf:g})" if task.objects else ""  # a top class: any score
    caveat = (f"mean of {task.drift_error} over the {compared} {task.prediction}s FP32 or INT8 makes on "
              f"{int(m.number(path, 'images'))} images{confident}")
    return Reading(m.number(path, "detection_error"), hint, caveat=caveat)


def _nan_inf(m: Metrics, limit: int) -> Reading:
    path = m.params.divergence.metrics
    return Reading(int(m.number(path, "nan_inf_layers")), f"the rows with nan_inf > 0 in {m.params.divergence.csv}")


def _layers_below(m: Metrics, limit: float) -> Reading:
    path = m.params.divergence.metrics
    count, layers = int(m.number(path, "layers_below_sqnr_floor")), int(m.number(path, "layers"))
    hint = where_to_look(m)
    return Reading(m.number(path, "layers_below_sqnr_floor_frac"), hint,
                   caveat=f"{count} of {layers} layers below {m.params.divergence.sqnr_floor_db:g} dB")


def _inventory(m: Metrics, limit: int) -> Reading:
    missing = m.value(m.params.quantize.record, "fp32_ops_missing")
    return Reading(len(missing), f"FP32 ops absent from the INT8 model: {', '.join(missing[:5])}")


def _quantized(m: Metrics, limit: int) -> Reading:
    return Reading(int(m.number(m.params.quantize.metrics, "quantizer_count")),
                   "quantize.ignored_scope (types or patterns that match every op?)")


def _ignored_float(m: Metrics, limit: int) -> Reading:
    m.value(m.params.quantize.metrics, "model_sha256")  # the table is current when quantize.json is
    rows = m.read(m.params.quantize.precision_table)
    try:
        wrong = [row["name"] for row in rows if row["why"].startswith("ignored") and row["precision"] != "float"]
    except (TypeError, KeyError) as exc:
        path = m.params.quantize.precision_table
        raise MetricsUnavailable(f"{path} is malformed ({exc.__class__.__name__}); re-run {m.rerun(path)}") from exc
    return Reading(len(wrong), f"ops in the ignored scope that are int8 anyway: {', '.join(wrong[:5])}")


def _provenance(m: Metrics, limit: int) -> Reading:
    p = m.params
    for path in (p.baseline.metrics, p.quantize.metrics, p.quantize.record, p.int8_eval.metrics,
                 p.robustness.metrics, p.benchmark.metrics, p.divergence.metrics, p.sensitivity.metrics,
                 p.autofix.metrics):
        m.value(path, "model_sha256")  # raises on a stale file, naming it
    weights = Path(p.model.weights)
    recorded = m.value(p.export.record, "model_sha256")
    if weights.is_file() and sha256_file(weights) != recorded:
        return Reading(1, f"{weights} changed since {p.export.record} was written: every stage from export on "
                          "measured another model; re-run them all with `dvc repro` (or `make gate`)")
    return Reading(0, "")
