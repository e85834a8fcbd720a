"""benchmark_app on the tiny FP32 and INT8 IRs: parsed report, medians, bad settings."""

from __future__ import annotations

import json

import pytest

from qgate.params import load_params
from stages import benchmark
from tests.conftest import ROOT, assert_fails_cleanly, copy_project, stage


def test_benchmark_metrics(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights, benchmark__repeats=2)
    result = stage("benchmark", project)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((project / "metrics" / "benchmark.json").read_text())
    for key in ("fp32_latency_ms", "int8_latency_ms", "fp32_fps", "int8_fps", "speedup_fps", "speedup_latency",
                "fp32_size_mb", "int8_size_mb", "compression_ratio", "fp32_fps_spread_rel"):
        assert metrics[key] > 0, key
    # the speed-up is the geometric mean of the pairs' ratios, inside its own interval
    ratios = [json.loads((project / "reports" / "benchmark" / f"int8_{i}" / "benchmark_report.json").read_text())
              for i in range(metrics["pairs"])]
    assert metrics["pairs"] >= 2 and len(ratios) == metrics["pairs"]
    assert metrics["speedup_fps_ci_low"] <= metrics["speedup_fps"] <= metrics["speedup_fps_ci_high"]
    assert metrics["ci_level"] == 0.95
    assert metrics["compression_ratio"] > 2  # int8 weights are stored as int8
    assert metrics["fp32_precision"] == "f32"
    assert (project / "reports" / "benchmark" / "int8_1" / "benchmark_report.json").is_file()


def test_nonpositive_seconds_is_a_params_error(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights, benchmark__seconds=0)
    assert_fails_cleanly("benchmark", project, ["'benchmark.seconds' must be > 0"], "metrics/benchmark.json")


def test_unavailable_device(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights, benchmark__device="NOSUCHDEVICE")
    assert_fails_cleanly("benchmark", project, ["benchmark.device 'NOSUCHDEVICE' is not available here; use one "
                                                "of CPU"], "metrics/benchmark.json")


def test_benchmark_app_failure_shows_its_error(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights)
    (project / "models" / "int8" / "model_int8.xml").write_text("<net>broken</net>")
    assert_fails_cleanly("benchmark", project, ["model_int8.xml: benchmark_app failed (exit 1):",
                                                "Unable to read the model"], "metrics/benchmark.json")


@pytest.mark.parametrize("int8_fps, reason", [
    ([130, 131, 129], "holds gates.min_speedup"),  # ~1.3x against a 1.3 limit: the gate cannot tell yet
    ([200, 260, 330], "wider than benchmark.max_spread 0.15"),  # ~2.6x, far from the limit, but one pair far off
    ([250, 252, 249], ""),  # 2.5x, tight: enough
], ids=["limit-inside", "too-wide", "enough"])
def test_more_pairs_while_the_limit_is_inside_or_the_interval_is_wide(int8_fps, reason):
    params = load_params(ROOT / "params.yaml")
    results = {"fp32": [{"fps": 100.0}] * 3, "int8": [{"fps": float(fps)} for fps in int8_fps]}
    found = benchmark._more_pairs_needed(results, params.benchmark, params)
    assert (reason in found) if reason else found == "", found
