"""Search quantize settings for the fastest INT8 model whose accuracy passes the gates: race, then speed pairs."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from qgate.artifacts import export_record, model_name, fp32_model, model_dataset, require_output
from qgate.executors import open_executor
from qgate.cli import run_stage
from qgate.cpu import cpu_info, describe
from qgate.deploy import RUNTIMES, quantizer_in_force
from qgate.deployment_checks import (AtConf, ShiftDrops, at_conf_checks, candidate_checks, failures,
                                     shift_checks)
from qgate.errors import QgateError
from qgate.evaluator import Predictor, predict
from qgate.intervals import Interval, PairedScorer, difference
from qgate.io import read_json, sha256_file, write_csv, write_json, write_text
from qgate.params import Params, TuneSpaceParams, as_dict, ignored_scope
from qgate.paste import paste_block
from qgate.precision import rule_scope
from qgate.pipeline import baseline_postprocess, val_images
from qgate.calibration import Calibration
from qgate.racing import (DROPPED, FAILED, PASSED, SAME, UNFINISHED, Budget, Candidate, Fastest, Limit, Race, contested,
                          fastest)
from qgate.runtimes import runtime_for
from qgate.speed_rounds import speed_round
from qgate.tasks import task_for
from qgate.tune_report import SCOPE_KEY, page_files, pareto_rows, scope_change, write_page
from qgate.yolo import export_onnx, load_detector

log = logging.getLogger(__name__)

SPACE_KEYS = [field.name for field in dataclasses.fields(TuneSpaceParams)]
QUANTIZER_NEUTRAL_KEYS = ("subset_size", "keep_decode_float")  # every quantizer reads these (calibration, float rules)
IMGSZ_KEY = "imgsz"  # a candidate's deploy size, set only when it is not model.imgsz (tune.imgsz)


def main(params: Params) -> dict:
    """Race every candidate config on growing val subsets, benchmark the passing ones, then race the finalists;
    write the table and block."""
    cfg = params.tune
    for output in (cfg.csv, cfg.block, cfg.metrics, cfg.pareto_csv, cfg.page_md, cfg.page_html):
        Path(output).unlink(missing_ok=True)
    shutil.rmtree(page_files(params), ignore_errors=True)
    record = export_record(params)
    task = task_for(record)
    scope = autofix_scope(params)
    candidates = search_space(params, scope)
    val = val_images(params, record)
    start = time.perf_counter()
    log.info("tune: %d candidates on up to %d val images (first %d)", len(candidates), len(val[0]),
             min(cfg.first_images, len(val[0])))
    with open_executor(params.compute) as executor:
        scorer = SubsetScorer(params, record, val, executor)
        race = Race(candidates, accuracy_limits(params, task), len(val[0]), cfg.first_images,
                    Budget(cfg.max_evaluations, cfg.max_seconds), params.gates.confidence, params.gates.inconclusive)
        race.run(scorer.score, scorer.twin)
        retries = [] if race.spent() else scoped_retries(candidates, scope)
        if retries:
            log.info("tune: %d failed candidates again with autofix's float scope", len(retries))
            race.add(retries)  # into `candidates`, the list the race holds: they join the table
            race.run(scorer.score, scorer.twin)
        judge_shifts(params, scorer, candidates)
    first_round, screen, result = measure_speed(params, scorer, candidates, start + cfg.max_seconds)
    if result:
        for c in candidates:  # a passing candidate not chosen says why, beside what the race said of its accuracy
            if c.status == PASSED:
                c.why = "; ".join(filter(None, [c.why, speed_why(c.name, result, screen, least_rounds(params))]))
        result = with_screen(result, screen)
    seconds = time.perf_counter() - start
    rows = table(params, candidates, task, first_round, result)
    write_csv(cfg.csv, rows, columns(params, task))
    chosen = next((c for c in candidates if result and c.name == result.chosen), None)
    block = quantize_block(params, task, candidates, chosen, result)
    write_text(cfg.block, block)
    screened = screen.rounds if screen else 0
    metrics = summary(params, task, candidates, race.evaluations, chosen, result, screened, seconds, record, rows)
    write_page(params, task, candidates, pareto_rows(params, task, candidates, first_round, result), block, metrics)
    write_json(cfg.metrics, metrics)
    return metrics


def search_space(params: Params, scope: dict | None) -> list[Candidate]:
    """The current quantize settings first (`c0`), then every other combination of `tune.space`, in order; then
    the current settings with autofix's float `scope` (`autofix_scope`), unless None; last, the current settings
    and the combinations again at each other deploy size of `tune.imgsz`."""
    current = {key: getattr(params.quantize, key) for key in SPACE_KEYS}
    current["quantizer"] = quantizer_in_force(params.deploy.runtime, params.quantize.quantizer)
    space = {key: getattr(params.tune.space, key) for key in SPACE_KEYS}
    space["quantizer"] = [quantizer_in_force(params.deploy.runtime, q) for q in space["quantizer"]] or \
        list(RUNTIMES[params.deploy.runtime].quantizers)
    grid = [as_quantizer_runs_it(dict(zip(SPACE_KEYS, values)), current) for values in
            itertools.product(*space.values())]
    settings = [current]
    for values in grid:
        if values not in settings:
            settings.append(values)
    at_model_size = [*settings, {**current, SCOPE_KEY: scope}] if scope is not None else settings
    other_sizes = [{**values, IMGSZ_KEY: size} for size in dict.fromkeys(params.tune.imgsz)
                   if size != params.model.imgsz for values in settings]
    return [Candidate(f"c{index}", values) for index, values in enumerate(at_model_size + other_sizes)]


def as_quantizer_runs_it(settings: dict, current: dict) -> dict:
    """`settings` as their quantizer acts on them (a candidate that differs only in what it ignores would be the
    same model): another quantizer than NNCF reads none of NNCF's keys, and without model_type transformer NNCF's
    SmoothQuant does not run, so its alpha is the current one."""
    if settings["quantizer"] != "nncf":
        return {**current, "quantizer": settings["quantizer"],
                **{key: settings[key] for key in QUANTIZER_NEUTRAL_KEYS}}
    if settings["model_type"] == "transformer":
        return settings
    return {**settings, "smooth_quant_alpha": current["smooth_quant_alpha"]}


def deploy_size(params: Params, settings: dict) -> int:
    """The image size a candidate is exported, quantized, predicted and timed at."""
    return settings.get(IMGSZ_KEY, params.model.imgsz)


def quantize_settings(settings: dict) -> dict:
    """A candidate's values that go under `quantize:` (its deploy size does not)."""
    return {key: value for key, value in settings.items() if key != IMGSZ_KEY}


def scoped_retries(candidates: list[Candidate], scope: dict | None) -> list[Candidate]:
    """Each candidate at model.imgsz that failed or was dropped without a float scope of its own, again with
    autofix's `scope` (the sensitivity-ranked groups autofix keeps float), as autofix fixes the current settings
    when they fail; none when `scope` is None, and none that repeats a candidate (autofix's own). Not at other
    deploy sizes: keeping ops float wins back quantization error, not what a lower resolution costs."""
    if scope is None:
        return []
    tried, retries = [c.settings for c in candidates], []
    for candidate in candidates:
        settings = {**candidate.settings, SCOPE_KEY: scope}
        if (candidate.status in (FAILED, DROPPED) and not {SCOPE_KEY, IMGSZ_KEY} & set(candidate.settings)
                and settings not in tried):
            tried.append(settings)
            retries.append(Candidate(f"c{len(candidates) + len(retries)}", settings))
    return retries


def autofix_scope(params: Params) -> dict | None:
    """The current `quantize.ignored_scope` plus the op names autofix's block adds (the sensitivity-ranked groups
    it keeps float, chosen by their measured speed cost); None when it adds none, or when autofix has not run
    (the stage run by hand: `make tune` runs autofix first). Only names are taken from the block, so a scope
    edited since autofix ran keeps its patterns, types and subgraphs."""
    path = Path(params.autofix.scope)
    if not path.exists():
        log.info("tune: no %s (autofix has not run): no float-scope candidate", path)
        return None
    block = yaml.safe_load(path.read_text())
    if not isinstance(block, dict) or SCOPE_KEY not in block:
        raise QgateError(f"{path}: no `{SCOPE_KEY}:` block, as autofix writes it; run `make gate` to write it again")
    suggested = ignored_scope(block[SCOPE_KEY], path)  # a hand-edited block fails here, naming the file
    current = params.quantize.ignored_scope
    added = [name for name in suggested.names if name not in current.names]
    return as_dict(dataclasses.replace(current, names=(*current.names, *added))) if added else None


def accuracy_limits(params: Params, task) -> list[Limit]:
    """The drop gates `make gate` judges on clean images: one per scored metric family, each with its
    `gates.max_..._drop`, then recall and F1 at the deployed threshold (`qgate.deployment_checks`)."""
    return [*(Limit(f.main.key, f.main.title, params.gates.max_drop[f.main.key]) for f in task.metrics.scored),
            *(Limit(c.key, c.title, c.limit) for c in at_conf_checks(params, task.metrics))]


def judge_shifts(params: Params, scorer: SubsetScorer, candidates: list[Candidate]) -> None:
    """Every candidate that passed on clean images, judged by the shift gates on the whole split: one that fails
    one fails (its drops join the table). After the race, not in it: each candidate under every shift and severity
    costs a robustness stage, too much for the ones the clean images already drop."""
    own = scorer.task.metrics.primary
    checks = shift_checks(params, own)
    passed = [c for c in candidates if c.status == PASSED]
    if not checks or not passed:
        return
    shifts = ShiftDrops(params, scorer.record, (scorer.images, scorer.names), scorer.executor,
                        scorer.fp32_at(params.model.imgsz), own)
    for candidate in passed:
        log.info("tune %s: under %d shifted copies of the val images", candidate.name, len(shifts.shifts))
        candidate.drops |= shifts.drops(scorer.model(candidate), with_settings(params, candidate.settings))
        failed = failures(params, checks, candidate.drops)
        if failed:
            candidate.status, candidate.why = FAILED, "; ".join(failed)


def with_settings(params: Params, settings: dict) -> Params:
    """`params` with a candidate's quantize values (and its float scope, for autofix's candidate) and size."""
    values = quantize_settings(settings)
    if SCOPE_KEY in values:
        values[SCOPE_KEY] = ignored_scope(values[SCOPE_KEY], params.autofix.scope)
    return dataclasses.replace(params, quantize=dataclasses.replace(params.quantize, **values),
                               model=dataclasses.replace(params.model, imgsz=deploy_size(params, settings)))


class SubsetScorer:
    """Each candidate quantized once and predicted once per val image; its drop scored on the first n images.

    The images enter in a seeded order, so every subset holds the previous one: a candidate that goes on to a
    larger subset is predicted on the new images only. On the whole split the image ids are the baseline's and
    the bootstrap is int8_eval's, so a drop interval here is the one `make gate` measures for the same model.
    """

    def __init__(self, params: Params, record: dict, val: tuple[list[Path], tuple[str, ...]], executor):
        self.params, self.record, self.executor = params, record, executor
        self.runtime = runtime_for(params)
        self.images, self.names = val
        self.task = task_for(record)
        self.tasks: dict[int, object] = {}  # deploy size -> the task's decoding at it (a segment head's masks)
        self.order = np.random.default_rng(params.tune.seed).permutation(len(self.images))
        self.baseline = _by_image(read_json(require_output(params.baseline.detections, "baseline")))
        self.models: dict[str, object] = {}  # the runtime's INT8 models
        self.fp32: dict[int, object] = {}  # deploy size -> the FP32 model exported at it
        self.fingerprints: dict[str, str] = {}  # INT8 model hash -> the first candidate that quantized to it
        self.predicted: dict[str, dict[int, list[dict]]] = {}
        self.shapes: dict[int, tuple[int, int]] = {}
        self.subsets: dict[int, tuple[PairedScorer, dict]] = {}  # size -> scorer per family and FP32's scores
        self.at_conf: dict[int, AtConf] = {}  # size -> the at-threshold drops against FP32 on that subset

    def score(self, candidate: Candidate, size: int) -> tuple[dict[str, Interval], float]:
        """The candidate's drop per metric family on the first `size` images, and its images per second."""
        indices = sorted(int(i) for i in self.order[:size])
        seen = self.predicted.setdefault(candidate.name, {})
        new = [i for i in indices if i not in seen]
        model = self.model(candidate)
        start = time.perf_counter()
        imgsz = deploy_size(self.params, candidate.settings)
        task = self.tasks.setdefault(imgsz, task_for({**self.record, "imgsz": imgsz}))
        predictor = Predictor(self.runtime, (self.runtime.portable(model),), self.params.baseline.inference_precision,
                              imgsz, baseline_postprocess(self.params), task)
        (per_image,), shapes, _ = predict(self.executor, predictor, [self.images[i] for i in new],
                                          self.params.compute.shard_images)
        speed = len(new) / max(time.perf_counter() - start, 1e-9)
        for index, detections, shape in zip(new, per_image, shapes):
            seen[index], self.shapes[index] = detections, shape
        scorers = self._subset(indices)
        candidate_detections = _renumbered(seen, indices)
        level = self.params.int8_eval.ci_level
        drops = {key: difference(fp32_scores, scorer.scores(candidate_detections)[0], level)
                 for key, (scorer, fp32_scores) in scorers.items()}
        if at_conf_checks(self.params, self.task.metrics):
            drops |= self.at_conf[len(indices)].drops(candidate_detections)
        log.info("tune %s on %d images: %s", candidate.name, size,
                 ", ".join(f"{key} drop {drop.text()}" for key, drop in drops.items()))
        return drops, speed

    def twin(self, candidate: Candidate) -> str:
        """An earlier candidate whose INT8 model is this one's: the same graph and weights ('' if none)."""
        fingerprint = self.runtime.fingerprint(self.model(candidate))
        first = self.fingerprints.setdefault(fingerprint, candidate.name)
        if first == candidate.name:
            return ""
        del self.models[candidate.name]  # never scored: the first one's model stands for it
        return first

    def model(self, candidate: Candidate):
        """The candidate's INT8 model, quantized on first use."""
        if candidate.name not in self.models:
            params = with_settings(self.params, candidate.settings)
            log.info("tune %s: quantizing with %s", candidate.name, candidate.settings)
            fp32 = self.fp32_at(params.model.imgsz)
            calibration = Calibration.of(params, model_dataset(params, self.record), self.task.prepare)
            self.models[candidate.name] = self.runtime.quantize(fp32, calibration, params,
                                                                list(rule_scope(self.runtime, fp32, params)))
        return self.models[candidate.name]

    def fp32_at(self, imgsz: int):
        """The FP32 model at a deploy size: the export stage's at model.imgsz, else `model.weights` exported."""
        if imgsz not in self.fp32:
            if imgsz == self.params.model.imgsz:
                self.fp32[imgsz] = self.runtime.read(fp32_model(self.params))
            else:
                weights = self.params.model.weights
                if sha256_file(weights) != self.record["model_sha256"]:
                    raise QgateError(f"{weights}: changed since the export stage ran; run `make gate` (or `make "
                                     "tune`, which runs it) so every deploy size comes from the same weights")
                log.info("tune: exporting %s at imgsz %d", weights, imgsz)
                with tempfile.TemporaryDirectory() as tmp:
                    onnx = export_onnx(load_detector(weights), weights, imgsz, self.params.export, Path(tmp))
                    self.fp32[imgsz] = self.runtime.from_onnx(onnx, weights, self.params.export.end2end)
        return self.fp32[imgsz]

    def _subset(self, indices: list[int]) -> dict[str, tuple[PairedScorer, np.ndarray]]:
        """Per metric family: the paired scorer of these images and FP32's scores on it (built once per size)."""
        if len(indices) not in self.subsets:
            p = self.params.int8_eval
            truth = self.task.ground_truth([self.images[i] for i in indices], [self.shapes[i] for i in indices],
                                           self.names)
            fp32 = _renumbered(self.baseline, indices)
            entries = {}
            for family in self.task.metrics.scored:
                scorer = self.task.scorer(family, truth, p.bootstrap_samples, p.seed)
                entries[family.main.key] = (scorer, scorer.scores(fp32)[0])
            self.subsets[len(indices)] = entries
            self.at_conf[len(indices)] = AtConf(self.params, self.task, self.task.metrics.primary, truth, fp32,
                                                scorer.weights)
        return self.subsets[len(indices)]


def _by_image(detections: list[dict]) -> dict[int, list[dict]]:
    grouped: dict[int, list[dict]] = {}
    for detection in detections:
        grouped.setdefault(int(detection["image_id"]), []).append(detection)
    return grouped


def _renumbered(per_image: dict[int, list[dict]], indices: list[int]) -> list[dict]:
    """The detections of `indices`, each image's id its position among them (the subset's ground truth ids)."""
    return [{**d, "image_id": position} for position, index in enumerate(indices) for d in per_image.get(index, [])]


def measure_speed(params: Params, scorer: SubsetScorer, candidates: list[Candidate],
                  deadline: float) -> tuple[dict[str, float], Fastest | None, Fastest | None]:
    """Interleaved benchmark_app rounds: FP32 and every scored candidate once (the first-round speed-ups the
    Pareto plot shows, failed ones too), every passing one for the rest of the screen (`run_screen`, until
    `deadline`), then the finalists (`finalists`) up to `least_rounds` whatever the deadline, and more while the
    choice is contested (`more_rounds`). Returns the first round, every passing candidate over the screen's
    rounds and the finalists' choice, fastest beyond noise (`qgate.racing.fastest`); None when none passed."""
    cfg = params.benchmark
    scored = [c for c in candidates if c.status in (PASSED, FAILED, DROPPED)]
    passed = [c for c in scored if c.status == PASSED]
    if not scored:
        return {}, None, None
    with tempfile.TemporaryDirectory() as tmp:
        irs = {"fp32": fp32_model(params)}
        for candidate in scored:
            irs[candidate.name] = Path(tmp) / candidate.name / model_name(params, "int8")
            scorer.runtime.save(scorer.models[candidate.name], irs[candidate.name])
        speeds: dict[str, list[float]] = {name: [] for name in irs}
        sizes = {"fp32": params.model.imgsz} | {c.name: deploy_size(params, c.settings) for c in scored}
        began = time.perf_counter()
        sized_round(params, irs, sizes, speeds, Path(tmp))
        per_ir = (time.perf_counter() - began) / len(irs)  # benchmark_app's start-up and compile included
        first_round = {c.name: speeds[c.name][0] / speeds["fp32"][0] for c in scored}
        if not passed:
            return first_round, None, None
        passing = {name: irs[name] for name in ("fp32", *(c.name for c in passed))}
        run_screen(params, passing, sizes, speeds, Path(tmp), deadline, per_ir * len(passing))
        screen = fastest([c.name for c in passed], speeds, speeds["fp32"], cfg.ci_level)
        finals = {name: irs[name] for name in ("fp32", *finalists(passed, screen, params.tune.finalists))}
        result = more_rounds(params, finals, sizes, speeds, Path(tmp))
    return first_round, screen, result


def run_screen(params: Params, irs: dict[str, Path], sizes: dict[str, int], speeds: dict[str, list[float]],
               tmp: Path, deadline: float, last: float) -> None:
    """The rounds every passing candidate runs, with FP32, before finalists are picked (`least_rounds`), each
    started only while the time left before `deadline` (the end of `tune.max_seconds`) holds it: as long as the
    last round took (`last` s, an estimate, before one is timed)."""
    wanted = least_rounds(params)
    while len(speeds["fp32"]) < wanted:
        if time.perf_counter() + last > deadline:
            log.info("tune benchmark: the screen stops after %d of %d rounds: tune.max_seconds (%g s) leaves too "
                     "little for another", len(speeds["fp32"]), wanted, params.tune.max_seconds)
            return
        began = time.perf_counter()
        sized_round(params, irs, sizes, speeds, tmp)
        last = time.perf_counter() - began


def least_rounds(params: Params) -> int:
    """The rounds a speed-up is judged on at least: `benchmark.repeats`, 3 at least (one round is too noisy to
    leave a candidate out on, and gives no interval)."""
    return max(params.benchmark.repeats, 3)


def more_rounds(params: Params, finals: dict[str, Path], sizes: dict[str, int], speeds: dict[str, list[float]],
                tmp: Path) -> Fastest:
    """The finalists' choice, after the rounds a screen cut short left out (`least_rounds`: the chosen one's
    speed-up has an interval whatever the budget), then more while a finalist faster on the point value than the
    chosen one is within a wide interval of it (`qgate.racing.contested`), until `benchmark.max_seconds` would
    be spent (as the benchmark stage adds pairs while its interval is undecided)."""
    cfg = params.benchmark
    while len(speeds["fp32"]) < least_rounds(params):
        sized_round(params, finals, sizes, speeds, tmp)
    kept = {name: speeds[name] for name in finals if name != "fp32"}  # the same lists: rounds append to them
    result = fastest(list(kept), kept, speeds["fp32"], cfg.ci_level)
    start, last = time.perf_counter(), len(finals) * cfg.seconds  # a round's seconds, until one is timed
    while reason := contested(result, kept, cfg.ci_level, cfg.max_spread):
        if time.perf_counter() - start + last > cfg.max_seconds:
            log.info("tune benchmark: %s after %d rounds; benchmark.max_seconds %g s spent", reason,
                     len(speeds["fp32"]), cfg.max_seconds)
            break
        log.info("tune benchmark: %s; one more round", reason)
        began = time.perf_counter()
        sized_round(params, finals, sizes, speeds, tmp)
        last = time.perf_counter() - began
        result = fastest(list(kept), kept, speeds["fp32"], cfg.ci_level)
    return result


def speed_why(name: str, result: Fastest, screen: Fastest, wanted: int) -> str:
    """Why a passing candidate was not chosen ('' for the chosen one): as a finalist (`Fastest.why`), or, from
    the screen, that another one is faster beyond noise, or that it ran below every finalist's speed-up but c0's
    over the same rounds (c0 is a finalist whenever it passes and is not beaten), and that `tune.max_seconds`
    ended the screen when it ran fewer than `wanted` rounds."""
    if name in result.speedups:
        return result.why(name)
    rounds = f"over {screen.rounds} rounds" if screen.rounds > 1 else "over one round"
    if screen.rounds < wanted:  # `run_screen` stopped short of the `wanted` rounds
        rounds += " (cut short by tune.max_seconds)"
    if screen.beaten_by[name]:
        return f"not a finalist: {screen.beaten_by[name]} is faster beyond noise {rounds}"
    others = [f"{n} {screen.speedups[n].point:.2f}x" for n in result.speedups if n != "c0"]
    if not others:
        return "not a finalist: tune.finalists keeps c0 only"
    return (f"not a finalist: {rounds} it ran {screen.speedups[name].point:.2f}x, below the finalists' "
            f"({', '.join(others)} over the same rounds)")


def finalists(passed: list[Candidate], screen: Fastest, count: int) -> list[str]:
    """The passing candidates no other beats beyond noise in the screen, `count` in all, in search order: the
    current settings (c0) first, then the highest point speed-ups."""
    unbeaten = [c.name for c in passed if not screen.beaten_by[c.name]]
    current = [name for name in unbeaten if name == "c0"]
    others = sorted((name for name in unbeaten if name != "c0"), key=lambda name: -screen.speedups[name].point)
    kept = set(current + others[: count - len(current)])
    return [name for name in unbeaten if name in kept]


def with_screen(result: Fastest, screen: Fastest) -> Fastest:
    """The finalists' choice, with the screen's speed-ups and beaters for the passing candidates that were not
    finalists (over the rounds they ran), so every passing candidate's row has a speed-up interval (none when a
    screen cut to one round gave it none: its row keeps the first round's). Its `why` is the finalists' only:
    a candidate that was not one is explained by `speed_why`."""
    measured = {name: speedup for name, speedup in screen.speedups.items() if math.isfinite(speedup.low)}
    return dataclasses.replace(result, speedups=measured | result.speedups,
                               beaten_by=screen.beaten_by | result.beaten_by)


def sized_round(params: Params, irs: dict[str, Path], sizes: dict[str, int], speeds: dict[str, list[float]],
                tmp: Path) -> None:
    """One interleaved round of timed runs of `irs`, each at its deploy size, appended to `speeds`. Each round
    starts one place further down the list (FP32 first in the first), so no IR always runs at the same point of
    a round that lasts a minute with many candidates."""
    names = list(irs)
    shift = len(speeds[names[0]]) % len(names)
    for name in names[shift:] + names[:shift]:  # each at its own size (benchmark_app's shape, when batch > 1)
        speed_round(runtime_for(params), {name: irs[name]}, params.baseline.inference_precision, params.benchmark,
                    tmp / "reports", sizes[name], speeds, "tune")


def columns(params: Params, task) -> list[str]:
    """tune.csv's columns: the candidate, its settings, how far it got, its drops (clean, at the deployed
    threshold, under each shift), its speed."""
    drops = [f"{key}{end}" for key in [*(f.main.stat("drop") for f in task.metrics.scored),
                                       *(f"{c.key}_drop" for c in candidate_checks(params, task.metrics))]
             for end in ("", "_ci_low", "_ci_high")]
    return ["candidate", *SPACE_KEYS, "float_scope", IMGSZ_KEY, "status", "why", "images", "evaluations", *drops,
            "images_per_second", "first_round_speedup", "speedup", "speedup_ci_low", "speedup_ci_high", "beaten_by",
            "chosen"]


def table(params: Params, candidates: list[Candidate], task, first_round: dict[str, float],
          result: Fastest | None) -> list[dict]:
    """One row per candidate (tune.csv)."""
    rows = []
    for c in candidates:
        row = {"candidate": c.name, **{key: c.settings[key] for key in SPACE_KEYS},
               "float_scope": scope_change(params, c.settings), IMGSZ_KEY: deploy_size(params, c.settings),
               "status": c.status, "why": c.why,
               "images": c.images, "evaluations": c.evaluations, "images_per_second": round(c.images_per_second, 1)}
        if c.name in first_round:
            row["first_round_speedup"] = round(first_round[c.name], 3)
        for f in task.metrics.scored:
            drop = c.drops.get(f.main.key)
            if drop is not None:
                row |= drop.fields(f.main.stat("drop"), 5)
        for check in candidate_checks(params, task.metrics):
            if check.key in c.drops:
                row |= c.drops[check.key].fields(f"{check.key}_drop", 5)
        if result and c.name in result.speedups:
            row |= result.speedups[c.name].fields("speedup", 3) | {"beaten_by": result.beaten_by[c.name]}
        row["chosen"] = int(bool(result) and c.name == result.chosen)
        rows.append(row)
    return rows


def quantize_block(params: Params, task, candidates: list[Candidate], chosen: Candidate | None,
                   result: Fastest | None) -> str:
    """The chosen settings as lines to paste under `quantize:` in params.yaml, with what tune measured."""
    if chosen is None:
        return paste_block("# tune found no candidate that passes the accuracy gates on the whole val split "
                           "(reports/tune.csv says why each one stopped);\n# nothing to paste. Widen tune.space or "
                           "raise the budget.", {})
    drops = "; ".join([*(f"{f.main.title} drop {chosen.drops[f.main.key].text()}"
                         for f in reversed(task.metrics.scored)),
                       *(f"{c.title} drop {chosen.drops[c.key].text()}" for c in candidate_checks(params, task.metrics)
                         if c.key in chosen.drops)])
    speedup = result.speedups[chosen.name]
    measured = (f"# {drops} on all {chosen.images} val images; speed-up "
                f"{speedup.point:.2f}x [{speedup.low:.2f}, {speedup.high:.2f}] over FP32 ({params.benchmark.hint}, "
                f"{describe(cpu_info())}).\n")
    if chosen.name == "c0":
        header = ("# Your current quantize settings (c0) stay: they pass the gates and no candidate that passed was "
                  "faster beyond noise.\n# Nothing to change; these are the values they hold.\n")
    else:
        current = candidates[0]
        why = ("are slower beyond noise" if current.status == PASSED else f"{current.status}: {current.why}")
        scope = scope_change(params, chosen.settings)
        replacing = f" (replacing its ignored_scope; {scope})" if scope else ""
        header = (f"# Paste under `quantize:` in params.yaml{replacing}: tune's choice ({chosen.name}), the fastest "
                  f"that passes the gates; your current settings (c0) {why}.\n")
    size = deploy_size(params, chosen.settings)
    if size != params.model.imgsz:
        header += (f"# Deploy it at imgsz {size}: set model.imgsz: {size}, then `make gate` judges it against FP32 at "
                   f"{size}; the drop and speed-up below are against FP32 at {params.model.imgsz}, your baseline.\n")
    header += measured
    return paste_block(header, quantize_settings(chosen.settings))


def summary(params: Params, task, candidates: list[Candidate], evaluations: int, chosen: Candidate | None,
            result: Fastest | None, screened: int, seconds: float, record: dict, rows: list[dict]) -> dict:
    """metrics/tune.json: how the search went and what it chose; last, each candidate's outcome (status, drop and
    speed-up intervals of its tune.csv row), so `dvc metrics show`, `dvc exp show` and `dvc metrics diff` list
    them."""
    metrics = {"candidates": len(candidates), "evaluations": evaluations,
               **{status.replace(" ", "_"): sum(c.status == status for c in candidates)
                  for status in (PASSED, FAILED, DROPPED, SAME, UNFINISHED)},
               "chosen": chosen.name if chosen else "",
               "chosen_settings": quantize_settings(chosen.settings) if chosen else {}}
    if chosen is not None:
        metrics["chosen_imgsz"] = deploy_size(params, chosen.settings)
        for f in task.metrics.scored:
            metrics |= chosen.drops[f.main.key].fields(f"chosen_{f.main.stat('drop')}", 5)
        for check in candidate_checks(params, task.metrics):
            if check.key in chosen.drops:
                metrics |= chosen.drops[check.key].fields(f"chosen_{check.key}_drop", 5)
        metrics |= result.speedups[chosen.name].fields("chosen_speedup", 3)
        metrics |= {"screen_rounds": screened, "benchmark_rounds": result.rounds}
    outcome = [key for key in columns(params, task) if key == "status" or "drop" in key or "speedup" in key]
    return metrics | {"ci_level": params.int8_eval.ci_level, "hint": params.benchmark.hint,
                      "seconds": round(seconds, 1), **cpu_info(), "model_sha256": record["model_sha256"],
                      "by_candidate": {row["candidate"]: {key: row[key] for key in outcome if key in row}
                                       for row in rows}}


if __name__ == "__main__":
    run_stage(main, __doc__)
