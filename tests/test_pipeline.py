"""The real DVC pipeline on the embedded demo: `dvc repro` succeeds, meets the bar, and is cached."""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import contextmanager

import pytest

from qgate.params import load_params
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _dvc(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["dvc", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def repro():
    result = _dvc("repro")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_demo_baseline_reaches_the_bar(repro):
    params = load_params(ROOT / "params.yaml")
    metrics = json.loads((ROOT / params.baseline.metrics).read_text())
    assert metrics["map50_95"] >= 0.5, metrics
    assert metrics["inference_precision"] == "f32"
    assert metrics["images"] == params.demo.val_images
    record = json.loads((ROOT / params.export.record).read_text())
    assert metrics["model_sha256"] == record["model_sha256"]


def test_int8_and_benchmark_metrics(repro):
    params = load_params(ROOT / "params.yaml")
    int8 = json.loads((ROOT / params.int8_eval.metrics).read_text())
    for key in ("map50_95", "map50", "map50_95_drop", "map50_95_drop_rel", "inference_precision"):
        assert key in int8, key
    bench = json.loads((ROOT / params.benchmark.metrics).read_text())
    for key in ("fp32_latency_ms", "int8_latency_ms", "fp32_fps", "int8_fps", "speedup_fps", "speedup_latency",
                "fp32_size_mb", "int8_size_mb", "compression_ratio", "fp32_precision", "int8_precision",
                "fp32_fps_spread_rel", "int8_fps_spread_rel"):
        assert key in bench, key
    quantize = json.loads((ROOT / params.quantize.metrics).read_text())
    assert quantize["fake_quantize_count"] > 0 and quantize["calibration_overlaps_val"] == 0
    record = json.loads((ROOT / params.export.record).read_text())
    assert {int8["model_sha256"], bench["model_sha256"], quantize["model_sha256"]} == {record["model_sha256"]}


def test_second_repro_runs_nothing(repro):
    again = _dvc("repro")
    assert again.returncode == 0, again.stderr
    assert "Running stage" not in again.stdout, again.stdout


@contextmanager
def _edited_params(old: str, new: str):
    """params.yaml with its first `old` replaced by `new` inside the block, restored after it."""
    params_file = ROOT / "params.yaml"
    original = params_file.read_text()
    assert old in original, f"{old!r} not found in params.yaml"
    try:
        params_file.write_text(original.replace(old, new, 1))
        yield
    finally:
        params_file.write_text(original)


def test_changing_a_benchmark_param_stales_only_benchmark(repro):
    with _edited_params("  seconds: 10\n", "  seconds: 11\n"):
        status = _dvc("status", "--json")
    assert status.returncode == 0, status.stderr
    assert list(json.loads(status.stdout)) == ["benchmark"], status.stdout


def test_a_tightened_gate_fails_make_gate_and_reruns_no_stage(repro):
    """The issue's acceptance: `gates.max_map50_95_drop: 0.0` fails, restoring passes, no stage is stale."""
    with _edited_params("  max_map50_95_drop: 0.01 ", "  max_map50_95_drop: 0.0 "):
        status = _dvc("status", "--json")
        tightened = _make("gate")
    assert json.loads(status.stdout or "{}") == {}, status.stdout
    assert tightened.returncode != 0
    assert "FAILED gates/test_gates.py::test_gate[accuracy_map50_95_drop]" in tightened.stdout
    assert "Running stage" not in tightened.stdout
    restored = _make("gate")
    assert restored.returncode == 0, restored.stdout[-3000:]
    assert "PASS: all" in restored.stdout and "Running stage" not in restored.stdout


def _make(target: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", target], cwd=ROOT, capture_output=True, text=True, timeout=1800)
