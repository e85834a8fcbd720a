"""The GitHub workflow, run here: each `run:` step in order, in a fresh clone (the `uses:` steps aside)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "qgate.yml"
# What GitHub would put into ${{ }} on a pull request to main; any other expression fails the test.
EXPRESSIONS = {"github.base_ref": "main"}
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
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("QGATE_IN_WORKFLOW_TEST") == "1", reason="already inside the workflow test")
def test_every_run_step_passes_in_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]
    summary = tmp_path / "step_summary.md"
    # the clone must use its own venv and code, not this checkout's
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    env.update({key: substitute(value) for key, value in job.get("env", {}).items()})
    env.update(LOCAL_ENV, GITHUB_STEP_SUMMARY=str(summary), QGATE_IN_WORKFLOW_TEST="1", CI="true")
    for step in run_steps(job):
        step_env = {**env, **{key: substitute(value) for key, value in step.get("env", {}).items()}}
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", substitute(step["run"])], cwd=clone, env=step_env,
                              capture_output=True, text=True, timeout=40 * 60)
        assert done.returncode == 0, f"step '{step.get('name', step['run'])}' failed:\n{done.stdout[-3000:]}\n" \
                                     f"{done.stderr[-3000:]}"
    text = summary.read_text()
    assert "# qgate report: PASS" in text
    assert "## Metrics: this branch vs main" in text
    for output in ("reports/report.md", "reports/report.html", "reports/gates.xml"):
        assert (clone / output).is_file(), output
