"""A fork survives upstream releases: it judges its own model, commits its own metrics, then merges an upstream
commit that changes a default, code and the demo's metrics without a conflict, and `make gate` runs after."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import QUICK_BENCHMARK, ROOT, dvc, git

pytestmark = pytest.mark.slow


def make(checkout: Path, target: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["make", target], cwd=checkout, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def changed(checkout: Path, since: str, until: str) -> set[str]:
    return set(git(checkout, "diff", "--name-only", since, until).split())


def test_a_fork_with_its_own_metrics_merges_an_upstream_release_and_gates(repo, tmp_path):
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(tmp_path / "origin.git"), str(fork))
    (fork / ".venv").symlink_to(ROOT / ".venv")
    dvc(fork, "pull", "-q")  # the pipeline's outputs, from the DVC remote the upstream commit names
    base = git(fork, "rev-parse", "HEAD").strip()

    # the fork judges its own detector (the demo's weights under its own name, in DVC) and commits the verdict
    own = fork / "models" / "own" / "detector.pt"
    own.parent.mkdir(parents=True)
    shutil.copy(fork / "models/demo/yolov8n_demo.pt", own)
    dvc(fork, "add", "-q", "models/own/detector.pt")
    params = yaml.safe_load((fork / "params.yaml").read_text())
    params["model"]["weights"] = "models/own/detector.pt"
    params["promote"]["name"] = "detector-int8"
    params["benchmark"] = QUICK_BENCHMARK
    (fork / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    make(fork, "gate")
    git(fork, "add", "-A")
    git(fork, "commit", "-qm", "our detector's verdict")

    # upstream's next commit: a new default, a code change and the demo's metrics re-measured
    defaults = repo / "qgate" / "defaults.yaml"
    defaults.write_text(defaults.read_text().replace("  images: 8 ", "  images: 6 ", 1))  # divergence.images
    report = repo / "qgate" / "report.py"
    report.write_text(report.read_text() + "\n# upstream's next release\n")
    make(repo, "gate")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "upstream: divergence.images 6")
    git(repo, "push", "-q", "origin", "HEAD:main")
    git(fork, "fetch", "-q", "origin")
    upstream = changed(fork, base, "origin/main")
    assert {"qgate/defaults.yaml", "qgate/report.py", "metrics/divergence.json", "dvc.lock"} <= upstream, upstream
    assert "dvc.lock" in changed(fork, base, "HEAD")  # changed on both sides: a conflict without the driver

    make(fork, "setup")  # defines the `ours` merge driver .gitattributes names
    git(fork, "merge", "-q", "--no-edit", "origin/main")  # fails the test on a conflict
    assert yaml.safe_load((fork / "params.yaml").read_text())["model"]["weights"] == "models/own/detector.pt"
    assert json.loads((fork / "metrics/export_record.json").read_text())["weights"] == "models/own/detector.pt"
    assert "  images: 6 " in (fork / "qgate/defaults.yaml").read_text()  # upstream's code and defaults arrived
    assert (fork / "qgate/report.py").read_text().endswith("# upstream's next release\n")

    after = make(fork, "gate")
    assert "Running stage 'divergence'" in after.stdout  # the new default re-runs the stage that reads it ...
    assert "Running stage 'export'" not in after.stdout  # ... and not the fork's model's export
    assert "PASS" in after.stdout
