"""`make inputs`: the gated stages' own files (weights, data) are found, pulled from the DVC remote, or named in one
line with the fix, within seconds; the remote's credentials from the environment land in .dvc/config.local."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, dvc, error_line, git, venv_env, working_tree_copy

WEIGHTS, DATA = "models/own/detector.pt", "data/own"


def inputs(project: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m qgate.inputs` in `project`, as `make inputs` runs it."""
    return subprocess.run([sys.executable, "-m", "qgate.inputs"], cwd=project, capture_output=True,
                          text=True, timeout=120, env={**venv_env(), "PYTHONPATH": str(ROOT), **(env or {})})


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """Exit 2, no traceback, one `error:` line (the last; DVC's own warnings silenced); that line."""
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [error_line(done)], done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return error_line(done)


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, Path]:
    """A project judging its own (stand-in) weights and data, both `dvc add`ed and pushed to a local DVC remote;
    the project and the remote."""
    root = tmp_path_factory.mktemp("own")
    project = working_tree_copy(root / "project")
    (project / WEIGHTS).parent.mkdir(parents=True)
    (project / WEIGHTS).write_bytes(os.urandom(256))  # inputs never reads it: any bytes stand for a model
    (project / DATA / "images/val").mkdir(parents=True)
    (project / DATA / "images/val/0.jpg").write_bytes(b"not read either")
    (project / DATA / "data.yaml").write_text("path: .\nval: images/val\nnames: {0: a}\n")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["model"].update(weights=WEIGHTS, dataset=f"{DATA}/data.yaml", data_dir=DATA)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    dvc(project, "add", "-q", WEIGHTS, DATA)
    dvc(project, "remote", "add", "-d", "storage", str(root / "remote"))
    git(project, "add", "-A")
    git(project, "commit", "-qm", "our model, in DVC")
    dvc(project, "push", "-q")
    return project, root / "remote"


def clone(project: Path, dest: Path) -> Path:
    git(project.parent, "clone", "-q", str(project), str(dest))
    return dest


def test_the_demo_needs_nothing_fetched_its_files_are_made_by_the_pipeline():
    done = inputs(ROOT)
    assert done.returncode == 0, done.stderr
    assert "made by the pipeline" in done.stderr


def test_a_fresh_clone_pulls_its_weights_and_data_from_the_remote(published, tmp_path):
    runner = clone(published[0], tmp_path / "runner")
    assert not (runner / WEIGHTS).exists()
    done = inputs(runner)
    assert done.returncode == 0, done.stderr
    assert (runner / WEIGHTS).read_bytes() == (published[0] / WEIGHTS).read_bytes()
    assert (runner / DATA / "data.yaml").is_file()
    assert "pulled from the DVC remote 'storage'" in done.stderr


def test_files_the_remote_does_not_have_are_named_in_one_line_within_a_minute(published, tmp_path):
    project, remote = published
    emptied = tmp_path / "emptied-remote"
    runner = clone(project, tmp_path / "runner")
    dvc(runner, "remote", "modify", "--local", "storage", "url", str(emptied))
    emptied.mkdir()
    start = time.monotonic()
    line = one_error_line(inputs(runner))
    assert time.monotonic() - start < 60
    assert line.startswith(f"error: {DATA} (model.data_dir), {WEIGHTS} (model.weights): not in this checkout")
    assert f"not in the DVC remote 'storage' ({emptied})" in line and "dvc push" in line
    assert not (runner / WEIGHTS).exists()


def test_tracked_files_without_a_remote_say_how_to_add_one(published, tmp_path):
    runner = clone(published[0], tmp_path / "runner")
    dvc(runner, "remote", "remove", "storage")
    line = one_error_line(inputs(runner))
    assert "no DVC remote is configured" in line and "dvc remote add -d" in line and WEIGHTS in line


def test_a_missing_file_dvc_does_not_track_says_to_dvc_add_it(published, tmp_path):
    runner = clone(published[0], tmp_path / "runner")
    (runner / f"{WEIGHTS}.dvc").unlink()
    line = one_error_line(inputs(runner))
    assert f"{WEIGHTS} (model.weights): not in this checkout and not tracked by DVC" in line and "dvc add" in line


def test_a_remote_whose_plugin_is_not_installed_names_the_plugin(published, tmp_path):
    runner = clone(published[0], tmp_path / "runner")
    dvc(runner, "remote", "modify", "--local", "storage", "url", "s3://bucket/qgate")
    line = one_error_line(inputs(runner, {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "secret"}))
    assert "'dvc-s3'" in line and "requirements.txt" in line
    local = (runner / ".dvc/config.local").read_text()
    assert "secret_access_key = secret" in local and "access_key_id" not in local  # an empty secret is not set


def test_an_ssh_key_secret_becomes_a_private_key_file_of_the_remote(published, tmp_path):
    runner = clone(published[0], tmp_path / "runner")
    shutil.rmtree(runner / DATA, ignore_errors=True)
    dvc(runner, "remote", "modify", "--local", "storage", "url", "ssh://127.0.0.1:1/qgate")
    inputs(runner, {"DVC_SSH_PRIVATE_KEY": "-----BEGIN KEY-----"})
    key = runner / ".dvc/tmp/remote_keyfile"
    assert key.read_text() == "-----BEGIN KEY-----\n" and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert f"keyfile = {key}" in (runner / ".dvc/config.local").read_text()
    assert git(runner, "status", "--porcelain") == ""  # the key and the local config stay out of git


def test_an_unknown_stage_is_one_line():
    from dvc.repo import Repo

    from qgate.errors import QgateError
    from qgate.inputs import external_inputs

    with Repo(str(ROOT)) as repo, pytest.raises(QgateError, match="^dvc.yaml: no stage named exprot$"):
        external_inputs(repo, ("export", "exprot"))
