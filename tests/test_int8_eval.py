"""INT8 evaluation on the tiny project: same evaluator as the baseline, drop, bad cases, bad input."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from tests.conftest import assert_fails_cleanly, copy_project, stage


@pytest.fixture(scope="module")
def evaluated(quantized_project):
    result = stage("int8_eval", quantized_project)
    assert result.returncode == 0, result.stderr
    return quantized_project


def test_int8_metrics_are_relative_to_the_baseline(evaluated):
    int8 = json.loads((evaluated / "metrics" / "int8.json").read_text())
    baseline = json.loads((evaluated / "metrics" / "baseline.json").read_text())
    assert int8["baseline_map50_95"] == baseline["map50_95"]
    assert int8["map50_95_drop"] == pytest.approx(baseline["map50_95"] - int8["map50_95"], abs=1e-5)
    assert int8["images"] == baseline["images"] and int8["instances"] == baseline["instances"]
    assert int8["inference_precision"] == baseline["inference_precision"]
    assert int8["model_sha256"] == baseline["model_sha256"]
    with open(evaluated / "reports" / "bad_cases.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == int8["images"]
    scores = [float(r["disagreement"]) for r in rows]
    assert scores == sorted(scores, reverse=True)


def _fails(project, *fragments):
    assert_fails_cleanly("int8_eval", project, list(fragments), "metrics/int8.json")


def test_missing_int8_ir(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights)
    shutil.rmtree(project / "models" / "int8")
    _fails(project, "model_int8.xml", "run `dvc repro quantize`")


def test_baseline_of_another_model(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights)
    baseline = json.loads((project / "metrics" / "baseline.json").read_text())
    (project / "metrics" / "baseline.json").write_text(json.dumps({**baseline, "model_sha256": "0" * 64}))
    _fails(project, "baseline.json: measured another model", "run `dvc repro baseline`")
