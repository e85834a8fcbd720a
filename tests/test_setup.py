"""Setup without traps: `make help`, a Python outside requires-python refused, TORCH_INDEX_URL re-installs torch,
`make clean` deletes only untracked pipeline outputs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, venv_env, working_tree_copy


def make(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_make_help_lists_every_target_with_a_comment():
    done = make(ROOT)
    assert done.returncode == 0, done.stderr
    for target in ("setup", "test", "test-fast", "inputs", "repro", "gate", "sample", "report", "pull", "promote",
                   "lint", "clean", "help"):
        assert f"make {target} " in done.stdout, f"`make help` does not list {target}"


def test_the_makefile_runs_the_stages_the_gates_read():
    from qgate.gates import GATED_STAGES

    done = make(ROOT, "-n", "repro")
    assert done.returncode == 0, done.stderr
    assert re.search(rf"dvc repro\s+{' '.join(GATED_STAGES)}$", done.stdout, re.M), done.stdout  # promote's list


@pytest.fixture
def setup_sandbox(tmp_path) -> Path:
    """The Makefile, its requirements and checker in tmp_path, with a .venv whose pip only logs what it is asked."""
    for name in ("Makefile", "requirements.txt", "pyproject.toml", ".ci/python_supported.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "pip").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'pip.log'}\n")
    (bin_dir / "opt_in_out").write_text("#!/bin/sh\n")
    for tool in ("pip", "opt_in_out"):
        (bin_dir / tool).chmod(0o755)
    return tmp_path


def torch_installs(sandbox: Path, *args: str) -> list[str]:
    """The pip calls that installed torch in one `make setup` (and nothing else changed)."""
    log = sandbox / "pip.log"
    log.unlink(missing_ok=True)
    done = make(sandbox, "setup", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in log.read_text().splitlines() if "torch==" in line] if log.exists() else []


def test_changing_torch_index_url_reinstalls_torch_from_the_new_index(setup_sandbox):
    first = torch_installs(setup_sandbox, "TORCH_INDEX_URL=https://index.example/cpu")
    assert len(first) == 1 and "--index-url https://index.example/cpu" in first[0]
    assert torch_installs(setup_sandbox, "TORCH_INDEX_URL=https://index.example/cpu") == []  # nothing changed
    switched = torch_installs(setup_sandbox, "TORCH_INDEX_URL=https://index.example/cu130")
    assert len(switched) == 1 and "--force-reinstall" in switched[0] and "index.example/cu130" in switched[0]
    default = torch_installs(setup_sandbox)
    assert len(default) == 1 and "--force-reinstall" in default[0] and "--index-url" not in default[0]


def test_a_python_outside_requires_python_is_refused_in_one_line(setup_sandbox):
    shutil.rmtree(setup_sandbox / ".venv")
    pyproject = setup_sandbox / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('requires-python = ">=3.11,<3.14"',
                                                       'requires-python = ">=3.99"'))
    done = make(setup_sandbox, "setup", f"PYTHON={sys.executable}")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "needs Python >=3.99" in errors[0] and "make setup PYTHON=" in errors[0]
    assert not (setup_sandbox / ".venv" / "bin").exists()  # refused before a venv was made


def test_this_python_is_inside_requires_python():
    done = subprocess.run([sys.executable, str(ROOT / ".ci/python_supported.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_make_clean_deletes_untracked_pipeline_outputs_only(tmp_path):
    (tmp_path / "project").mkdir()
    project = working_tree_copy(tmp_path / "project")
    outputs = ["models/export/model_fp32.xml", "models/int8/model_int8.xml", "data/demo/demo.yaml",
               "artifacts/baseline_detections.json", "reports/benchmark/benchmark_report.json",
               ".cache/ultralytics/settings.json"]  # not the demo's model: it is in git (dvc.yaml)
    mine = ["models/my_detector.pt", "data/my_data/images/a.jpg", "notes.txt"]
    for name in outputs + mine:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x")
    tracked_before = subprocess.run(["git", "ls-files"], cwd=project, capture_output=True, text=True).stdout
    done = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "qgate.clean"], cwd=project, env={
        **venv_env(), "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in outputs:
        assert not (project / name).exists(), f"make clean left the pipeline output {name}"
    for name in mine:
        assert (project / name).exists(), f"make clean deleted {name}, which is not a pipeline output"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True).stdout
    assert not [line for line in status.splitlines() if line.startswith(" D")], f"tracked files deleted:\n{status}"
    assert subprocess.run(["git", "ls-files"], cwd=project, capture_output=True, text=True).stdout == tracked_before
    assert os.path.isfile(project / "metrics" / "baseline.json")  # committed results stay


def test_dvc_status_works_on_a_fresh_clone(tmp_path):
    """What a DVC user runs first, before any stage ran: params.resolved.yaml (which every stage's params are read
    from) is in git, so it does not error with "Parameters ... are missing from 'params.resolved.yaml'". (`dvc repro
    --dry` still needs the stages' outputs in the workspace, DVC's own limit: docs/pipeline.md.)"""
    (tmp_path / "project").mkdir()
    project = working_tree_copy(tmp_path / "project")  # tracked files only: no pipeline output, no DVC cache
    assert (project / "params.resolved.yaml").is_file() and not (project / "data/demo").exists()
    done = subprocess.run(["dvc", "status"], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ERROR" not in done.stderr, (done.stdout[-2000:], done.stderr)
    assert "demo_data:" in done.stdout and "changed outs" in done.stdout  # it says what `make gate` will make
