"""The GitHub workflow, run here: each `run:` step in order, in a fresh clone (the `uses:` steps aside)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from qgate.io import sha256_file
from qgate.params import load_params
from tests.conftest import ROOT, git, headline
from tests.runner import (INPUTS_STEP, OWN_WEIGHTS, WORKFLOW, clone, failing_step, jobs, run_job, run_steps)


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
    all_jobs = jobs()
    promote = all_jobs["promote"]
    assert promote["needs"] == "gate" and promote["permissions"] == {"contents": "write"}
    assert "github.event_name == 'push'" in promote["if"] and "default_branch" in promote["if"]
    assert all("permissions" not in job for name, job in all_jobs.items() if name != "promote")  # read-only default
    commands = "\n".join(step["run"] for step in run_steps(promote))
    assert "make promote PROMOTE_FLAGS=--push" in commands
    for step in promote["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)?@[0-9a-f]{40}", step["uses"]), step["uses"]
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(os.environ.get("QGATE_IN_WORKFLOW_TEST") == "1", reason="already inside the workflow test")
def test_a_fork_judges_its_own_model_on_a_fresh_runner_promotes_merges_upstream_and_fails_without_its_files(
        fresh_runner, tmp_path):
    """The whole life of a fork, the one place each of these runs end to end (~3 min besides `fresh_runner`):

    - a fork of an upstream release judges a model of its own (the pinned pose demo model, its weights and data in
      DVC, a local-directory DVC remote, a bare origin): a new clone (no DVC cache) runs every `run:` step of the
      gate job (`fresh_runner`): a verdict on that model, no demo stage, the PR summary says main judged another;
    - the promote job registers it from a fresh clone of the origin it pushed its results to;
    - the fork, its own metrics committed, merges upstream's next release (a new default, code, the demo's metrics
      re-measured) without a conflict, and `make gate` re-runs only what upstream changed;
    - with the DVC remote emptied, the gate job (from its inputs step) fails in one line naming the missing files,
      within a minute.

    The job's test step runs in the clone with one file selected (PYTEST_ADDOPTS): this session runs the rest.
    """
    run = fresh_runner
    record = json.loads((run.checkout / "metrics/export_record.json").read_text())
    assert record["weights"] == OWN_WEIGHTS and record["model_sha256"] == sha256_file(run.weights)
    assert record["task"] == "pose" and record["head_layout"] == "raw"
    assert "Running stage 'demo_" not in run.output and "Running stage 'sensitivity'" in run.output
    text = run.summary.read_text()
    assert "# qgate report: PASS" in text and "## Metrics: this branch vs main" in text
    assert "judged another model" in text  # main's committed metrics are upstream's demo, not this model
    for output_file in ("reports/report.md", "reports/report.html", "reports/gates.xml"):
        assert (run.checkout / output_file).is_file(), output_file

    fork = tmp_path / "fork"
    shutil.copytree(run.checkout, fork, symlinks=True)
    promote_from_the_origin(fork, run.fork_origin, tmp_path, run.env)
    merge_an_upstream_release(fork, run.upstream, run.upstream_origin, tmp_path / "upstream")

    shutil.rmtree(run.remote)
    run.remote.mkdir()
    emptied = clone(run.fork_origin, tmp_path / "emptied")
    gate_job = jobs()["gate"]  # from the inputs step on: setup, lint and the fast tests ran in the runner above
    names = [step.get("name") for step in run_steps(gate_job)]
    failed = failing_step({**gate_job, "steps": run_steps(gate_job)[names.index(INPUTS_STEP):]}, emptied, run.env)
    assert failed.name == INPUTS_STEP and failed.seconds < 60, (failed.name, failed.seconds)
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert "models/own/detector.pt (model.weights)" in errors[0] and "data/own (model.data_dir)" in errors[0]
    assert "not in the DVC remote" in errors[0]
    assert "Running stage" not in failed.stdout


def promote_from_the_origin(fork: Path, origin: Path, tmp_path: Path, env: dict) -> None:
    """The promote job: the gate's outputs committed and pushed (git to the bare origin, DVC to the remote the
    fork configured), then its `run:` steps in a fresh clone of that origin; the tags land on the origin. (A re-run
    that tags nothing new: tests/test_promote.py.)"""
    dvc_tool = str(fork / ".venv/bin/dvc")
    for command in (["git", "add", "-A"], ["git", "-c", "user.name=qgate", "-c", "user.email=qgate@localhost",
                                           "commit", "-qm", "gate results"],
                    [dvc_tool, "push", "-q"], ["git", "push", "-q", "origin", "HEAD:main"]):
        done = subprocess.run(command, cwd=fork, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    pushed = clone(origin, tmp_path / "pushed", venv=fork / ".venv")  # the same installed packages
    summary = tmp_path / "promote_summary.md"
    run_job(jobs()["promote"], pushed, {**env, "GITHUB_STEP_SUMMARY": str(summary)})
    remote_tags = subprocess.run(["git", "ls-remote", "--tags", str(origin)], capture_output=True, text=True,
                                 check=True).stdout
    assert "refs/tags/detector-int8@v0.0.1" in remote_tags and "refs/tags/detector-int8#staging#1" in remote_tags
    assert "## Registry" in summary.read_text()


def merge_an_upstream_release(fork: Path, upstream: Path, upstream_origin: Path, release: Path) -> None:
    """Upstream's next commit (a new default, a code change, the demo's metrics re-measured by `make gate`) merges
    into the fork, whose own metrics, dvc.lock and params are committed, without a conflict (.gitattributes'
    `merge=ours`, the driver `make setup` defines); the fork's `make gate` then re-runs what the default changed."""
    shutil.copytree(upstream, release, symlinks=True)
    defaults = release / "qgate" / "defaults.yaml"
    defaults.write_text(defaults.read_text().replace("  images: 8 ", "  images: 6 ", 1))  # divergence.images
    report = release / "qgate" / "report.py"
    report.write_text(report.read_text() + "\n# upstream's next release\n")
    make(release, "gate")
    git(release, "add", "-A")
    git(release, "commit", "-qm", "upstream: divergence.images 6")
    git(release, "push", "-q", str(upstream_origin), "HEAD:main")
    git(fork, "fetch", "-q", str(upstream_origin), "main")
    base = git(fork, "merge-base", "HEAD", "FETCH_HEAD").strip()  # upstream's release the fork started from
    upstream_changed = set(git(fork, "diff", "--name-only", base, "FETCH_HEAD").split())
    assert {"qgate/defaults.yaml", "qgate/report.py", "metrics/divergence.json", "dvc.lock"} <= upstream_changed
    assert {"dvc.lock", "metrics/divergence.json"} <= set(git(fork, "diff", "--name-only", base, "HEAD").split())

    make(fork, "setup")  # defines the `ours` merge driver .gitattributes names
    git(fork, "merge", "-q", "--no-edit", "FETCH_HEAD")  # fails the test on a conflict
    assert yaml.safe_load((fork / "params.yaml").read_text())["model"]["weights"] == OWN_WEIGHTS
    assert json.loads((fork / "metrics/export_record.json").read_text())["weights"] == OWN_WEIGHTS
    assert "  images: 6 " in (fork / "qgate/defaults.yaml").read_text()  # upstream's code and defaults arrived
    assert (fork / "qgate/report.py").read_text().endswith("# upstream's next release\n")
    after = make(fork, "gate")
    assert "Running stage 'divergence'" in after.stdout  # the new default re-runs the stage that reads it ...
    assert "Running stage 'export'" not in after.stdout  # ... and not the fork's model's export
    assert headline(after.stdout).startswith("PASS"), after.stdout[-3000:]


def make(checkout: Path, target: str) -> subprocess.CompletedProcess:
    """`make target` in `checkout`; a failure fails the test with its output."""
    done = subprocess.run(["make", target], cwd=checkout, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_remote_secrets_reach_only_the_steps_that_store_them_and_are_the_ones_make_inputs_reads():
    from qgate.inputs import CREDENTIALS

    readable = {name for options in CREDENTIALS.values() for name in options}
    all_jobs = jobs()
    for name, job in all_jobs.items():
        for step in job["steps"]:
            secrets = {key for key, value in step.get("env", {}).items()
                       if str(value).startswith("${{ secrets.") and key not in ("GITHUB_TOKEN", "QGATE_RAY_ADDRESS")}
            assert secrets <= readable, (name, secrets - readable)
            if secrets:
                assert re.search(r"make (inputs|gate|pull)", step["run"]), (name, step["run"])
    assert any("make inputs" in step.get("run", "") for step in all_jobs["gate"]["steps"])


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
    step = next(s for s in run_steps(jobs()["cluster-gate"])
                if "QGATE_RAY_ADDRESS" in s["run"])
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    for address, status in (("", 2), ("ray://10.0.0.5:10001", 0)):
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, capture_output=True,
                              text=True, env={**os.environ, "QGATE_RAY_ADDRESS": address}, timeout=60)
        assert done.returncode == status, done.stderr
    compute = load_params(tmp_path / "params.yaml").compute
    assert (compute.executor, compute.address) == ("ray", "ray://10.0.0.5:10001")
