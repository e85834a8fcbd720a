"""The GitHub workflow, run here: each `run:` step in order, in a fresh clone (the `uses:` steps aside)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import BACKBONE_FAULT, QUICK_BENCHMARK, ROOT, divergence_and_ranking, dvc, git, plant_range_fault

from qgate.io import sha256_file
from qgate.params import load_params

WORKFLOW = ROOT / ".github" / "workflows" / "qgate.yml"
# What GitHub would put into ${{ }} on a pull request to main; any other expression fails the test.
EXPRESSIONS = {"github.base_ref": "main", "secrets.GITHUB_TOKEN": "", **{f"secrets.{name}": "" for name in (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AZURE_STORAGE_CONNECTION_STRING",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON", "DVC_SSH_PRIVATE_KEY")}}  # secrets a repository has not set are empty
# The job's test step, run in a clone inside this session, selects one file: this session runs the others.
TESTS_SELECTED = {"PYTEST_ADDOPTS": "tests/test_workflow.py"}
# This machine reaches no PyTorch index: the job's CPU-torch index becomes the local package index.
LOCAL_ENV = {"TORCH_INDEX_URL": ""}


def run_steps(job: dict) -> list[dict]:
    """The job's `run:` steps, in order."""
    return [step for step in job["steps"] if "run" in step]


def substitute(value: str) -> str:
    """Replace `${{ expr }}` with what GitHub would; fail on an expression this test does not know."""
    def one(match: re.Match) -> str:
        expr = match.group(1).strip()
        assert expr in EXPRESSIONS, f"{WORKFLOW.name}: add '{expr}' to EXPRESSIONS in {Path(__file__).name}"
        return EXPRESSIONS[expr]
    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))


def test_the_workflow_checks_what_the_issue_asks():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["gate"]
    assert workflow["permissions"] == {"contents": "read"}
    assert job["timeout-minutes"] <= 90
    commands = [step["run"] for step in run_steps(job)]
    assert any("make gate" in c for c in commands) and any("make test" in c for c in commands)
    assert any("dvc metrics diff" in c for c in commands)
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads and uploads[0]["if"] == "${{ !cancelled() }}"
    for step in job["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)?@[0-9a-f]{40}", step["uses"]), step["uses"]


def test_only_the_promote_job_writes_and_only_after_the_gate_on_a_push_to_the_default_branch():
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    promote = jobs["promote"]
    assert promote["needs"] == "gate" and promote["permissions"] == {"contents": "write"}
    assert "github.event_name == 'push'" in promote["if"] and "default_branch" in promote["if"]
    assert all("permissions" not in job for name, job in jobs.items() if name != "promote")  # read-only default
    commands = "\n".join(step["run"] for step in run_steps(promote))
    assert "make promote PROMOTE_FLAGS=--push" in commands
    for step in promote["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)?@[0-9a-f]{40}", step["uses"]), step["uses"]
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the YOLO11n pipeline (trained by the fixture), promote twice
@pytest.mark.skipif(os.environ.get("QGATE_IN_WORKFLOW_TEST") == "1", reason="already inside the workflow test")
def test_a_fork_judges_its_own_model_on_a_fresh_runner_then_fails_in_one_line_without_its_files(
        tmp_path, trained_yolo11n):
    """A fork judges a YOLO11n of its own (weights and data in DVC, a local-directory DVC remote, a bare origin).
    A new clone of that origin (no DVC cache) runs every `run:` step of the gate job: a verdict on that model, no
    demo stage; then the promote job registers it. Its `make setup` step finds this checkout's venv (a fresh
    clone's own install is what `.ci/run` and the README check do first: ~2.3 min not paid twice). With the remote
    emptied, the same job fails in one line naming the missing files, within a minute.

    The job's test step runs in the clone with one file selected (PYTEST_ADDOPTS): this session runs the rest.
    """
    weights, data = trained_yolo11n
    origin, remote = tmp_path / "origin.git", tmp_path / "dvc-remote"
    publish_a_fork(weights, data, tmp_path / "fork", origin, remote)
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]
    runner = tmp_path / "runner"
    subprocess.run(["git", "clone", "-q", str(origin), str(runner)], check=True)
    (runner / ".venv").symlink_to(ROOT / ".venv")
    env = runner_env(tmp_path / "step_summary.md")
    output = run_job(job, runner, env)

    record = json.loads((runner / "metrics/export_record.json").read_text())
    assert record["weights"] == OWN_WEIGHTS and record["model_sha256"] == sha256_file(weights)
    assert record["head_layout"] == "raw"
    assert "Running stage 'demo_" not in output and "Running stage 'sensitivity'" in output
    int8 = json.loads((runner / "metrics/int8.json").read_text())
    print(f"YOLO11n on the demo data: FP32 {int8['baseline_map50_95']:.4f}, INT8 {int8['map50_95']:.4f}, "
          f"drop {int8['map50_95_drop']:+.4f}")
    assert int8["baseline_map50_95"] >= 0.3  # trained, not a random model that passes every gate trivially
    a_fault_in_its_backbone_is_the_layer_named(runner, tmp_path / "planted")
    text = (tmp_path / "step_summary.md").read_text()
    assert "# qgate report: PASS" in text and "## Metrics: this branch vs main" in text
    assert "judged another model" in text  # main's committed metrics are upstream's demo, not this model
    for output_file in ("reports/report.md", "reports/report.html", "reports/gates.xml"):
        assert (runner / output_file).is_file(), output_file
    promote_from_the_origin(runner, origin, tmp_path, env)

    shutil.rmtree(remote)
    remote.mkdir()
    emptied = tmp_path / "emptied"
    subprocess.run(["git", "clone", "-q", str(origin), str(emptied)], check=True)
    (emptied / ".venv").symlink_to(ROOT / ".venv")
    failed = failing_step(job, emptied, env)
    assert failed.name == INPUTS_STEP and failed.seconds < 60, (failed.name, failed.seconds)
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert "models/own/detector.pt (model.weights)" in errors[0] and "data/own (model.data_dir)" in errors[0]
    assert "not in the DVC remote" in errors[0]
    assert "Running stage" not in failed.stdout


def a_fault_in_its_backbone_is_the_layer_named(runner: Path, planted: Path) -> None:
    """On this YOLO11n (not the demo's v8): no layer is divergent as quantized; with a range fault planted
    mid-backbone, that layer alone is, and the sensitivity ranking puts its quantizers first."""
    healthy = json.loads((runner / "metrics/divergence.json").read_text())
    assert healthy["divergent_layers"] == 0, healthy
    shutil.copytree(runner, planted, symlinks=True, ignore=shutil.ignore_patterns(".venv", ".git", ".dvc"))
    plant_range_fault(planted, BACKBONE_FAULT)
    _, divergent, ranking = divergence_and_ranking(planted)
    assert divergent == [BACKBONE_FAULT] and ranking["lead_divergent_layer"] == BACKBONE_FAULT, (divergent, ranking)


OWN_WEIGHTS = "models/own/detector.pt"
INPUTS_STEP = "Model and data from the DVC remote"


def publish_a_fork(weights: Path, data: Path, fork: Path, origin: Path, remote: Path) -> None:
    """A clone of this checkout judging `weights` on `data`: both `dvc add`ed, pushed to a local DVC remote, and
    the commit pushed to a new bare `origin`."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(fork)], check=True)
    (fork / OWN_WEIGHTS).parent.mkdir(parents=True)
    shutil.copy(weights, fork / OWN_WEIGHTS)
    shutil.copytree(data, fork / "data/own")
    params = yaml.safe_load((fork / "params.yaml").read_text())
    params["model"].update(weights=OWN_WEIGHTS, dataset="data/own/demo.yaml", data_dir="data/own")
    params["promote"].update(name="detector-int8", family="yolo11n")
    params["benchmark"] = QUICK_BENCHMARK
    (fork / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    dvc(fork, "add", "-q", OWN_WEIGHTS, "data/own")
    dvc(fork, "remote", "add", "-d", "storage", str(remote))
    git(fork, "add", "-A")
    git(fork, "commit", "-qm", "judge our detector: weights and data in DVC, a DVC remote")
    dvc(fork, "push", "-q")
    git(fork, "push", "-q", str(origin), "HEAD:main")


def runner_env(summary: Path) -> dict:
    """A fresh runner's environment: the clone runs its own code (its .venv path), never this checkout's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    env.update(GITHUB_STEP_SUMMARY=str(summary), QGATE_IN_WORKFLOW_TEST="1", CI="true")
    return env


@dataclass
class Step:
    """A finished `run:` step."""

    name: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def steps(job: dict, clone: Path, env: dict):
    """Run `job`'s `run:` steps in `clone` in order, yielding each finished Step (the caller stops on a failure)."""
    env = {**env, **{key: substitute(value) for key, value in job.get("env", {}).items()}, **LOCAL_ENV}
    for step in run_steps(job):
        step_env = {**env, **{key: substitute(value) for key, value in step.get("env", {}).items()},
                    **(TESTS_SELECTED if "make test" in step["run"] else {})}
        start = time.monotonic()
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", substitute(step["run"])], cwd=clone, env=step_env,
                              capture_output=True, text=True, timeout=40 * 60)
        yield Step(step.get("name", step["run"]), done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def run_job(job: dict, clone: Path, env: dict) -> str:
    """Every `run:` step of `job` in `clone`, in order; a failing step fails the test with its output. The
    steps' stdout, joined."""
    output = []
    for step in steps(job, clone, env):
        assert step.returncode == 0, f"step '{step.name}' failed:\n{step.stdout[-3000:]}\n{step.stderr[-3000:]}"
        output.append(step.stdout)
    return "\n".join(output)


def failing_step(job: dict, clone: Path, env: dict) -> Step:
    """The first `run:` step of `job` that fails in `clone` (the test fails when every step passes)."""
    for step in steps(job, clone, env):
        if step.returncode:
            return step
    raise AssertionError("every step passed")


def promote_from_the_origin(runner: Path, origin: Path, tmp_path: Path, env: dict) -> None:
    """The promote job: the gate's outputs committed and pushed (git to the bare origin, DVC to the remote the
    fork configured), then its `run:` steps in a fresh clone of that origin; the tags land on the origin, once."""
    dvc_tool = str(runner / ".venv/bin/dvc")
    for command in (["git", "add", "-A"], ["git", "-c", "user.name=qgate", "-c", "user.email=qgate@localhost",
                                           "commit", "-qm", "gate results"],
                    [dvc_tool, "push", "-q"], ["git", "push", "-q", "origin", "HEAD:main"]):
        done = subprocess.run(command, cwd=runner, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    pushed = tmp_path / "pushed"
    subprocess.run(["git", "clone", "-q", str(origin), str(pushed)], check=True)
    (pushed / ".venv").symlink_to(runner / ".venv")  # the same installed packages: no second 6 GB venv
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["promote"]
    summary = tmp_path / "promote_summary.md"
    for attempt in range(2):  # a re-run (as after a cancelled job) finishes without a second version
        run_job(job, pushed, {**env, "GITHUB_STEP_SUMMARY": str(summary)})
    remote_tags = subprocess.run(["git", "ls-remote", "--tags", str(origin)], capture_output=True, text=True,
                                 check=True).stdout
    assert "refs/tags/detector-int8@v0.0.1" in remote_tags and "refs/tags/detector-int8#staging#1" in remote_tags
    assert "detector-int8@v0.0.2" not in remote_tags
    assert "## Registry" in summary.read_text()


def test_the_remote_secrets_reach_only_the_steps_that_store_them_and_are_the_ones_make_inputs_reads():
    from qgate.inputs import CREDENTIALS

    readable = {name for options in CREDENTIALS.values() for name in options}
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    for name, job in jobs.items():
        for step in job["steps"]:
            secrets = {key for key, value in step.get("env", {}).items()
                       if str(value).startswith("${{ secrets.") and key not in ("GITHUB_TOKEN", "QGATE_RAY_ADDRESS")}
            assert secrets <= readable, (name, secrets - readable)
            if secrets:
                assert re.search(r"make (inputs|gate|pull)", step["run"]), (name, step["run"])
    assert any("make inputs" in step.get("run", "") for step in jobs["gate"]["steps"])


def test_the_cluster_gate_runs_by_hand_with_the_address_from_a_secret():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["cluster-gate"]
    assert "workflow_dispatch" in workflow[True]  # PyYAML reads the `on:` key as True
    assert job["if"] == "github.event_name == 'workflow_dispatch'" and "permissions" not in job
    assert job["env"]["QGATE_RAY_ADDRESS"] == "${{ secrets.QGATE_RAY_ADDRESS }}"
    commands = [step["run"] for step in run_steps(job)]
    point = next(i for i, c in enumerate(commands) if "QGATE_RAY_ADDRESS" in c)
    assert "${{" not in commands[point]  # the secret reaches the shell as an env var, never pasted into it
    assert any("make gate" in c for c in commands[point + 1:])


def test_the_cluster_gate_points_compute_at_the_secret_address(tmp_path):
    step = next(s for s in run_steps(yaml.safe_load(WORKFLOW.read_text())["jobs"]["cluster-gate"])
                if "QGATE_RAY_ADDRESS" in s["run"])
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    for address, status in (("", 2), ("ray://10.0.0.5:10001", 0)):
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, capture_output=True,
                              text=True, env={**os.environ, "QGATE_RAY_ADDRESS": address}, timeout=60)
        assert done.returncode == status, done.stderr
    compute = load_params(tmp_path / "params.yaml").compute
    assert (compute.backend, compute.address) == ("ray", "ray://10.0.0.5:10001")
