"""sensitivity and autofix stages: tiny-model bad input and no-op paths; on the trained demo (slow) a planted
fault ranked and fixed, an unreachable target, and the issue's naive-config -> paste -> pass acceptance."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from qgate.autofix_search import aimed_family
from qgate.groups import Group
from qgate.params import load_params
from qgate.plots import sensitivity_figure, svg_text
from qgate.task_metrics import TASK_METRICS
from stages import sensitivity
from stages.autofix import scope_block
from tests.conftest import (ROOT, assert_fails_cleanly, comment_text, copy_project, judged_here,
                            error_line, failed_in_table, plant_range_fault, stage)

PLANTED = "/model.1/conv/Conv/WithoutBiases"
QUICK_PRICES = {"price_rounds": 2, "price_seconds": 1}  # CI time: the prices' interval, not their precision, is tested


def _json(project: Path, name: str) -> dict:
    return json.loads((project / name).read_text())


def _rows(project: Path, name: str) -> list[dict]:
    with open(project / name) as handle:
        return list(csv.DictReader(handle))


def _run(project: Path, *names: str) -> None:
    for name in names:
        result = stage(name, project)
        assert result.returncode == 0, f"{name}: {result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def evaluated_project(tmp_path_factory, quantized_project, tiny_weights) -> Path:
    """The tiny quantized project after int8_eval (bad cases written; the untrained model is never confident)."""
    project = copy_project(quantized_project, tmp_path_factory.mktemp("evaluated"), tiny_weights,
                           int8_eval__bad_case_conf=0.0005, baseline__conf=0.0001)
    _run(project, "int8_eval")
    return project


def _drop(project: Path, drop: float) -> None:
    """Rewrite int8_eval's drop and its interval (+-0.05), as if INT8 had lost that much."""
    int8 = _json(project, "metrics/int8.json")
    (project / "metrics/int8.json").write_text(json.dumps(
        {**int8, "map50_95_drop": drop, "map50_95_drop_ci_low": drop - 0.05, "map50_95_drop_ci_high": drop + 0.05}))


def test_sensitivity_scores_every_group_on_val_images(tmp_path, evaluated_project, tiny_weights):
    project = copy_project(evaluated_project, tmp_path, tiny_weights, sensitivity__images=2, sensitivity__conf=0.0,
                           int8_eval__bad_case_conf=0.0005, baseline__conf=0.0001)
    _run(project, "sensitivity")  # needs no int8_eval output: it scores val images, not the bad cases
    metrics, rows = _json(project, "metrics/sensitivity.json"), _rows(project, "reports/sensitivity.csv")
    assert metrics["images"] == 2 and len(rows) == metrics["groups"] > 0
    assert [int(r["rank"]) for r in rows] == list(range(1, len(rows) + 1))
    removed = [float(r["error_removed_low"]) for r in rows]
    assert removed == sorted(removed, reverse=True)  # values are meaningful on a trained model: see the slow tests
    per_image = [c for c in rows[0] if c.startswith("error_removed_") and c not in sensitivity.COLUMNS]
    assert len(per_image) == 2
    assert (project / "reports/sensitivity.svg").read_text().startswith("<?xml")


def test_ranking_leaves_an_image_without_error_blank():
    groups = [Group((f"q{i}",), (f"op{i}",), ()) for i in range(2)]
    scores = {"base": np.array([4.0, 0.0]), "errors": np.array([[3.0, 0.0], [1.0, 0.0]]),
              "disagreements": np.zeros((2, 2))}
    rows = sensitivity.rank(groups, scores, [Path("a.jpg"), Path("empty.jpg")], {}, 0.1)
    assert [r["first_op"] for r in rows] == ["op1", "op0"]
    assert rows[0]["error_removed"] == rows[0]["error_removed_a"] == rows[0]["error_removed_worst"] == 0.75
    assert rows[0]["error_removed_empty"] == ""  # FP32 is confident nowhere there: nothing to remove
    assert rows[0]["error_removed_low"] == 0.75  # resamples of the empty image alone have no share to count


def test_a_group_that_helps_on_every_image_outranks_one_whose_total_comes_from_one_image():
    groups = [Group((f"q{i}",), (f"op{i}",), ()) for i in range(2)]
    scores = {"base": np.ones(4), "errors": np.array([[0.0, 1.1, 1.1, 1.1], [0.9, 0.9, 0.9, 0.9]]),
              "disagreements": np.zeros((2, 4))}
    rows = sensitivity.rank(groups, scores, [Path(f"{i}.jpg") for i in range(4)], {}, 0.1)
    assert [r["first_op"] for r in rows] == ["op1", "op0"]
    assert rows[1]["error_removed"] > rows[0]["error_removed"]  # op0 removes more in total: 0.175 against 0.1
    assert rows[0]["error_removed_low"] == pytest.approx(0.1) and rows[1]["error_removed_low"] < 0
    optimistic = sensitivity.rank(groups, scores, [Path(f"{i}.jpg") for i in range(4)], {}, 0.9)
    assert [r["first_op"] for r in optimistic] == ["op0", "op1"]  # a high quantile ranks like the total


def test_the_sensitivity_plot_is_the_same_bytes_for_the_same_ranking():
    rows = [{"error_removed": "0.5", "error_removed_low": "0.4", "first_op": "/a/Conv", "ops": "1"},
            {"error_removed": "0.2", "error_removed_low": "-0.1", "first_op": "/b", "ops": "3"}]
    assert svg_text(sensitivity_figure(rows)) == svg_text(sensitivity_figure(rows))  # a committed report diffs clean


def test_autofix_aims_at_the_gated_metric_the_plain_int8_misses_most():
    pose, params = TASK_METRICS["pose"], load_params(ROOT / "params.yaml")  # autofix.target_drop 0.008

    def drops(box: float, keypoints: float) -> dict:
        return {f.main.stat(f"drop{end}"): drop + shift for f, drop in zip(pose.scored, (box, keypoints))
                for end, shift in (("", 0), ("_ci_low", -0.004), ("_ci_high", 0.004))}

    assert aimed_family(pose, drops(0.017, 0.003), params).iou_type == "bbox"  # the pose demo on one CPU
    assert aimed_family(pose, drops(0.015, 0.02), params) is pose.primary
    assert aimed_family(pose, drops(0.02, 0.015), params).iou_type == "bbox"
    assert aimed_family(pose, drops(0.003, 0.001), params) is pose.primary  # nothing to fix: the task's own


def test_a_candidate_s_at_threshold_drops_are_int8_eval_s(tmp_path, evaluated_project, tiny_weights, monkeypatch):
    """What autofix's steps and tune's race judge a candidate by at the deployed threshold (`AtConf`, on the INT8
    model's detections as a candidate's) is int8_eval's recall and F1 drop with its interval, to the digit; a limit
    below it is a failure naming the rate. The untrained model's scores are tiny: it ships at the lowest."""
    from qgate.artifacts import export_record, require_int8_model
    from qgate.deployment_checks import AtConf, at_conf_checks, failures
    from qgate.intervals import scoring_weights
    from qgate.pipeline import evaluate_model
    from qgate.tasks import task_for

    project = copy_project(evaluated_project, tmp_path, tiny_weights, int8_eval__bad_case_conf=0.0005,
                           baseline__conf=0.0001, deploy__conf=0.0001)
    _run(project, "int8_eval")
    int8 = _json(project, "metrics/int8.json")
    monkeypatch.chdir(project)
    params = load_params(Path("params.yaml"))
    result = evaluate_model(params, require_int8_model(params), export_record(params))
    weights = scoring_weights(len(result.ground_truth["images"]), params.int8_eval.bootstrap_samples,
                              params.int8_eval.seed)
    task = task_for(export_record(params))
    at_conf = AtConf(params, task, task.metrics.primary, result.ground_truth,
                     _json(project, "artifacts/baseline_detections.json"), weights)
    drops = at_conf.drops(result.detections)
    for rate in ("recall", "f1"):
        key = f"{rate}_at_conf_drop"
        assert drops[f"{rate}_at_conf"].fields(key, 5) == {k: int8[k] for k in (key, f"{key}_ci_low", f"{key}_ci_high")}
    assert int8["recall_at_conf"] > 0, int8  # INT8 finds objects there: the rates are not all zero
    strict = dataclasses.replace(params, gates=dataclasses.replace(
        params.gates, max_recall_drop=drops["recall_at_conf"].low - 0.01, max_f1_drop=None))
    checks = at_conf_checks(strict, task.metrics)
    assert [text.split(" drop ")[0] for text in failures(strict, checks, drops)] == ["recall at deploy.conf"]


def test_an_empty_ranking_stops_autofix_saying_why(tmp_path, evaluated_project, tiny_weights):
    project = copy_project(evaluated_project, tmp_path, tiny_weights)
    (project / "reports").mkdir()
    (project / "reports/sensitivity.csv").write_text("rank,group,quantizer\n")  # what sensitivity writes then
    _drop(project, 0.5)  # as if INT8 broke
    assert_fails_cleanly("autofix", project, ["reports/sensitivity.csv", "no ranked quantizer group",
                                              "sensitivity.images"], "metrics/autofix.json")


def test_missing_inputs_name_the_stage_to_run(tmp_path, evaluated_project, tiny_weights):
    project = copy_project(evaluated_project, tmp_path, tiny_weights)  # no reports/: no ranking
    _drop(project, 0.5)
    assert_fails_cleanly("autofix", project, ["reports/sensitivity.csv", "dvc repro sensitivity"],
                         "metrics/autofix.json")


def test_a_zero_evaluation_budget_is_a_params_error(tmp_path, evaluated_project, tiny_weights):
    project = copy_project(evaluated_project, tmp_path, tiny_weights, autofix__max_evaluations=0)
    result = stage("autofix", project)
    assert result.returncode == 2 and "'autofix.max_evaluations' is 0" in error_line(result)


def test_a_block_that_adds_no_name_says_whether_the_target_was_met():
    """No group kept float: the scope already meets the target, or none autofix tried gained beyond noise (the
    block must not claim the target was met when it was not)."""
    params = load_params(ROOT / "params.yaml")
    family = TASK_METRICS["detect"].primary
    best = {family.main.key: 0.70, family.main.stat("drop"): 0.02, "drop_ci_low": 0.01, "drop_ci_high": 0.03}
    met = scope_block(params, [], best | {"within_target": 1}, 0.72, family)
    missed = scope_block(params, [], best | {"within_target": 0}, 0.72, family)
    assert met.startswith("# Nothing to add: the current quantize.ignored_scope already meets the target.")
    assert missed.startswith("# Nothing to add: no group autofix tried in float gained beyond noise.")
    assert "NOT within autofix.target_drop" in comment_text(missed)
    assert yaml.safe_load(missed)["ignored_scope"]["names"] == list(params.quantize.ignored_scope.names)


def test_nothing_to_fix_copies_the_int8_model(tmp_path, evaluated_project, tiny_weights):
    project = copy_project(evaluated_project, tmp_path, tiny_weights)
    shutil.copytree(evaluated_project / "reports", project / "reports")
    _drop(project, 0.0)
    _run(project, "autofix")  # no sensitivity ranking needed: the stage must not read it
    metrics = _json(project, "metrics/autofix.json")
    assert metrics["needed"] == 0 and metrics["evaluations"] == 0 and metrics["ops_float_added"] == 0
    assert metrics["fixed_ir_bin_sha256"] == metrics["int8_ir_bin_sha256"]
    assert (project / "reports/autofix_scope.yaml").read_text().startswith("# Nothing to add")


# ---- on the demo model (slow): the pipeline's own outputs, copied ----

@pytest.fixture(scope="module")
def planted(tmp_path_factory, demo_checkout) -> Path:
    """The demo project's pipeline outputs with a range fault planted in front of PLANTED (INT8 there clips), after
    int8_eval, divergence and sensitivity: each test copies it and runs autofix its own way."""
    project = tmp_path_factory.mktemp("planted") / "p"
    for name in ("models/export", "models/int8", "metrics", "artifacts", "reports"):
        shutil.copytree(demo_checkout / name, project / name, ignore=shutil.ignore_patterns("benchmark"))
    (project / "data").symlink_to(demo_checkout / "data")
    shutil.copy(demo_checkout / "params.yaml", project / "params.yaml")
    plant_range_fault(project, PLANTED)
    _params(project, autofix=QUICK_PRICES)
    _run(project, "int8_eval", "divergence", "sensitivity")
    return project


def _params(project: Path, **sections) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text()) or {}
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _copy(project: Path, dest: Path) -> Path:
    shutil.copytree(project, dest, symlinks=True)
    return dest


@pytest.mark.slow
def test_planted_fault_is_named_first_ranked_first_and_autofix_keeps_it_float(tmp_path, planted):
    """The detect task's planted fault, named and ranked (the segment and pose ones: test_task_pipelines.py), and
    autofix's search and pricing on a real failing model: nothing cheaper has a fault autofix can fix."""
    project = _copy(planted, tmp_path / "p")
    broken = _json(project, "metrics/int8.json")
    assert broken["map50_95_drop"] > 0.05, broken  # the fault really breaks the model
    divergent = [row["name"] for row in _rows(project, "reports/divergence.csv") if row["divergent"] == "1"]
    ranking = _json(project, "metrics/sensitivity.json")
    assert divergent == [PLANTED], divergent
    assert ranking["lead_divergent_layer"] == PLANTED and ranking["lead_divergent_rank"] == 1, ranking
    _run(project, "autofix")
    top3 = [r["ignored_names"].split(";") for r in _rows(project, "reports/sensitivity.csv")[:3]]
    assert any(PLANTED in names for names in top3), top3
    fixed = _json(project, "metrics/autofix.json")
    assert fixed["reached"] == 1 and fixed["fixed_map50_95_drop"] <= 0.008, fixed
    scope = yaml.safe_load((project / "reports/autofix_scope.yaml").read_text())["ignored_scope"]
    assert PLANTED in scope["names"]
    assert fixed["ops_float_added"] <= 10, fixed  # the fix is targeted, not "everything float"
    _assert_priced(project, fixed)


def _assert_priced(project: Path, fixed: dict) -> None:
    """Every kept-float group has its measured price in speed (the fixed model against it with the group back in
    INT8, benchmark_app pairs), and plain INT8 against the fixed model has one too."""
    prices = _rows(project, "reports/autofix_prices.csv")
    assert len(prices) == fixed["groups_float"] >= 1, prices
    for row in prices:
        assert float(row["speed_in_int8_ci_low"]) <= float(row["speed_in_int8"]) <= float(row["speed_in_int8_ci_high"])
        assert int(row["measured_with_groups_float"]) == fixed["priced_groups_float"] >= fixed["groups_float"]
    assert fixed["int8_speed_over_fixed_ci_low"] <= fixed["int8_speed_over_fixed"] <= fixed[
        "int8_speed_over_fixed_ci_high"]


@pytest.mark.slow
def test_an_unreachable_target_reports_the_best_and_fails_the_gate(tmp_path, planted):
    project = _copy(planted, tmp_path / "p")
    _params(project, autofix={"target_drop": -0.5})
    _run(project, "autofix")
    fixed = _json(project, "metrics/autofix.json")
    assert fixed["needed"] == 1 and fixed["reached"] == 0 and fixed["evaluations"] == 1
    assert abs(fixed["fixed_map50_95_drop"]) < 0.002  # every group float: the FP32 model's mAP
    gates = judged_here(project)
    assert gates.returncode == 1
    assert "autofix did not reach autofix.target_drop -0.5: best drop" in gates.stdout and "`make tune`" in gates.stdout
    # the fault costs accuracy, and the drift gates see it too (measured: detection error 0.79 vs 0.011 unplanted)
    assert {"drift_detection_error", "drift_layers_below_floor"} <= failed_in_table(gates.stdout), gates.stdout[-3000:]


def _make(project: Path, target: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", target], cwd=project, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_naive_config_fails_make_gate_which_prints_autofix_s_block_priced(tmp_path, naive_demo):
    """The README's promise for a failing accuracy gate: `make gate` fails on the naive config (the head's decode in
    INT8) and prints autofix's block, each group it keeps float priced in speed. That block pasted makes `make gate`
    pass: tests/test_tune.py pastes it as `make tune`'s choice (the same `naive_demo`)."""
    project = _copy(naive_demo.checkout, tmp_path / "p")
    failing = _make(project, "gate")
    assert failing.returncode != 0 and failed_in_table(failing.stdout) == {"accuracy_map50_95_drop"}, \
        failing.stdout[-3000:]
    assert "Suggested fix:" in failing.stdout and "ignored_scope:" in failing.stdout
    fixed = _json(project, "metrics/autofix.json")
    assert fixed["needed"] == 1 and fixed["reached"] == 1 and fixed["ops_float_added"] >= 1, fixed
    _assert_priced(project, fixed)
    assert "speed with it back in INT8" in (project / "reports/report.md").read_text()  # the report prices them
