"""Gate semantics on the demo's metrics (docs/sample/project): they pass; each gate fails alone; missing, stale or
malformed files fail (never skip); `qgate.judge` writes JUnit, the report and a verdict table."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, SAMPLE_PROJECT

from qgate.params import load_params

# The demo's divergence and sensitivity name the layer to look at, or say no layer is divergent; either way the
# hint says where to look first
_FIRST = (json.loads((SAMPLE_PROJECT / "metrics/sensitivity.json").read_text())["lead_divergent_layer"]
          or json.loads((SAMPLE_PROJECT / "metrics/divergence.json").read_text())["first_divergent_layer"])
IMAGES = json.loads((SAMPLE_PROJECT / "metrics/int8.json").read_text())["images"]  # the demo's val images
WHERE_TO_LOOK = f"divergent layer {_FIRST}" if _FIRST else "no divergent layer (none ends below"
SHIFTS = load_params(SAMPLE_PROJECT / "params.yaml").robustness.shifts
ALL_GATES = [
    "accuracy_map50_95_drop", "accuracy_recall_at_conf_drop", "accuracy_f1_at_conf_drop",
    *(f"accuracy_shift_{name}_map50_95_drop" for name in SHIFTS), "speed_speedup", "drift_detection_error",
    "drift_nan_inf", "drift_layers_below_floor", "structure_op_inventory", "structure_quantized",
    "structure_ignored_scope_float", "provenance_same_model",
]


def run(project: Path, *command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run([sys.executable, "-m", *command], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)


def run_gates(project: Path) -> subprocess.CompletedProcess:
    return run(project, "pytest", str(ROOT / "gates"), "--params", "params.yaml", "-p", "no:cacheprovider", "-v")


def edit_json(project: Path, name: str, **changes) -> None:
    path = project / name
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def edit_params(project: Path, section: str, **changes) -> None:
    path = project / "params.yaml"
    params = yaml.safe_load(path.read_text()) or {}
    params.setdefault(section, {}).update(changes)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def edit_gates(project: Path, **changes) -> None:
    edit_params(project, "gates", **changes)


def failed_gates(result: subprocess.CompletedProcess) -> set[str]:
    return {line.split("[", 1)[1].split("]", 1)[0] for line in result.stdout.splitlines()
            if line.startswith("FAILED") and "[" in line}


def test_the_demo_metrics_pass_every_gate(project):
    result = run_gates(project)
    assert result.returncode == 0, result.stdout
    for gate in ALL_GATES:
        assert f"test_gate[{gate}] PASSED" in result.stdout
    assert "skipped" not in result.stdout.lower()


def _ignored_row_made_int8(project: Path) -> None:
    path = project / "reports/precision_table.csv"
    rows = list(csv.DictReader(path.open()))
    next(row for row in rows if row["why"].startswith("ignored"))["precision"] = "int8"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _weights_changed(project: Path) -> None:
    weights = project / yaml.safe_load((project / "params.yaml").read_text())["model"]["weights"]
    weights.parent.mkdir(parents=True, exist_ok=True)
    weights.write_bytes(b"another model")


def _dropped(project: Path, drop: float = 0.05, low: float = 0.04, high: float = 0.06) -> None:
    """INT8's mAP50-95 `drop` [low, high] below FP32's, every number int8.json derives from it consistent (the judge
    checks that they agree)."""
    fp32 = json.loads((project / "metrics/int8.json").read_text())["baseline_map50_95"]
    edit_json(project, "metrics/int8.json", map50_95_drop=drop, map50_95_drop_ci_low=low, map50_95_drop_ci_high=high,
              map50_95=round(fp32 - drop, 5), map50_95_ci_low=round(fp32 - high, 5),
              map50_95_ci_high=round(fp32 - low, 5), map50_95_drop_rel=round(drop / fp32, 5),
              map50_95_drop_rel_ci_low=round(low / fp32, 5), map50_95_drop_rel_ci_high=round(high / fp32, 5))


def _rate_dropped(project: Path, key: str, drop: float = 0.08, low: float = 0.06, high: float = 0.1,
                  **changes) -> None:
    """INT8's `key` (recall_at_conf, small_map50_95) `drop` [low, high] below FP32's, consistently (the judge
    checks)."""
    fp32 = json.loads((project / "metrics/int8.json").read_text())[f"baseline_{key}"]
    edit_json(project, "metrics/int8.json", **{f"{key}_drop": drop, f"{key}_drop_ci_low": low,
                                               f"{key}_drop_ci_high": high, key: round(fp32 - drop, 5),
                                               f"{key}_ci_low": round(fp32 - high, 5),
                                               f"{key}_ci_high": round(fp32 - low, 5)}, **changes)


def _scores_fell(project: Path) -> None:
    """INT8's recall at the threshold fell because its scores fell: the shift's interval below 0, a threshold that
    restores recall."""
    _rate_dropped(project, "recall_at_conf", score_shift=-0.2, score_shift_ci_low=-0.22, score_shift_ci_high=-0.18,
                  advised_int8_conf=0.125, advised_int8_recall=0.95, advised_int8_precision=0.9)


def _shift_dropped(project: Path, name: str = "bright", drop: float = 0.06, low: float = 0.04,
                   high: float = 0.08) -> None:
    """INT8 `drop` [low, high] below FP32 under shift `name` at its last severity, the shift's worst, consistently."""
    data = json.loads((project / "metrics/robustness.json").read_text())
    severity = data["severities"][-1]
    key, fp32 = f"{name}_{severity}_map50_95", data[f"baseline_{name}_{severity}_map50_95"]
    edit_json(project, "metrics/robustness.json", **{
        f"{key}_drop": drop, f"{key}_drop_ci_low": low, f"{key}_drop_ci_high": high, key: round(fp32 - drop, 5),
        f"{key}_ci_low": round(fp32 - high, 5), f"{key}_ci_high": round(fp32 - low, 5),
        f"{name}_map50_95_drop": drop, f"{name}_map50_95_drop_ci_low": low, f"{name}_map50_95_drop_ci_high": high,
        f"{name}_map50_95_drop_severity": severity})


def _class_dropped(project: Path) -> None:
    """INT8's first class 0.3 below FP32's, as if quantization had lost it."""
    path = project / "metrics/int8_per_class.json"
    classes = json.loads(path.read_text())
    classes[0]["map50_95"] -= 0.3
    path.write_text(json.dumps(classes))


# (gate, how to break it, fragments the failure message must hold: value, limit, what to look at)
BREAKS = [
    ("accuracy_map50_95_drop", _dropped,
     ["= 0.05 [0.04, 0.06] (95%) violates limit <= 0.01", WHERE_TO_LOOK, "reports/bad_cases.csv"]),
    ("accuracy_map50_95_drop_rel", lambda p: (edit_gates(p, max_drop_rel=0.005),
                                              _dropped(p, 0.008, 0.006, 0.0095)),  # within the absolute limit
     ["violates limit <= 0.005", f"Look at: {WHERE_TO_LOOK}"]),
    ("accuracy_int8_map50_95_floor", lambda p: edit_gates(p, min_int8_score=0.99),
     ["violates limit >= 0.99", "the FP32 model is already below the floor"]),
    ("accuracy_per_class_drop", lambda p: (edit_gates(p, max_class_drop=0.1), _class_dropped(p)),
     ["violates limit <= 0.1", "class 'ellipse'"]),
    ("accuracy_shift_bright_map50_95_drop", _shift_dropped,
     ["= 0.06 [0.04, 0.08] (95%) violates limit <= 0.02", "on clean images the drop is", "reports/robustness.csv",
      "Ranges calibrated on clean images can clip what bright makes of them"]),
    ("accuracy_recall_at_conf_drop", _scores_fell,
     ["= 0.08 [0.06, 0.1] (95%) violates limit <= 0.03", "at 0.25", "INT8's scores moved (median score shift",
      "Paste this under `deploy:`"]),
    ("accuracy_f1_at_conf_drop", lambda p: _rate_dropped(p, "f1_at_conf", score_shift=0.0, score_shift_ci_low=-0.01,
                                                        score_shift_ci_high=0.01),  # scores did not move
     ["= 0.08 [0.06, 0.1] (95%) violates limit <= 0.03", WHERE_TO_LOOK, "reports/bad_cases.csv"]),
    ("accuracy_small_map50_95_drop", lambda p: (edit_gates(p, max_small_map50_95_drop=0.05),  # the demo has none
                                                edit_json(p, "metrics/int8.json", small_objects=12,
                                                          baseline_small_map50_95=0.5),
                                                _rate_dropped(p, "small_map50_95")),
     ["= 0.08 [0.06, 0.1] (95%) violates limit <= 0.05", "small objects"]),
    ("speed_int8_latency", lambda p: edit_gates(p, max_latency_ms=0.5),
     ["int8_latency_ms =", "violates limit <= 0.5", "benchmark.hint"]),
    ("speed_speedup", lambda p: edit_json(p, "metrics/benchmark.json", speedup_fps=1.01, speedup_fps_ci_low=0.98,
                                          speedup_fps_ci_high=1.04),
     ["speedup_fps = 1.01 [0.98, 1.04] (95%) violates limit >= 1.3", "FPS", "benchmark.max_seconds",
      "benchmark pairs on ", "resolve the speed-up to about 0.030x", "another CPU gives another ratio"]),
    ("drift_detection_error", lambda p: edit_json(p, "metrics/divergence.json", detection_error=0.31),
     ["detection_error = 0.31 violates limit <= 0.1", "over the ", "detections FP32 or INT8 makes",
      "reports/sensitivity.csv"]),
    ("drift_nan_inf", lambda p: edit_json(p, "metrics/divergence.json", nan_inf_layers=3),
     ["nan_inf_layers = 3 violates limit <= 0", "nan_inf > 0"]),
    ("drift_layers_below_floor", lambda p: edit_json(p, "metrics/divergence.json", layers_below_sqnr_floor=200,
                                                     layers_below_sqnr_floor_frac=0.81),
     ["= 0.81 violates limit <= 0.65", "200 of ", WHERE_TO_LOOK]),
    ("structure_op_inventory",
     lambda p: edit_json(p, "metrics/int8_record.json", fp32_ops_missing=["/model.9/m/MaxPool"]),
     ["= 1 violates limit <= 0", "/model.9/m/MaxPool"]),
    ("structure_quantized", lambda p: edit_json(p, "metrics/quantize.json", quantizer_count=0),
     ["quantizer_count = 0 violates limit >= 1", "quantize.ignored_scope"]),
    ("structure_ignored_scope_float", _ignored_row_made_int8, ["= 1 violates limit <= 0", "int8 anyway: /model.22"]),
    ("provenance_same_model", _weights_changed, ["changed since metrics/export_record.json was written: every stage "
                                                 "from export on measured another model", "`dvc repro`"]),
]


@pytest.mark.parametrize("gate, breaks, fragments", [pytest.param(*b, id=b[0]) for b in BREAKS])
def test_each_gate_fails_alone_with_value_limit_and_hint(project, gate, breaks, fragments):
    breaks(project)
    result = run_gates(project)
    assert result.returncode == 1, result.stdout
    assert failed_gates(result) == {gate}, result.stdout
    message = next(line for line in result.stdout.splitlines() if line.startswith(f"{gate}:"))
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize("share, estimator, advised", [(0.76, "default", True), (0.3, "default", False),
                                                      (0.76, "minmax", False)])
def test_a_failed_accuracy_gate_advises_a_wider_range_only_where_clipping_dominates(project, share, estimator,
                                                                                   advised):
    """sensitivity.json's clip_error_share: 0.76 on the pose demo minmax fixed, about 0.3 on the demo, 0.09 on the
    COCO reference's naive config (a decode problem); no advice to set what is already set."""
    _dropped(project)
    edit_json(project, "metrics/sensitivity.json", clip_error_share=share)
    edit_params(project, "quantize", range_estimator=estimator)
    result = run_gates(project)
    assert failed_gates(result) == {"accuracy_map50_95_drop"}, result.stdout
    message = next(line for line in result.stdout.splitlines() if line.startswith("accuracy_map50_95_drop:"))
    assert ("try `range_estimator: minmax` under `quantize:`" in message) == advised, message
    assert ("Clipping is 76% of the quantization error" in message) == advised, message


def test_missing_benchmark_fails_speed_gates_instead_of_skipping(project):
    edit_gates(project, max_latency_ms=100.0)
    (project / "metrics/benchmark.json").unlink()
    result = run_gates(project)
    assert result.returncode == 1
    assert failed_gates(result) == {"speed_int8_latency", "speed_speedup", "provenance_same_model"}
    assert "metrics/benchmark.json is missing; run `dvc repro benchmark`" in result.stdout
    assert "skipped" not in result.stdout.lower()


@pytest.mark.parametrize("name, changes, gate", [
    ("metrics/benchmark.json", {"model_sha256": "0" * 64}, "speed_speedup"),
    ("metrics/divergence.json", {"int8_ir_bin_sha256": "1" * 64}, "drift_detection_error"),
], ids=["other_fp32_model", "other_int8_ir"])
def test_stale_metrics_fail_and_name_the_stage(project, name, changes, gate):
    edit_json(project, name, **changes)
    result = run_gates(project)
    assert result.returncode == 1
    assert gate in failed_gates(result) and "provenance_same_model" in failed_gates(result)
    stage = Path(name).stem
    assert f"{name} is stale" in result.stdout and f"re-run `dvc repro {stage}`" in result.stdout


def _shifted_baseline(project: Path) -> None:
    """metrics/baseline.json says FP32 scored 0.02 more than int8.json quotes it."""
    baseline = json.loads((project / "metrics/baseline.json").read_text())
    edit_json(project, "metrics/baseline.json", map50_95=round(baseline["map50_95"] + 0.02, 5))


def _int8_map_off_its_drop(project: Path) -> None:
    """INT8's mAP moved to its interval's top (still inside it): the drop beside it no longer follows."""
    int8 = json.loads((project / "metrics/int8.json").read_text())
    edit_json(project, "metrics/int8.json", map50_95=int8["map50_95_ci_high"])


def _other_ir_in_place(project: Path, name: str) -> None:
    """Weights of another model where the IR the metrics measured should be (the FP32 IR copied over the INT8)."""
    weights = project / name
    weights.parent.mkdir(parents=True, exist_ok=True)
    weights.write_bytes(b"another IR's weights")


def _recorded_param_changed(project: Path) -> None:
    """dvc.lock beside the metrics, recording the params each stage ran with; then quantize's changed."""
    (project / "dvc.lock").write_text((ROOT / "dvc.lock").read_text())
    edit_params(project, "quantize", subset_size=48)


# (what is wrong, a gate that reads the file, what the failure names, the stage to re-run)
INCONSISTENT = [
    ("drop_outside_its_own_interval", lambda p: edit_json(p, "metrics/int8.json", map50_95_drop=0.05),
     "accuracy_map50_95_drop", "'map50_95_drop' 0.05 lies outside its own interval", "int8_eval"),
    ("int8_map_not_fp32_minus_drop", _int8_map_off_its_drop, "accuracy_map50_95_drop",
     "is not FP32", "int8_eval"),
    ("fp32_quoted_differently", _shifted_baseline, "accuracy_map50_95_drop",
     "'baseline_map50_95'", "int8_eval"),
    ("int8_ir_swapped", lambda p: _other_ir_in_place(p, "models/int8/model_int8.bin"), "structure_quantized",
     "models/int8/model_int8.bin is not the model it measured", "quantize"),
    ("fp32_ir_swapped", lambda p: _other_ir_in_place(p, "models/export/model_fp32.bin"), "provenance_same_model",
     "models/export/model_fp32.bin is not the model it measured", "export"),
    ("imgsz_changed_without_a_rerun", lambda p: edit_params(p, "model", imgsz=320), "accuracy_map50_95_drop",
     "it was measured with model.imgsz 192, and model.imgsz is now 320", "export"),
    ("a_param_dvc_recorded_changed", _recorded_param_changed, "structure_quantized",
     "it was measured with quantize.subset_size 300, and quantize.subset_size is now 48", "quantize"),
]


@pytest.mark.parametrize("breaks, gate, fragment, stage", [pytest.param(*case[1:], id=case[0])
                                                           for case in INCONSISTENT])
def test_the_judge_refuses_metrics_that_disagree_with_themselves_the_models_or_the_params(project, breaks, gate,
                                                                                       fragment, stage):
    """What `make gate` would re-run, judged alone (`make report`, `make promote`, `python -m qgate.judge`): files
    edited by hand, IRs swapped, params changed since the stage ran; each fails the gates that read the file."""
    breaks(project)
    result = run_gates(project)
    assert result.returncode == 1, result.stdout
    assert gate in failed_gates(result), result.stdout
    message = next(line for line in result.stdout.splitlines() if line.startswith(f"{gate}:"))
    assert "cannot be trusted" in message and fragment in message, message
    assert f"re-run `dvc repro {stage}`" in message, message


@pytest.mark.parametrize("corrupt, fragment", [
    (lambda p: (p / "metrics/int8.json").write_text("{not json"), "metrics/int8.json is unreadable"),
    (lambda p: edit_json(p, "metrics/int8.json", map50_95_drop=None), "'map50_95_drop' is None, not a number"),
    (lambda p: edit_json(p, "metrics/int8.json", map50_95_drop="0.001"), "is '0.001', not a number"),
], ids=["not_json", "null_value", "string_value"])
def test_malformed_metrics_fail(project, corrupt, fragment):
    corrupt(project)
    result = run_gates(project)
    assert result.returncode == 1
    assert "accuracy_map50_95_drop" in failed_gates(result)
    assert fragment in result.stdout and "re-run `dvc repro int8_eval`" in result.stdout


def test_a_missing_key_names_the_key(project):
    data = json.loads((project / "metrics/int8.json").read_text())
    del data["map50_95_drop"]
    (project / "metrics/int8.json").write_text(json.dumps(data))
    result = run_gates(project)
    assert result.returncode == 1
    assert "metrics/int8.json has no 'map50_95_drop'" in result.stdout


def test_a_bad_threshold_is_a_usage_error(project):
    edit_gates(project, min_speedup="fast")
    result = run_gates(project)
    assert result.returncode not in (0, 1)
    assert "'gates.min_speedup' must be of type float, got 'fast'" in result.stderr + result.stdout


def test_judge_writes_junit_report_and_table_and_fails_on_a_failed_gate(project):
    _dropped(project)
    result = run(project, "qgate.judge")
    assert result.returncode == 1, result.stdout + result.stderr
    table_row = next(line for line in result.stdout.splitlines() if line.startswith("accuracy_map50_95_drop "))
    assert table_row.split()[-1] == "FAIL" and "<= 0.01" in table_row and "[0.04, 0.06] (95%)" in table_row
    junit = (project / "reports/gates.xml").read_text()
    assert 'name="test_gate[accuracy_map50_95_drop]"' in junit and "<failure" in junit
    report = (project / "reports/report.md").read_text()
    assert report.startswith(f"# qgate report: FAIL: 1 of {len(ALL_GATES)} gates failed (accuracy_map50_95_drop)")
    assert ("| accuracy_map50_95_drop | mAP50-95 drop, FP32 - INT8 | 0.05 | [0.04, 0.06] (95%) | <= 0.01 | **FAIL** |"
            in report)
    assert "> **FAIL**: accuracy_map50_95_drop: map50_95_drop = 0.05 [0.04, 0.06] (95%) violates" in report
    html = (project / "reports/report.html").read_text()
    assert "<h1 class='fail'>" in html and "<svg" in html and "data:image/jpeg;base64," not in html  # no dataset here
    assert not re.search(r"""(src|href)=["']https?:|<script|<link""", html)  # self-contained: nothing fetched


HEAVY = ("openvino", "cv2", "ray", "torch", "nncf", "ultralytics", "pycocotools", "scipy", "dvc")


def test_the_gates_judge_committed_metrics_with_openvino_cv2_and_ray_unimportable(project):
    blocker = project / "blocked" / "sitecustomize.py"
    blocker.parent.mkdir()
    blocker.write_text(f"import sys\nfor name in {HEAVY!r}:\n    sys.modules[name] = None  # importing it raises\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker.parent), str(ROOT)])}
    env.pop("GITHUB_STEP_SUMMARY", None)
    light = subprocess.run([sys.executable, "-m", "qgate.judge"], cwd=project, env=env, capture_output=True,
                           text=True, timeout=300)
    assert light.returncode == 0, light.stdout + light.stderr
    assert "Traceback" not in light.stderr
    assert "(Images not drawn: cv2 is not installed here.)" in (project / "reports/report.md").read_text()
    full = run(project, "qgate.judge")  # the same verdicts with the whole stack importable
    table = [line for line in light.stdout.splitlines() if line.split(" ")[0] in ALL_GATES]
    assert len(table) == len(ALL_GATES)
    assert table == [line for line in full.stdout.splitlines() if line.split(" ")[0] in ALL_GATES]


def test_report_is_written_when_metrics_are_missing(project):
    (project / "metrics/benchmark.json").unlink()
    result = run(project, "qgate.report")
    assert result.returncode == 1
    report = (project / "reports/report.md").read_text()
    assert "| INT8 |" in report and "missing" in report


def _add_absent_class(project: Path) -> None:
    """A class named by the dataset with no instance in the split: pycocotools gives it no AP (None)."""
    for name in ("metrics/baseline_per_class.json", "metrics/int8_per_class.json"):
        rows = json.loads((project / name).read_text())
        rows.append({"class_id": len(rows), "class_name": "toaster", "map50_95": None, "map50": None})
        (project / name).write_text(json.dumps(rows))


def test_a_class_without_instances_is_na_in_the_report_and_ignored_by_the_class_gate(project):
    _add_absent_class(project)
    edit_gates(project, max_class_drop=0.5)
    result = run(project, "qgate.judge")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    report = (project / "reports/report.md").read_text()
    assert "| toaster | n/a, no instances | n/a, no instances | n/a, no instances |" in report
    section = report.split("## Accuracy per class")[1].split("\n## ")[0]
    table = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert table[-1].startswith("| toaster |")  # absent classes last, after the measured ones sorted by drop
    drops = [float(line.split("|")[4]) for line in table[:-1]]
    assert drops == sorted(drops, reverse=True)


def test_a_report_that_cannot_be_written_does_not_hide_the_verdict(project):
    (project / "reports").mkdir(exist_ok=True)
    (project / "reports/report_files").write_text("a file where the report's images folder should be")
    result = run(project, "qgate.judge")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert next(line for line in result.stdout.splitlines() if line.startswith("accuracy_map50_95_drop "))
    assert (project / "reports/gates.xml").is_file()
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "report not written" in errors[0] and "gate verdict above" in errors[0]


def test_report_files_follow_the_umask(project):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    done = subprocess.run(["bash", "-c", f"umask 022 && {sys.executable} -m qgate.report"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("reports/report.md", "reports/report.html"):
        assert (project / name).stat().st_mode & 0o777 == 0o644, name
    pictures = project / "reports/report_files"
    assert pictures.stat().st_mode & 0o777 == 0o755
    assert {p.stat().st_mode & 0o777 for p in pictures.iterdir()} == {0o644}


# (interval of the drop, gates.confidence, gates.inconclusive, exit status, the result column, message fragments)
THREE_VALUED = [
    ((0.002, -0.003, 0.007), 0.95, "fail", 0, "pass", ["within limit <= 0.01"]),
    ((0.02, 0.012, 0.028), 0.95, "pass", 1, "FAIL", ["violates limit <= 0.01"]),
    ((0.008, 0.002, 0.014), 0.95, "pass", 0, "inconclusive (pass)",
     ["is inconclusive against limit <= 0.01", "counted as passed by gates.inconclusive: pass"]),
    ((0.008, 0.002, 0.014), 0.95, "fail", 1, "inconclusive (FAIL)",
     ["is inconclusive against limit <= 0.01", "counted as failed by gates.inconclusive: fail"]),
    ((0.008, 0.002, 0.014), 0.95, "point", 0, "inconclusive (pass)",
     ["is inconclusive against limit <= 0.01", "decided by its point estimate: passed (gates.inconclusive: point)",
      f"about {9 * IMAGES} images (not {IMAGES}) would resolve it"]),  # the side facing the limit is 3x the gap
    ((0.012, 0.006, 0.018), 0.95, "point", 1, "inconclusive (FAIL)",
     ["decided by its point estimate: failed (gates.inconclusive: point)", f"about {9 * IMAGES} images (not"]),
    ((0.008, 0.002, 0.014), None, "fail", 0, "pass", ["within limit <= 0.01"]),  # point estimate decides
    ((0.012, 0.002, 0.018), None, "pass", 1, "FAIL", ["violates limit <= 0.01"]),
]


@pytest.mark.parametrize("drop, confidence, inconclusive, status, result_column, fragments", [
    pytest.param(*case, id=f"{case[1]}-{case[2]}-{case[4]}") for case in THREE_VALUED])
def test_three_valued_accuracy_verdicts_under_each_policy(project, drop, confidence, inconclusive, status,
                                                          result_column, fragments):
    _dropped(project, *drop)
    edit_gates(project, confidence=confidence, inconclusive=inconclusive)
    assert load_params(project / "params.yaml").int8_eval.ci_level == 0.95  # intervals stay at the stage's level
    result = run(project, "qgate.judge")
    assert result.returncode == status, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("accuracy_map50_95_drop "))
    assert row.endswith(result_column) and f"[{drop[1]:.4g}, {drop[2]:.4g}] (95%)" in row, row
    junit = (project / "reports/gates.xml").read_text()
    report = (project / "reports/report.md").read_text()
    message = next(line for line in report.splitlines() if "accuracy_map50_95_drop: map50_95_drop =" in line)
    for fragment in fragments + ["images resolve mAP50-95 drops of about"]:
        assert fragment in message, message
    assert ("<failure" in junit) == (status == 1)
    if result_column == "inconclusive (pass)":  # a passed gate's verdict is in the JUnit XML too
        assert f"inconclusive: accuracy_map50_95_drop: map50_95_drop = {drop[0]} [{drop[1]}, {drop[2]}] (95%)" in junit


def test_the_terminal_shows_the_table_then_what_to_do_then_the_headline(project):
    _dropped(project)
    edit_json(project, "metrics/benchmark.json", speedup_fps=1.35, speedup_fps_ci_low=1.25, speedup_fps_ci_high=1.45)
    result = run(project, "qgate.judge")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["gate", "measures", "value", "interval", "limit", "result"]  # pytest says nothing
    todo = lines.index("What to do:")
    assert all(not line.startswith(("FAIL ", "inconclusive")) for line in lines[:todo])
    blocks = "\n".join(lines[todo + 1:]).strip().split("\n\n")
    assert blocks[0].startswith("FAIL  accuracy_map50_95_drop: mAP50-95 drop, FP32 - INT8 0.05 [0.04, 0.06] (95%), "
                                "limit <= 0.01\n"), blocks[0]
    assert f"look at: {WHERE_TO_LOOK}" in blocks[0]
    assert blocks[1].startswith("inconclusive (pass)  speed_speedup: INT8 / FP32 throughput, x 1.35 [1.25, 1.45]")
    assert "decided by its point estimate: passed" in blocks[1] and "benchmark pairs (not " in blocks[1]
    assert blocks[2].splitlines() == [f"FAIL: 1 of {len(ALL_GATES)} gates failed (accuracy_map50_95_drop); 1 inconclusive: "
                                      "speed_speedup", "report: reports/report.md, reports/report.html"]


def test_the_report_boxes_gates_by_verdict_and_folds_diagnostics_only_when_all_passed(project):
    assert run(project, "qgate.judge").returncode == 0
    passing = (project / "reports/report.html").read_text()
    assert "<h1 class='pass'>" in passing and "<p class='fail'>" not in passing and "<p class='warn'>" not in passing
    assert passing.count("<details><summary>Every gate passed") == 3  # sensitivity, divergence, bad cases
    assert (project / "reports/report.md").read_text().count("<summary>Every gate passed") == 3
    _dropped(project)
    edit_json(project, "metrics/benchmark.json", speedup_fps=1.35, speedup_fps_ci_low=1.25, speedup_fps_ci_high=1.45)
    assert run(project, "qgate.judge").returncode == 1
    failing = (project / "reports/report.html").read_text()
    assert "<h1 class='fail'>" in failing and "Every gate passed" not in failing
    boxes = re.findall(r"<p class='(fail|warn)'>(\w+):", failing)
    assert boxes == [("fail", "accuracy_map50_95_drop"), ("warn", "speed_speedup")]
    assert "<td class='fail'>FAIL</td>" in failing and "<td class='warn'>inconclusive (pass)</td>" in failing
    # layer pictures: the passing report draws its first layer's histogram only, the failing one each it names
    histograms = [page.count("<figure id='fig-inputs-of-") for page in (passing, failing)]
    assert histograms[0] == 1 and histograms[1] > 1, histograms
    for page in (passing, failing):
        assert set(re.findall(r"href='#([^']+)'", page)) <= set(re.findall(r"<figure id='([^']+)'", page))


def test_judge_computes_each_verdict_once_for_junit_table_and_report(project):
    """`qgate.judge` hands its verdicts to the gate tests: each gate's reader runs once in the whole run."""
    counting = ("import sys, qgate.gates as g, qgate.judge as j\n"
                "calls = []\n"
                "original = g.judge\n"
                "g.judge = lambda gate, m: calls.append(gate.name) or original(gate, m)\n"
                "status = j.main('params.yaml')\n"
                "print('calls', len(calls), len(set(calls)))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    result = subprocess.run([sys.executable, "-c", counting], cwd=project, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"calls {len(ALL_GATES)} {len(ALL_GATES)}"
    assert (project / "reports/gates.xml").read_text().count("<testcase") == len(ALL_GATES)


def test_a_limit_finer_than_the_val_set_resolves_says_so(project):
    edit_json(project, "metrics/int8.json", map50_95_drop_resolution=0.008)
    edit_gates(project, max_map50_95_drop=0.01)
    result = run(project, "qgate.judge")
    assert result.returncode == 0, result.stdout + result.stderr  # a warning, not a verdict
    caveat = (f"{IMAGES} images resolve mAP50-95 drops of about 0.0080; the limit 0.01 is less than twice that: add "
              "images or raise the limit")
    assert caveat in (project / "reports/report.md").read_text()
    assert caveat in (project / "reports/gates.xml").read_text()


def test_a_resample_that_never_moves_the_drop_claims_no_resolution(project):
    edit_json(project, "metrics/int8.json", map50_95_drop_resolution=0.0)
    result = run(project, "qgate.judge")
    assert result.returncode == 0, result.stdout + result.stderr
    report = (project / "reports/report.md").read_text()
    assert f"{IMAGES} images: every resample gives the same drop" in report
    assert "drops of about 0.0000" not in report


def test_intervals_at_another_level_than_the_gates_are_stale(project):
    edit_json(project, "metrics/int8.json", ci_level=0.9)
    result = run_gates(project)
    assert "accuracy_map50_95_drop" in failed_gates(result)
    assert "metrics/int8.json has its intervals at 0.9, gates.confidence is 0.95; re-run `dvc repro int8_eval`" in (
        result.stdout)
