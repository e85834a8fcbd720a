"""`make promote`: GTO versions and stages for the INT8 model that passed, in temporary git repositories.

Bad input on a bare copy of the working tree (fast); the issue's acceptance on a copy of the demo pipeline
after `dvc repro` (slow): v0.0.1 + staging, nothing new on a re-run, no tag when a gate fails, v0.0.2 for
a new INT8 IR, and `dvc artifacts get` of the version from a local bare origin and a local DVC remote.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qgate.io import sha256_file
from qgate.registry import Version, fields, next_version
from tests.conftest import ROOT, dvc as _dvc, git, venv_env, working_tree_copy

NAME = yaml.safe_load((ROOT / "params.yaml").read_text())["promote"]["name"]


def promote(repo: Path, *flags: str) -> subprocess.CompletedProcess:
    code = repo if (repo / "qgate").is_dir() else ROOT  # a copy of the checkout runs its own code
    env = {**venv_env(), "PYTHONPATH": str(code), "GIT_AUTHOR_NAME": "qgate", "GIT_AUTHOR_EMAIL": "qgate@localhost",
           "GIT_COMMITTER_NAME": "qgate", "GIT_COMMITTER_EMAIL": "qgate@localhost"}
    return subprocess.run([sys.executable, "-m", "qgate.promote", *flags], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)


def tags(repo: Path) -> list[str]:
    return sorted(git(repo, "tag", "-l").split())


def one_error(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# ---- bad input: a copy of the working tree, no pipeline outputs ----

def test_outside_a_git_repository(tmp_path):
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    assert "not a git repository" in one_error(promote(tmp_path))


def test_a_repository_without_a_commit(tmp_path):
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    git(tmp_path, "init", "-q")
    assert "has no commit yet" in one_error(promote(tmp_path))


def test_a_dirty_tree_and_a_stale_pipeline_tag_nothing(tmp_path):
    repo = working_tree_copy(tmp_path / "repo")
    (repo / "notes.txt").write_text("uncommitted")
    assert "the work tree is not clean (1 changed, e.g. 'notes.txt')" in one_error(promote(repo))
    (repo / "notes.txt").unlink()
    # committed, but no pipeline output is here: dvc.lock's outputs are missing
    assert "`dvc status` is not clean (stages" in one_error(promote(repo))
    assert tags(repo) == []


def test_next_version_bumps_by_rule():
    def version(number, model):
        return Version(f"m@v{'.'.join(map(str, number))}", number, "c", {"model_sha256": model})

    assert next_version([], "a", "patch", "minor") == "v0.0.1"
    assert next_version([version((0, 0, 1), "a")], "a", "patch", "minor") == "v0.0.2"
    assert next_version([version((0, 0, 1), "a"), version((0, 3, 2), "a")], "b", "patch", "minor") == "v0.4.0"
    assert next_version([version((1, 2, 3), "a")], "a", "major", "minor") == "v2.0.0"
    assert fields("title\n\nir_sha256: abc\nmap50_95_drop: 0.1 [0, 0.2] (95%)\n") == {
        "ir_sha256": "abc", "map50_95_drop": "0.1 [0, 0.2] (95%)"}


# ---- the acceptance, on the demo pipeline's real outputs (slow) ----

def _make_promote(repo: Path, *variables: str) -> subprocess.CompletedProcess:
    env = {**venv_env(), "GIT_AUTHOR_NAME": "qgate", "GIT_AUTHOR_EMAIL": "qgate@localhost",
           "GIT_COMMITTER_NAME": "qgate", "GIT_COMMITTER_EMAIL": "qgate@localhost"}
    return subprocess.run(["make", "promote", *variables], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=600)


def _message(repo: Path, tag: str) -> dict[str, str]:
    return fields(git(repo, "tag", "-l", "--format=%(contents)", tag))


@pytest.mark.slow
def test_promote_registers_stages_refuses_and_bumps(repo, tmp_path):
    """Registration end to end on real pipeline outputs (~75 s): a version and its stage, nothing new on a re-run,
    nothing for a failed gate, the next patch for a new INT8 IR (quantize .. autofix re-run: the only way to make
    one), and `dvc artifacts get` of it from the bare origin and DVC remote. The workflow test runs the promote job
    once; the refusals that need no pipeline are the fast tests above."""
    first = _make_promote(repo)
    assert first.returncode == 0, first.stdout + first.stderr
    assert tags(repo) == [f"{NAME}#staging#1", f"{NAME}@v0.0.1"]
    shown = subprocess.run([str(ROOT / ".venv/bin/gto"), "show", "--json"], cwd=repo, capture_output=True,
                           text=True, check=True)
    assert json.loads(shown.stdout)[NAME]["version"] == "v0.0.1"
    assert json.loads(shown.stdout)[NAME]["stage"]["staging"] == "v0.0.1"
    message = _message(repo, f"{NAME}@v0.0.1")
    autofix = json.loads((repo / "metrics/autofix.json").read_text())
    assert message["ir_sha256"] == autofix["fixed_ir_bin_sha256"] and message["verdict"].startswith("PASS, all 15")
    assert "[" in message["map50_95_drop"] and "[" in message["speedup_fps"]  # the intervals travel with the tag
    assert f"Registered as **{NAME}@v0.0.1**" in (repo / "reports/report.md").read_text()

    again = _make_promote(repo)
    assert again.returncode == 0 and f"registered already as {NAME}@v0.0.1" in again.stdout, again.stdout
    assert len(tags(repo)) == 2

    params = (repo / "params.yaml").read_text()
    assert "  max_map50_95_drop: 0.01 " in params
    (repo / "params.yaml").write_text(params.replace("  max_map50_95_drop: 0.01 ",
                                                     "  min_int8_score: 0.99\n  max_map50_95_drop: 0.01 "))
    _dvc(repo, "repro", "params")  # a committed params.yaml its dvc.lock does not resolve is refused first
    git(repo, "commit", "-qam", "tightened gate")
    failed = _make_promote(repo)
    assert failed.returncode != 0 and "gates failed (accuracy_int8_map50_95_floor); nothing tagged" in failed.stderr
    assert len(tags(repo)) == 2
    (repo / "params.yaml").write_text(params)

    # a new INT8 IR of the same FP32 model: other calibration images -> the next patch version (CI time: no shift
    # judged, or robustness's evaluations re-run too; registration does not read them)
    changed = yaml.safe_load(params) | {"quantize": {"subset_size": 48}, "robustness": {"shifts": []}}
    (repo / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    _dvc(repo, "repro", "export", "baseline", "quantize", "int8_eval", "robustness", "benchmark", "divergence",
         "sensitivity", "autofix")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calibrate on 48 images")
    _dvc(repo, "push", "-q")
    git(repo, "push", "-q", "origin", "HEAD:main")
    second = _make_promote(repo, "PROMOTE_FLAGS=--push")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{NAME}@v0.0.2" in tags(repo)
    new_ir = json.loads((repo / "metrics/autofix.json").read_text())["fixed_ir_bin_sha256"]
    assert new_ir != autofix["fixed_ir_bin_sha256"] and _message(repo, f"{NAME}@v0.0.2")["ir_sha256"] == new_ir
    origin = str(tmp_path / "origin.git")
    remote_tags = git(repo, "ls-remote", "--tags", origin)
    assert f"refs/tags/{NAME}@v0.0.2" in remote_tags and f"refs/tags/{NAME}#staging#2" in remote_tags

    # what a consumer does: the staged version from the bare origin, its data from the DVC remote
    fetched = tmp_path / "fetched"
    done = subprocess.run(["dvc", "artifacts", "get", origin, NAME, "--stage", "staging", "-o", str(fetched)],
                          cwd=tmp_path, env=venv_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sha256_file(fetched / "model_int8.bin") == new_ir


@pytest.mark.slow
def test_an_interrupted_promotion_is_finished_and_an_existing_version_tag_is_refused(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    # as if a run died after `gto register`: the version tag without its stage tag
    subprocess.run([str(ROOT / ".venv/bin/gto"), "register", NAME, head, "--version", "v0.0.1", "--message",
                    "qgate registers\n\nir_sha256: " + json.loads((repo / "metrics/autofix.json").read_text())[
                        "fixed_ir_bin_sha256"]], cwd=repo, check=True, capture_output=True)
    resumed = promote(repo)
    assert resumed.returncode == 0, resumed.stderr
    assert "registered already" in resumed.stdout and f"assigned staging to {NAME}@v0.0.1" in resumed.stdout
    assert tags(repo) == [f"{NAME}#staging#1", f"{NAME}@v0.0.1"]
    # a version tag on this commit that names another IR: gto refuses a second version here, in one line
    git(repo, "tag", "-d", f"{NAME}@v0.0.1", f"{NAME}#staging#1")
    git(repo, "tag", "-a", f"{NAME}@v0.0.7", "-m", "made by hand\n\nir_sha256: 0000")
    error = one_error(promote(repo))
    assert "gto register failed" in error and "v0.0.7" in error, error
    assert tags(repo) == [f"{NAME}@v0.0.7"]
