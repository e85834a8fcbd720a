"""The PR summary's caveats: the base branch judged another model, or measured speed on another CPU; and the
CPU every speed is recorded with."""

from __future__ import annotations

import json
import subprocess
import sys

from qgate.base_diff import notes
from qgate.cpu import cpu_info
from tests.conftest import ROOT, git

EPYC = {"cpu_model": "AMD EPYC", "cpu_isa": "avx2+avx512f+avx512_vnni+avx512_bf16"}
AVX2 = {"cpu_model": "AMD EPYC", "cpu_isa": "avx2"}


def test_same_model_and_cpu_need_no_note():
    side = {"export": {"model_sha256": "a" * 64}, "benchmark": dict(EPYC)}
    assert notes("origin/main", side, side) == []


def test_another_model_and_another_cpu_are_said_first():
    base = {"export": {"model_sha256": "a" * 64, "weights": "models/demo/yolov8n_demo.pt"}, "benchmark": EPYC}
    head = {"export": {"model_sha256": "b" * 64, "weights": "models/own/detector.pt"}, "benchmark": AVX2}
    model, cpu = notes("origin/main", base, head)
    assert "origin/main judged another model" in model and "models/own/detector.pt" in model
    assert "another CPU" in cpu and "avx512_vnni" in cpu and "(avx2)" in cpu and "not a regression" in cpu


def test_a_base_without_a_recorded_cpu_is_named_so():
    (cpu,) = notes("origin/main", {"export": None, "benchmark": {"speedup_fps": 2.0}}, {"export": None,
                                                                                        "benchmark": EPYC})
    assert "origin/main on an unrecorded CPU" in cpu


def test_cpu_info_names_the_model_and_the_isa_that_matters(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                       "flags\t\t: fpu sse avx2 avx512f avx512_vnni avx512_bf16 amx_int8 amx_bf16\n")
    assert cpu_info(cpuinfo) == {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
                                 "cpu_isa": "avx2+avx512f+avx512_vnni+avx512_bf16+amx_int8+amx_bf16"}
    assert cpu_info(tmp_path / "missing") == {"cpu_model": "unknown", "cpu_isa": "unknown"}


def test_the_command_reads_the_base_from_git(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/benchmark.json").write_text(json.dumps(AVX2))
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "base")
    (tmp_path / "metrics/benchmark.json").write_text(json.dumps(EPYC))
    done = subprocess.run([sys.executable, "-m", "qgate.base_diff", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("> **Speed was measured on another CPU**: HEAD on AMD EPYC (avx2)")
