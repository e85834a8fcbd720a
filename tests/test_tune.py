"""The tune stage: every candidate raced and tabled, one model scored once, a block to paste that `make gate` passes."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import logging
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import openvino as ov
import pytest
import yaml

from qgate.artifacts import fp32_model, int8_model
from qgate.errors import QgateError
from qgate.intervals import Interval
from qgate.params import Params, ignored_scope, load_params
from qgate.racing import Budget, Fastest, Race, fastest
from qgate.task_metrics import TASK_METRICS
from qgate.tune_report import headline
from stages.autofix import scope_block
from stages.tune import (SPACE_KEYS, accuracy_limits, autofix_scope, finalists, more_rounds, quantize_block,
                         run_screen, scoped_retries, search_space, sized_round, speed_why, with_screen)
from tests.conftest import ROOT, assert_fails_cleanly, comment_text, copy_project, stage, venv_env

SPACE = {"preset": ["mixed", "performance"], "model_type": ["none"], "fast_bias_correction": [True],
         "range_estimator": ["default", "mean_minmax"], "subset_size": [300], "keep_decode_float": [True]}


def _rows(project: Path) -> list[dict]:
    with open(project / "reports/tune.csv") as handle:
        return list(csv.DictReader(handle))


def _autofix_block(params: Params, names: list[str]) -> str:
    """autofix's block as its stage writes it, keeping `names` float beside the current scope."""
    family = TASK_METRICS["detect"].primary
    best = {family.main.key: 0.5, family.main.stat("drop"): 0.01, "drop_ci_low": 0.0, "drop_ci_high": 0.02,
            "within_target": 1}
    return scope_block(params, names, best, 0.51, family)


def _autofix_keeps_float(project: Path, count: int) -> list[str]:
    """autofix's block in `project`, naming the first `count` convolutions of its FP32 IR."""
    params = load_params(project / "params.yaml")
    model = ov.Core().read_model(project / fp32_model(params))
    names = [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() == "Convolution"][:count]
    (project / "reports").mkdir(exist_ok=True)
    (project / params.autofix.scope).write_text(_autofix_block(params, names))
    return names


def test_tune_on_a_tiny_model(tmp_path, quantized_project, tiny_weights):
    """NNCF's default range estimator for activations is mean_minmax: those candidates are the same INT8 model,
    named, not scored again; the others go through every subset (2, 4, 6 images) and are benchmarked. autofix's
    float scope is one more candidate (the current settings with its ops float): another model, raced alike."""
    project = copy_project(quantized_project, tmp_path, tiny_weights,  # CI time: each default shift, at one severity
                           tune__space=SPACE, tune__first_images=2, robustness__severities=[2])
    kept_float = _autofix_keeps_float(project, 2)
    result = stage("tune", project)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["candidate"]: row for row in _rows(project)}
    assert [(name, row["preset"], row["range_estimator"], row["float_scope"]) for name, row in rows.items()] == [
        ("c0", "mixed", "default", ""), ("c1", "mixed", "mean_minmax", ""), ("c2", "performance", "default", ""),
        ("c3", "performance", "mean_minmax", ""), ("c4", "mixed", "default", "autofix's adds 2 ops float")]
    assert rows["c1"]["status"] == "same model" and rows["c1"]["why"] == "the same INT8 model as c0"
    assert rows["c3"]["why"] == "the same INT8 model as c2" and rows["c3"]["evaluations"] == "0"
    for name in ("c0", "c2", "c4"):
        assert rows[name]["status"] == "passed" and rows[name]["images"] == "6" and rows[name]["evaluations"] == "3"
    assert {name for name, row in rows.items() if row["speedup"]} == {"c0", "c2", "c4"}  # every passing one
    for name in ("c0", "c2", "c4"):  # and why it was not chosen
        assert (rows[name]["why"] == "") == (rows[name]["chosen"] == "1"), rows[name]
        assert float(rows[name]["speedup_ci_low"]) <= float(rows[name]["speedup"]) <= float(
            rows[name]["speedup_ci_high"])
    shifts = load_params(project / "params.yaml").robustness.shifts
    judged = ["recall_at_conf_drop", "f1_at_conf_drop", *(f"shift_{name}_drop" for name in shifts)]
    assert len(judged) > 2  # the default shifts: each passing candidate is judged by every default gate
    for name, key in itertools.product(("c0", "c2", "c4"), judged):
        row = rows[name]
        assert float(row[f"{key}_ci_low"]) <= float(row[key]) <= float(row[f"{key}_ci_high"]), (name, key, row)
    assert all(rows[name][key] == "" for name, key in itertools.product(("c1", "c3"), judged))  # not scored
    metrics = json.loads((project / "metrics/tune.json").read_text())
    assert (metrics["candidates"], metrics["evaluations"], metrics["passed"], metrics["same_model"]) == (5, 9, 3, 2)
    # each candidate's outcome, for `dvc metrics show` / `dvc exp show`: its tune.csv row without the settings
    assert {name: (m["status"], str(m.get("map50_95_drop", "")), str(m.get("speedup", ""))) for name, m in
            metrics["by_candidate"].items()} == {name: (row["status"], row["map50_95_drop"], row["speedup"])
                                                for name, row in rows.items()}
    assert metrics["benchmark_rounds"] >= 3  # more only while a faster finalist is within noise of the chosen one
    first_of_round, rounds_run = {}, Counter()  # each round starts one place further down: FP32 not always first
    for round_number, name in re.findall(r"\[round (\d+)\] tune benchmark: (\S+)", result.stderr):
        first_of_round.setdefault(int(round_number), name)
        rounds_run[name] += 1
    assert metrics["screen_rounds"] == 3  # every passing one ran them (finalists more while contested)
    assert all(3 <= rounds_run[name] <= metrics["benchmark_rounds"] for name in ("c0", "c2", "c4")), rounds_run
    assert rounds_run[metrics["chosen"]] == metrics["benchmark_rounds"]
    assert first_of_round[1] == "fp32" and first_of_round[2] == "c0" and first_of_round[3] == "c2", first_of_round
    assert [row["chosen"] for row in rows.values()].count("1") == 1 and rows[metrics["chosen"]]["chosen"] == "1"
    block = yaml.safe_load((project / "reports/tune_quantize.yaml").read_text())
    assert block == metrics["chosen_settings"]
    if metrics["chosen"] == "c4":
        assert list(block) == [*SPACE_KEYS, "ignored_scope"] and block["ignored_scope"]["names"] == kept_float
    else:
        assert list(block) == SPACE_KEYS
    _assert_pareto_page(project, rows, scored=["c0", "c2", "c4"])
    assert "autofix's adds 2 ops float" in (project / "reports/tune.md").read_text()
    assert f"| mAP50-95 under {shifts[0].replace('_', ' ')} drop |" in (project / "reports/tune.md").read_text()


def _assert_pareto_page(project: Path, rows: dict[str, dict], scored: list[str]) -> None:
    """Every scored candidate is a point of the Pareto data (not the same-model ones), with its drop inside its
    interval and the gate's limit; the page's markdown links its plot, and the HTML holds it inline."""
    with open(project / "reports/tune_pareto.csv") as handle:
        points = {row["candidate"]: row for row in csv.DictReader(handle)}
    assert list(points) == scored
    assert [name for name, row in rows.items() if row["first_round_speedup"]] == scored
    limit = load_params(project / "params.yaml").gates.max_map50_95_drop
    for name, point in points.items():
        assert float(point["drop_ci_low"]) <= float(point["drop"]) <= float(point["drop_ci_high"])
        assert float(point["drop"]) == float(rows[name]["map50_95_drop"]) and float(point["limit"]) == limit
        assert point["speedup"] == (rows[name]["speedup"] or rows[name]["first_round_speedup"])
    assert "1" in [point["pareto"] for point in points.values()]
    page = (project / "reports/tune.md").read_text()
    assert page.startswith("# qgate tune: ")
    plots = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert len(plots) == 1 and (project / "reports" / plots[0]).is_file(), plots
    assert (project / "reports/tune.html").read_text().count("<svg") == 1


@pytest.mark.parametrize("override, message", [
    ({"tune__space": {**SPACE, "range_estimator": ["minmaxx"]}}, "'tune.space.range_estimator' is 'minmaxx'"),
    ({"tune__imgsz": [128, 100]}, "'tune.imgsz' has 100; list multiples of 32"),
    ({"tune__space": {**SPACE, "smooth_quant_alpha": [0.5, 1.5]}}, "'tune.space.smooth_quant_alpha' is 1.5"),
], ids=["unknown-estimator", "imgsz-off-stride", "alpha-above-1"])
def test_bad_tune_params_fail_in_one_line_and_write_nothing(tmp_path, quantized_project, tiny_weights, override,
                                                            message):
    project = copy_project(quantized_project, tmp_path, tiny_weights, **override)
    assert_fails_cleanly("tune", project, ["params.yaml", message], "metrics/tune.json")
    assert not (project / "reports/tune.csv").exists()


def test_deploy_sizes_are_candidates_judged_against_fp32_at_model_imgsz(tmp_path, quantized_project, tiny_weights):
    """`tune.imgsz` adds the candidates again at each other size (model.imgsz, or a size listed twice, adds nothing):
    exported from the weights at that size, quantized on calibration images at it, scored against FP32's
    detections at model.imgsz and timed against FP32 at model.imgsz: another model than c0's."""
    one_each = {key: [value[0]] for key, value in SPACE.items()}
    project = copy_project(quantized_project, tmp_path, tiny_weights, tune__space=one_each, tune__imgsz=[128, 64, 64],
                           tune__first_images=6, robustness__shifts=[])  # CI time: shifts are the test above's
    result = stage("tune", project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exporting" in result.stderr and "at imgsz 64" in result.stderr
    rows = {row["candidate"]: row for row in _rows(project)}
    assert [(name, row["imgsz"], row["status"]) for name, row in rows.items()] == [("c0", "128", "passed"),
                                                                                  ("c1", "64", "passed")]
    assert rows["c1"]["first_round_speedup"] and rows["c1"]["images"] == "6"
    # the tiny model detects nothing (both drops 0): that c1 ran at 64 shows in its speed, a quarter of the pixels
    # (one round: 5.6x against c0's 2.3x over FP32 at 128 on the VNNI machine, an order beyond a round's noise)
    assert float(rows["c1"]["first_round_speedup"]) > 1.5 * float(rows["c0"]["first_round_speedup"]), rows
    metrics = json.loads((project / "metrics/tune.json").read_text())
    assert metrics["same_model"] == 0 and metrics["chosen"] in ("c0", "c1")  # both pass: one is chosen
    assert metrics["chosen_imgsz"] == int(rows[metrics["chosen"]]["imgsz"])
    assert "imgsz" not in yaml.safe_load((project / "reports/tune_quantize.yaml").read_text())


def test_failed_configs_race_again_with_autofix_scope_within_the_budget_left(tmp_path, monkeypatch):
    """The race's second part: every config at model.imgsz that was dropped or failed without a float scope races
    again with autofix's (numbered after the others); one that passed, one at another deploy size, or one whose
    retry is a candidate already, does not; the budget is the whole race's. Drops planted: performance configs
    fail unless their scope keeps ops float."""
    monkeypatch.chdir(tmp_path)
    params = load_params(ROOT / "params.yaml")
    params = dataclasses.replace(params, tune=dataclasses.replace(params.tune, imgsz=(160,)))
    assert autofix_scope(params) is None  # autofix has not run: no scope, no retries
    assert scoped_retries(search_space(params, None), None) == []
    Path("reports").mkdir()
    Path("reports/autofix_scope.yaml").write_text(_autofix_block(params, ["/model.22/Add"]))
    scope = autofix_scope(params)
    candidates = search_space(params, scope)
    limits = accuracy_limits(params, SimpleNamespace(metrics=TASK_METRICS["detect"]))

    def planted(candidate, size):
        failing = candidate.settings["preset"] == "performance" and "ignored_scope" not in candidate.settings
        drop = Interval(0.03, 0.02, 0.04, 0.95) if failing else Interval(0.0, -0.005, 0.005, 0.95)
        return {limit.key: drop for limit in limits}, 1.0  # the clean drop, and recall and F1 at deploy.conf

    # per size, 4 mixed configs pass on 50, 100, 200 images and 4 performance ones are dropped on 50; at
    # model.imgsz autofix's candidate (the current settings with its scope) passes too
    first_part = 2 * (3 * 4 + 4) + 3
    budget = first_part + 4 * 3 - 1  # one evaluation short of the retries' 12 (each passes on 50, 100, 200 images)
    race = Race(candidates, limits, 200, 50, Budget(budget, 1e9), params.gates.confidence,
                params.gates.inconclusive)
    race.run(planted)
    dropped = [c.name for c in candidates if c.status == "dropped" and "imgsz" not in c.settings]
    assert len(dropped) == 4 and race.evaluations == first_part and not race.spent()
    assert sum(c.status == "dropped" for c in candidates) == 8
    retries = scoped_retries(candidates, scope)
    assert [c.name for c in retries] == [f"c{len(candidates) + i}" for i in range(4)]
    assert [{k: v for k, v in c.settings.items() if k != "ignored_scope"} for c in retries] == [
        c.settings for c in candidates if c.name in dropped]
    race.add(retries)
    race.run(planted)
    assert [(c.status, c.images) for c in retries] == [("passed", 200)] * 3 + [("unfinished", 100)]
    assert retries[-1].why == race.spent() == f"budget: tune.max_evaluations {budget} spent"
    assert race.evaluations == budget
    assert scoped_retries(candidates, scope) == []  # a retry is never retried


def test_smooth_quant_alphas_are_candidates_only_where_nncf_runs_smooth_quant(monkeypatch, tmp_path):
    """An alpha is tried with model_type transformer only: with none, SmoothQuant does not run, so those
    candidates keep the current alpha and are not repeated per alpha."""
    monkeypatch.chdir(tmp_path)
    params = load_params(ROOT / "params.yaml")
    one_each = {key: (getattr(params.quantize, key),) for key in SPACE_KEYS}
    space = dataclasses.replace(params.tune.space, **one_each | {"model_type": ("none", "transformer"),
                                                                 "smooth_quant_alpha": (0.5, 0.95, -1.0)})
    params = dataclasses.replace(params, tune=dataclasses.replace(params.tune, space=space))
    candidates = search_space(params, autofix_scope(params))
    assert [(c.settings["model_type"], c.settings["smooth_quant_alpha"]) for c in candidates] == [
        ("none", params.quantize.smooth_quant_alpha), ("transformer", 0.5), ("transformer", 0.95),
        ("transformer", -1.0)]


def test_a_chosen_deploy_size_says_what_to_set(monkeypatch, tmp_path):
    """The block of a candidate at another size pastes only quantize values and says to set model.imgsz, and that
    its drop and speed-up are against FP32 at the current model.imgsz."""
    monkeypatch.chdir(tmp_path)
    params = load_params(ROOT / "params.yaml")
    params = dataclasses.replace(params, tune=dataclasses.replace(params.tune, imgsz=(params.model.imgsz, 160)))
    candidates = search_space(params, autofix_scope(params))
    at_160 = [c for c in candidates if c.settings.get("imgsz") == 160]
    assert len(at_160) == len(candidates) // 2 and [c.name for c in candidates[:len(at_160)]] == [
        f"c{i}" for i in range(len(at_160))]
    chosen = at_160[0]
    assert {key: chosen.settings[key] for key in SPACE_KEYS} == candidates[0].settings
    chosen.status, chosen.images, chosen.drops = "passed", 200, {"map50_95": Interval(0.006, 0.002, 0.009, 0.95)}
    result = Fastest(chosen.name, {chosen.name: Interval(2.9, 2.6, 3.2, 0.95)}, {chosen.name: ""}, 3)
    block = quantize_block(params, SimpleNamespace(metrics=TASK_METRICS["detect"]), candidates, chosen, result)
    assert "set model.imgsz: 160, then `make gate` judges it against FP32 at 160" in comment_text(block)
    assert f"against FP32 at {params.model.imgsz}, your baseline" in comment_text(block)
    assert yaml.safe_load("quantize:\n" + block)["quantize"] == candidates[0].settings


def test_the_headline_says_whether_the_current_settings_passed():
    chosen = {"chosen": "c2", "chosen_speedup": 3.55, "chosen_speedup_ci_low": 3.24, "chosen_speedup_ci_high": 3.89}
    assert headline(chosen | {"by_candidate": {"c0": {"status": "failed"}}}) == (
        "c2 (passes; your current settings (c0): failed), speed-up 3.55x [3.24, 3.89]")
    assert "(faster settings found)" in headline(chosen | {"by_candidate": {"c0": {"status": "passed"}}})
    kept = chosen | {"chosen": "c0", "by_candidate": {"c0": {"status": "passed"}}}
    assert headline(kept).startswith("c0 (current settings kept)")
    assert headline({"chosen": ""}) == "FAIL: no candidate passes the accuracy gates"


def test_a_passing_candidate_not_chosen_says_why():
    speedup = Interval(2.3, 2.1, 2.5, 0.95)
    screen = Fastest("c0", {name: Interval(point, point - 0.2, point + 0.2, 0.95) for name, point in
                            {"c0": 2.0, "c2": 2.9, "c3": 2.5, "c4": 1.5}.items()},
                     {"c0": "", "c2": "", "c3": "", "c4": "c2"}, 3)
    result = Fastest("c0", {"c0": speedup, "c2": speedup}, {"c0": "", "c2": ""}, 5)
    assert speed_why("c0", result, screen, 3) == ""
    assert speed_why("c2", result, screen, 3) == "within noise of c0, which comes first in the search"
    assert speed_why("c3", result, screen, 3) == (
        "not a finalist: over 3 rounds it ran 2.50x, below the finalists' (c2 2.90x over the same rounds)")
    assert speed_why("c4", result, screen, 3) == "not a finalist: c2 is faster beyond noise over 3 rounds"
    alone = Fastest("c0", {"c0": speedup}, {"c0": ""}, 3)
    assert speed_why("c3", alone, screen, 3) == "not a finalist: tune.finalists keeps c0 only"
    assert speed_why("c3", result, screen, 4).startswith("not a finalist: over 3 rounds (cut short by tune.max")
    cut_short = dataclasses.replace(screen, rounds=1)
    assert speed_why("c3", result, cut_short, 3) == (
        "not a finalist: over one round (cut short by tune.max_seconds) it ran 2.50x, below the finalists' "
        "(c2 2.90x over the same rounds)")


def test_the_finalists_run_benchmark_repeats_rounds_after_a_screen_tune_max_seconds_cut(tmp_path, quantized_project):
    """No time was left after the first round: the finalist still runs three (benchmark_app on the tiny model,
    1-s runs), so the chosen one's speed-up has an interval; benchmark.max_seconds 0 adds no contested round."""
    params = load_params(quantized_project / "params.yaml")
    params = dataclasses.replace(params, benchmark=dataclasses.replace(params.benchmark, seconds=1, repeats=3,
                                                                       max_seconds=0))
    irs = {"fp32": quantized_project / fp32_model(params), "c0": quantized_project / int8_model(params)}
    sizes, speeds = {name: params.model.imgsz for name in irs}, {name: [] for name in irs}
    sized_round(params, irs, sizes, speeds, tmp_path)
    run_screen(params, irs, sizes, speeds, tmp_path, time.perf_counter(), 1.0)
    assert [len(runs) for runs in speeds.values()] == [1, 1]
    result = more_rounds(params, irs, sizes, speeds, tmp_path)
    assert result.rounds == 3 and [len(runs) for runs in speeds.values()] == [3, 3]
    assert 0 < result.speedups["c0"].low <= result.speedups["c0"].high < float("inf")


def test_a_screen_of_one_round_gives_a_left_out_candidate_no_interval():
    finalist = Interval(2.3, 2.1, 2.5, 0.95)
    screen = Fastest("c0", {"c0": Interval(2.2, float("-inf"), float("inf"), 0.95),
                            "c1": Interval(2.1, float("-inf"), float("inf"), 0.95)}, {"c0": "", "c1": ""}, 1)
    result = with_screen(Fastest("c0", {"c0": finalist}, {"c0": ""}, 3), screen)
    assert result.speedups == {"c0": finalist} and result.beaten_by == {"c0": "", "c1": ""}


def test_the_screen_starts_no_round_that_tune_max_seconds_cannot_hold(tmp_path, caplog):
    """A round of three IRs took 15 s and 10 s are left: no benchmark_app starts (these IRs do not exist), so
    finalists are picked on the first round alone, and the log says the budget stopped the screen."""
    params = SimpleNamespace(benchmark=SimpleNamespace(repeats=3, seconds=5), tune=SimpleNamespace(max_seconds=60))
    irs = {name: tmp_path / name / "model.xml" for name in ("fp32", "c0", "c1")}
    speeds = {"fp32": [100.0], "c0": [200.0], "c1": [210.0]}
    with caplog.at_level(logging.INFO, logger="stages.tune"):
        run_screen(params, irs, {name: 192 for name in irs}, speeds, tmp_path, time.perf_counter() + 10, 15)
    assert speeds == {"fp32": [100.0], "c0": [200.0], "c1": [210.0]}
    assert "the screen stops after 1 of 3 rounds: tune.max_seconds (60 s) leaves too little" in caplog.text


def test_finalists_are_picked_on_every_screening_round_not_the_first():
    """c1 ran fastest in the first round only; c4 runs faster than c1 on the point value but c2 beats it beyond
    noise (c3 too), so the places go to the unbeaten ones, c0 first while nothing beats it."""
    rounds = {"fp32": [100, 100, 100], "c0": [200, 240, 215], "c1": [260, 200, 199], "c2": [230, 231, 229],
              "c3": [215, 216, 214], "c4": [227, 228, 226], "c5": [250, 240, 245], "c6": [212, 203, 220]}
    passed = [SimpleNamespace(name=name) for name in rounds if name != "fp32"]
    screen = fastest([c.name for c in passed], rounds, rounds["fp32"], 0.95)
    assert [name for name, beater in screen.beaten_by.items() if beater] == ["c3", "c4"]
    assert screen.speedups["c4"].point > screen.speedups["c1"].point
    assert finalists(passed, screen, 3) == ["c0", "c2", "c5"]
    assert finalists(passed, screen, 4) == ["c0", "c1", "c2", "c5"]
    assert finalists(passed, screen, 1) == ["c0"]
    assert finalists(passed[1:], screen, 2) == ["c2", "c5"]


def test_the_current_settings_are_not_a_finalist_when_another_beats_them_beyond_noise():
    rounds = {"fp32": [100, 100, 100], "c0": [200, 201, 200], "c1": [230, 231, 230]}
    passed = [SimpleNamespace(name=name) for name in ("c0", "c1")]
    screen = fastest(["c0", "c1"], rounds, rounds["fp32"], 0.95)
    assert finalists(passed, screen, 1) == ["c1"]


def test_a_hand_edited_autofix_block_fails_naming_the_file(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights, tune__space=SPACE)
    (project / "reports").mkdir(exist_ok=True)
    (project / "reports/autofix_scope.yaml").write_text("  ignored_scope:\n    nmes: [a]\n")
    assert_fails_cleanly("tune", project, ["reports/autofix_scope.yaml", "'quantize.ignored_scope.nmes'"],
                         "metrics/tune.json")
    assert not (project / "reports/tune.csv").exists()


def test_autofix_adds_a_candidate_only_when_its_block_names_new_ops(tmp_path, monkeypatch):
    """No block (autofix has not run) or autofix's "nothing to add" (the current names): the grid alone; new names:
    one more candidate, the current scope with them added, whose pasted block is a valid `ignored_scope`."""
    monkeypatch.chdir(tmp_path)
    params = load_params(ROOT / "params.yaml")
    grid = len(search_space(params, autofix_scope(params)))
    Path("reports").mkdir()
    Path("reports/autofix_scope.yaml").write_text(_autofix_block(params, []))
    assert len(search_space(params, autofix_scope(params))) == grid
    Path("reports/autofix_scope.yaml").write_text(_autofix_block(params, ["/model.2/Concat", "/model.22/Add"]))
    *_, last = candidates = search_space(params, autofix_scope(params))
    assert len(candidates) == grid + 1 and last.name == f"c{grid}"
    assert {key: last.settings[key] for key in SPACE_KEYS} == candidates[0].settings
    assert last.settings["ignored_scope"]["names"] == [*params.quantize.ignored_scope.names, "/model.2/Concat",
                                                       "/model.22/Add"]
    last.status, last.images = "passed", 200
    last.drops = {"map50_95": Interval(0.004, 0.001, 0.007, 0.95)}
    result = Fastest(last.name, {last.name: Interval(1.9, 1.8, 2.0, 0.95)}, {last.name: ""}, 3)
    block = quantize_block(params, SimpleNamespace(metrics=TASK_METRICS["detect"]), candidates, last, result)
    assert "(replacing its ignored_scope; autofix's adds 2 ops float)" in comment_text(block)
    pasted = yaml.safe_load("quantize:\n" + block)["quantize"]
    assert pasted == last.settings and ignored_scope(pasted["ignored_scope"], "block").names == tuple(
        last.settings["ignored_scope"]["names"])
    Path("reports/autofix_scope.yaml").write_text("# no block\n")
    with pytest.raises(QgateError, match="reports/autofix_scope.yaml: no `ignored_scope:` block"):
        search_space(params, autofix_scope(params))


# ---- on the demo (slow): `make tune`, the block pasted, `make gate` ----

@pytest.mark.slow
def test_make_tune_fixes_a_failing_config_with_autofix_s_scope_and_make_gate_passes_the_pasted_block(tmp_path,
                                                                                                      naive_demo):
    """`make tune` on the demo with the naive config current (`naive_demo`: INT8 head decode, which fails the
    demo's gate): the naive config does not pass; raced again with autofix's float scope it does, and is chosen.
    Pasted, `make gate` passes on the same model: the drop tune measured, and a speed-up interval that overlaps
    tune's. The one `make tune` end to end, and autofix's block rescuing a failing config once pasted."""
    project = tmp_path / "demo"
    shutil.copytree(naive_demo.checkout, project, symlinks=True)
    rows = {row["candidate"]: row for row in _rows(project)}
    assert list(rows) == ["c0", "c1"], rows
    naive, scoped = rows["c0"], rows["c1"]
    assert naive["status"] != "passed" and "mAP50-95 drop" in naive["why"], naive
    assert scoped["float_scope"].startswith("autofix's adds ") and scoped["status"] == "passed", scoped
    assert scoped["chosen"] == "1", scoped
    printed = comment_text(naive_demo.stdout)  # make tune prints the block, its comment lines wrapped
    assert f"your current settings (c0) {naive['status']}: mAP50-95 drop" in printed
    metrics = json.loads((project / "metrics/tune.json").read_text())
    block = yaml.safe_load((project / "reports/tune_quantize.yaml").read_text())
    autofix = yaml.safe_load((project / "reports/autofix_scope.yaml").read_text())
    assert block["ignored_scope"] == autofix["ignored_scope"] and block["ignored_scope"]["names"], block
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["quantize"] |= block
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    gated = subprocess.run(["make", "gate"], cwd=project, env=venv_env(), capture_output=True, text=True,
                           timeout=1800)
    assert gated.returncode == 0, gated.stdout[-4000:]
    int8 = json.loads((project / "metrics/int8.json").read_text())
    speed = json.loads((project / "metrics/benchmark.json").read_text())
    # the same model: the same drop and interval (both rounded to 5 digits)
    assert int8["map50_95_drop"] == pytest.approx(metrics["chosen_map50_95_drop"], abs=2e-5), (int8, metrics)
    assert int8["map50_95_drop_ci_low"] == pytest.approx(metrics["chosen_map50_95_drop_ci_low"], abs=2e-5)
    # two runs of one benchmark, minutes apart on a shared CPU, agree when their intervals overlap; a point of one
    # inside the other's interval is a stricter claim than either interval makes (CI fell 0.06 outside it once)
    assert speed["speedup_fps_ci_low"] <= metrics["chosen_speedup_ci_high"], (speed, metrics)
    assert metrics["chosen_speedup_ci_low"] <= speed["speedup_fps_ci_high"], (speed, metrics)
