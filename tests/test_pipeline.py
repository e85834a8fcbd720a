"""The real DVC pipeline on the embedded demo, in a copy of the checkout: `dvc repro` succeeds, meets the bar, is
cached; `make gate` judges without re-running; a user's own model never runs the demo's stages."""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from qgate.params import load_params
from tests.conftest import venv_env

pytestmark = pytest.mark.slow


def _dvc(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["dvc", *args], cwd=checkout, env=venv_env(), capture_output=True, text=True, timeout=1800)


def test_demo_baseline_reaches_the_bar(demo_checkout):
    params = load_params(demo_checkout / "params.yaml")
    metrics = json.loads((demo_checkout / params.baseline.metrics).read_text())
    assert metrics["map50_95"] >= 0.5, metrics
    assert metrics["inference_precision"] == "f32"
    assert metrics["images"] == params.demo.val_images
    record = json.loads((demo_checkout / params.export.record).read_text())
    assert metrics["model_sha256"] == record["model_sha256"]
    assert record["head_layout"] == "raw"


def test_int8_and_benchmark_metrics(demo_checkout):
    params = load_params(demo_checkout / "params.yaml")
    int8 = json.loads((demo_checkout / params.int8_eval.metrics).read_text())
    for key in ("map50_95", "map50", "map50_95_drop", "map50_95_drop_rel", "inference_precision"):
        assert key in int8, key
    bench = json.loads((demo_checkout / params.benchmark.metrics).read_text())
    for key in ("fp32_latency_ms", "int8_latency_ms", "fp32_fps", "int8_fps", "speedup_fps", "speedup_latency",
                "fp32_size_mb", "int8_size_mb", "compression_ratio", "fp32_precision", "int8_precision",
                "fp32_fps_spread_rel", "int8_fps_spread_rel"):
        assert key in bench, key
    quantize = json.loads((demo_checkout / params.quantize.metrics).read_text())
    assert quantize["fake_quantize_count"] > 0 and quantize["calibration_overlaps_val"] == 0
    record = json.loads((demo_checkout / params.export.record).read_text())
    assert {int8["model_sha256"], bench["model_sha256"], quantize["model_sha256"]} == {record["model_sha256"]}


def test_second_repro_runs_nothing(demo_checkout):
    again = _dvc(demo_checkout, "repro")
    assert again.returncode == 0, again.stderr
    assert "Running stage" not in again.stdout, again.stdout


@contextmanager
def _edited_params(checkout: Path, old: str, new: str):
    """params.yaml with its first `old` replaced by `new` inside the block, restored after it."""
    params_file = checkout / "params.yaml"
    original = params_file.read_text()
    assert old in original, f"{old!r} not found in params.yaml"
    try:
        params_file.write_text(original.replace(old, new, 1))
        yield
    finally:
        params_file.write_text(original)


def test_changing_a_benchmark_param_stales_only_benchmark(demo_checkout):
    with _edited_params(demo_checkout, "  seconds: 10\n", "  seconds: 11\n"):
        status = _dvc(demo_checkout, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert list(json.loads(status.stdout)) == ["benchmark"], status.stdout


def test_a_tightened_gate_fails_make_gate_and_reruns_no_stage(demo_checkout):
    """`gates.max_map50_95_drop: -0.05` fails (the whole interval is above it), restoring passes, no stage is stale."""
    with _edited_params(demo_checkout, "  max_map50_95_drop: 0.01 ", "  max_map50_95_drop: -0.05 "):
        status = _dvc(demo_checkout, "status", "--json")
        tightened = _make(demo_checkout, "gate")
    assert json.loads(status.stdout or "{}") == {}, status.stdout
    assert tightened.returncode != 0
    assert "FAILED gates/test_gates.py::test_gate[accuracy_map50_95_drop]" in tightened.stdout
    assert "Running stage" not in tightened.stdout
    restored = _make(demo_checkout, "gate")
    assert restored.returncode == 0, restored.stdout[-3000:]
    assert "PASS: all" in restored.stdout and "Running stage" not in restored.stdout


def test_your_own_model_runs_no_demo_stage(demo_checkout, tmp_path):
    """`make gate`'s stages with model.* pointing elsewhere: neither demo_data nor demo_train would run."""
    theirs = tmp_path / "theirs"
    (theirs / "weights").mkdir(parents=True)
    params = yaml.safe_load((demo_checkout / "params.yaml").read_text())
    (theirs / "weights" / "best.pt").write_bytes((demo_checkout / params["demo"]["weights"]).read_bytes())
    data = theirs / "data"
    subprocess.run(["cp", "-r", str(demo_checkout / params["model"]["data_dir"]), str(data)], check=True)
    spec = yaml.safe_load((data / "demo.yaml").read_text())
    (data / "demo.yaml").write_text(yaml.safe_dump({**spec, "path": str(data)}))
    with _edited_params(demo_checkout, "model:\n  weights: models/demo/yolov8n_demo.pt\n  dataset: data/demo/demo.yaml"
                        "\n  data_dir: data/demo\n", f"model:\n  weights: {theirs / 'weights' / 'best.pt'}\n  "
                        f"dataset: {data / 'demo.yaml'}\n  data_dir: {data}\n"):
        dry = _make(demo_checkout, "repro", "DVC_REPRO_FLAGS=--dry")
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert "Running stage 'export'" in dry.stdout  # the model changed: its stages would run ...
    assert "demo_data" not in dry.stdout and "demo_train" not in dry.stdout  # ... the demo's would not


def _make(checkout: Path, target: str, *variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", target, *variables], cwd=checkout, capture_output=True, text=True, timeout=1800)
