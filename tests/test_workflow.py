"""The GitHub workflow, run here: each `run:` step in order, in a fresh clone (the `uses:` steps aside)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

from qgate.params import load_params

WORKFLOW = ROOT / ".github" / "workflows" / "qgate.yml"
# What GitHub would put into ${{ }} on a pull request to main; any other expression fails the test.
EXPRESSIONS = {"github.base_ref": "main", "secrets.GITHUB_TOKEN": ""}
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
@pytest.mark.timeout(3600)  # setup, the fast tests, the demo pipeline and promote, all in a fresh clone
@pytest.mark.skipif(os.environ.get("QGATE_IN_WORKFLOW_TEST") == "1", reason="already inside the workflow test")
def test_every_run_step_passes_in_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]
    summary = tmp_path / "step_summary.md"
    # the clone must use its own venv and code, not this checkout's
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    env.update(GITHUB_STEP_SUMMARY=str(summary), QGATE_IN_WORKFLOW_TEST="1", CI="true")
    run_job(job, clone, env)
    text = summary.read_text()
    assert "# qgate report: PASS" in text
    assert "## Metrics: this branch vs main" in text
    for output in ("reports/report.md", "reports/report.html", "reports/gates.xml"):
        assert (clone / output).is_file(), output
    promote_from_a_bare_origin(clone, tmp_path, env)


def run_job(job: dict, clone: Path, env: dict) -> None:
    """Every `run:` step of `job` in `clone`, in order; a failing step fails the test with its output."""
    env = {**env, **{key: substitute(value) for key, value in job.get("env", {}).items()}, **LOCAL_ENV}
    for step in run_steps(job):
        step_env = {**env, **{key: substitute(value) for key, value in step.get("env", {}).items()}}
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", substitute(step["run"])], cwd=clone, env=step_env,
                              capture_output=True, text=True, timeout=40 * 60)
        assert done.returncode == 0, f"step '{step.get('name', step['run'])}' failed:\n{done.stdout[-3000:]}\n" \
                                     f"{done.stderr[-3000:]}"


def promote_from_a_bare_origin(clone: Path, tmp_path: Path, env: dict) -> None:
    """The promote job: the gate's outputs committed and pushed (a local bare origin, a local DVC remote),
    then its `run:` steps in a fresh clone of that origin; the tags land on the origin, once."""
    origin, remote = tmp_path / "origin.git", tmp_path / "dvc-remote"
    user = ["-c", "user.name=qgate", "-c", "user.email=qgate@localhost"]
    for command in (["init", "-q", "--bare", "-b", "main", str(origin)],):
        subprocess.run(["git", *command], check=True)
    dvc = str(clone / ".venv/bin/dvc")
    for command in ([dvc, "remote", "add", "-d", "local", str(remote)], [dvc, "config", "core.analytics", "false"],
                    ["git", "add", "-A"], ["git", *user, "commit", "-qm", "gate results, DVC remote"],
                    [dvc, "push", "-q"], ["git", "push", "-q", str(origin), "HEAD:main"]):
        done = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    pushed = tmp_path / "pushed"
    subprocess.run(["git", "clone", "-q", str(origin), str(pushed)], check=True)
    (pushed / ".venv").symlink_to(clone / ".venv")  # the same installed packages: no second 6 GB venv
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["promote"]
    summary = tmp_path / "promote_summary.md"
    for attempt in range(2):  # a re-run (as after a cancelled job) finishes without a second version
        run_job(job, pushed, {**env, "GITHUB_STEP_SUMMARY": str(summary)})
    remote_tags = subprocess.run(["git", "ls-remote", "--tags", str(origin)], capture_output=True, text=True,
                                 check=True).stdout
    name = yaml.safe_load((clone / "params.yaml").read_text())["promote"]["name"]
    assert f"refs/tags/{name}@v0.0.1" in remote_tags and f"refs/tags/{name}#staging#1" in remote_tags
    assert f"{name}@v0.0.2" not in remote_tags
    assert "## Registry" in summary.read_text()


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
