"""The real DVC pipeline on the embedded demo: `dvc repro baseline` succeeds, meets the bar, and is cached."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from qgate.params import load_params
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _dvc(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["dvc", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def repro():
    result = _dvc("repro", "baseline")
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


def test_second_repro_runs_nothing(repro):
    again = _dvc("repro", "baseline")
    assert again.returncode == 0, again.stderr
    assert "Running stage" not in again.stdout, again.stdout
