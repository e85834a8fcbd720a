"""The GitHub workflow's jobs run here: each `run:` step in order, in a clone (the `uses:` steps aside), and the fork
they run on: an upstream release with the demo's outputs, a fork of it judging its own model from its DVC remote."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conftest import QUICK_BENCHMARK, ROOT, dvc, git

WORKFLOW = ROOT / ".github" / "workflows" / "qgate.yml"
# What GitHub would put into ${{ }} on a pull request to main; any other expression fails the test.
EXPRESSIONS = {"github.base_ref": "main", "secrets.GITHUB_TOKEN": "", **{f"secrets.{name}": "" for name in (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AZURE_STORAGE_CONNECTION_STRING",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON", "DVC_SSH_PRIVATE_KEY")}}  # secrets a repository has not set are empty
# The job's test step, run in a clone inside this session, selects one file: this session runs the others.
TESTS_SELECTED = {"PYTEST_ADDOPTS": "tests/test_workflow.py"}
# This machine reaches no PyTorch index: the job's CPU-torch index becomes the local package index.
LOCAL_ENV = {"TORCH_INDEX_URL": ""}
OWN_WEIGHTS = "models/own/detector.pt"
OWN_DATA = "data/own"
INPUTS_STEP = "Model and data from the DVC remote"
GATE_STEP = "Gate (pipeline, gates, report; the report goes to the job summary)"


def jobs() -> dict:
    """The workflow's jobs, as GitHub reads them."""
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def run_steps(job: dict) -> list[dict]:
    """The job's `run:` steps, in order."""
    return [step for step in job["steps"] if "run" in step]


def substitute(value: str) -> str:
    """Replace `${{ expr }}` with what GitHub would; fail on an expression this module does not know."""
    def one(match: re.Match) -> str:
        expr = match.group(1).strip()
        assert expr in EXPRESSIONS, f"{WORKFLOW.name}: add '{expr}' to EXPRESSIONS in {Path(__file__).name}"
        return EXPRESSIONS[expr]
    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))


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


def run_job(job: dict, clone: Path, env: dict) -> dict[str, Step]:
    """Every `run:` step of `job` in `clone`, in order; a failing step fails the test with its output. The steps
    by name."""
    done = {}
    for step in steps(job, clone, env):
        assert step.returncode == 0, f"step '{step.name}' failed:\n{step.stdout[-3000:]}\n{step.stderr[-3000:]}"
        done[step.name] = step
    return done


def failing_step(job: dict, clone: Path, env: dict) -> Step:
    """The first `run:` step of `job` that fails in `clone` (the test fails when every step passes)."""
    for step in steps(job, clone, env):
        if step.returncode:
            return step
    raise AssertionError("every step passed")


def runner_env(summary: Path) -> dict:
    """A fresh runner's environment: the clone runs its own code (its .venv path), never this checkout's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    env.update(GITHUB_STEP_SUMMARY=str(summary), QGATE_IN_WORKFLOW_TEST="1", CI="true")
    return env


def clone(origin: Path, dest: Path, venv: Path = ROOT / ".venv") -> Path:
    """A clone of `origin` in `dest` with `venv` as its .venv (a fresh clone's own install is what `.ci/run` and
    the README check pay for; the steps' `make setup` finds it installed)."""
    subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True)
    (dest / ".venv").symlink_to(venv)
    return dest


def publish_upstream(checkout: Path, upstream: Path, origin: Path) -> None:
    """A copy of `checkout` (the demo after its pipeline) in `upstream`, committed and pushed to a new bare
    `origin`: the release a fork starts from and later merges again."""
    shutil.copytree(checkout, upstream, symlinks=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    git(upstream, "add", "-A")
    git(upstream, "commit", "-qm", "upstream: the demo's pipeline outputs")
    git(upstream, "push", "-q", str(origin), "HEAD:main")


def publish_a_fork(upstream_origin: Path, weights: Path, data: Path, fork: Path, origin: Path, remote: Path,
                   **params) -> None:
    """A clone of upstream judging `weights` on `data` (both `dvc add`ed and pushed to a local DVC remote) with
    `params` laid over params.yaml, committed and pushed to a new bare `origin`."""
    subprocess.run(["git", "clone", "-q", str(upstream_origin), str(fork)], check=True)
    (fork / OWN_WEIGHTS).parent.mkdir(parents=True)
    shutil.copy(weights, fork / OWN_WEIGHTS)
    shutil.copytree(data, fork / OWN_DATA)
    settings = yaml.safe_load((fork / "params.yaml").read_text())
    settings["model"].update(weights=OWN_WEIGHTS, dataset=f"{OWN_DATA}/{data_yaml(data).name}", data_dir=OWN_DATA)
    settings["benchmark"] = QUICK_BENCHMARK
    for section, values in params.items():
        settings.setdefault(section, {}).update(values)
    (fork / "params.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    dvc(fork, "add", "-q", OWN_WEIGHTS, OWN_DATA)
    dvc(fork, "remote", "add", "-d", "storage", str(remote))
    git(fork, "add", "-A")
    git(fork, "commit", "-qm", "judge our model: weights and data in DVC, a DVC remote")
    dvc(fork, "push", "-q")
    git(fork, "push", "-q", str(origin), "HEAD:main")


def data_yaml(folder: Path) -> Path:
    """The dataset yaml at the top of `folder`."""
    (found,) = folder.glob("*.yaml")
    return found
