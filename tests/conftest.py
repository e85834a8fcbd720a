"""Shared fixtures: a tiny project (params + synthetic data) in tmp_path and an untrained tiny detector."""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as opset
import pytest
import yaml

from qgate import offline
from qgate.paste import WIDTH
from qgate.runtimes import THREADS_VARIABLE

ROOT = Path(__file__).resolve().parent.parent
DEMO_CLASSES = ["ellipse", "rectangle", "triangle", "star"]

offline.configure()

# Each parallel lane gets its share of the CPUs, for its models and for torch's, OpenCV's and OpenBLAS's thread
# pools (stages and their subprocesses inherit it): both lanes on every core at once ran slower than on one core
# each (docs/testing.md). Outputs do not depend on it.
LANE_THREAD_VARIABLES = (THREADS_VARIABLE, "OMP_NUM_THREADS", "OPENCV_FOR_THREADS_NUM", "OPENBLAS_NUM_THREADS")
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    for variable in LANE_THREAD_VARIABLES:
        os.environ.setdefault(variable, str(max(1, len(os.sched_getaffinity(0)) // workers)))

CLUSTER_FIXTURES = {"ray_cluster", "client_cluster", "dying_client_servers"}
MODEL_FIXTURES = {"tiny_weights"}  # and everything built on it (exported_project, quantized_project, ...)
CLUSTER_TIMEOUT_S = 300  # Ray's own joins and waits are bounded by compute.timeout_s (120 s in these tests)
# Minutes of test time of the longest lanes (summed --junitxml times at 05526bf on the AMD EPYC without avx_vnni, the
# budget class; docs/testing.md). xdist hands lanes out in the order the items come (`--no-loadscope-reorder`, the
# Makefile): longest first, a worker that finishes one takes the next, which balances two workers within minutes.
# A lane missing here keeps its file order after these; a stale figure costs balance, never coverage.
LANE_MINUTES = {"demo": 19.2, "test_families": 8.2, "test_reference": 5.1, "test_task_pipelines": 4.3, "ray": 4.2,
                "test_onnxruntime": 2.2, "test_tune": 1.7, "test_gate_semantics": 1.5, "test_crash": 1.2}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook turns each xdist_group into the lane it runs in
def pytest_collection_modifyitems(items):
    """Tier marks from what a test uses: `cluster` when it starts Ray, `model` when it builds a tiny model; and the
    lane each test runs in under `make test` (pytest-xdist, `--dist loadgroup`): a test shares a worker with every
    other test of its file (module fixtures are built once); everything on the demo's pipeline outputs shares one
    lane (`demo_checkout` is built once), and every other Ray test another (`ray`): their waits for Ray's own
    timeouts overlap the other lane's work instead of lengthening the demo's, the longest. Under xdist, the longest
    lanes come first (`LANE_MINUTES`)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        ray = used & CLUSTER_FIXTURES or item.get_closest_marker("cluster")
        lane = "demo" if "demo_checkout" in used else "ray" if ray else item.module.__name__
        if not item.get_closest_marker("xdist_group"):  # a test may name its lane (a fixture it reaches at run time)
            item.add_marker(pytest.mark.xdist_group(lane))
        if ray:
            item.add_marker(pytest.mark.cluster)
            if not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(CLUSTER_TIMEOUT_S))
        if used & MODEL_FIXTURES:
            item.add_marker(pytest.mark.model)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one process keeps file order: its module fixtures are built once
        items.sort(key=lambda item: -LANE_MINUTES.get(item.get_closest_marker("xdist_group").args[0], 0.0))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `pytest -p no:xdist` must still run
def pytest_xdist_node_collection_finished(node, ids):
    """Under `--dist loadgroup`, stop where pytest-xdist did not put a test in its lane: it does so by renaming the
    test, which pytest 9.2 ignores (pytest-dev/pytest-xdist#1386; requirements.txt pins pytest 9.1), and then every
    worker would build every shared fixture again."""
    lost = [nodeid for nodeid in ids if "@" not in nodeid]
    if node.config.getvalue("dist") == "loadgroup" and lost:
        pytest.exit(f"pytest-xdist put {len(lost)} tests in no lane, e.g. {lost[0]} (pytest-dev/pytest-xdist#1386): "
                    "pin pytest 9.1, or `make test TEST_WORKERS=0`", returncode=4)


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture(scope="session", autouse=True)
def checkout_left_as_it_was():
    """`make test` must not change the checkout: a user who runs the tests and commits must not commit their output."""
    before = _git_status()
    yield
    after = _git_status()
    assert after == before, f"the test suite changed the checkout:\n{after}"


def venv_env() -> dict[str, str]:
    """The environment with the project's .venv first on PATH (dvc, make's tools)."""
    return {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def working_tree_copy(dest: Path) -> Path:
    """The checkout's working tree (tracked and untracked files, not ignored ones) as a new git repository in
    `dest`, sharing this checkout's .venv: the pipeline tests run DVC there, never in the checkout itself."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=qgate", "-c", "user.email=qgate@localhost",
                                                    "commit", "-qm", "working tree under test"]):
        subprocess.run(["git", *command], cwd=dest, check=True, capture_output=True)
    return dest


def gate_own_model(dest: Path, recipe: dict) -> tuple[Path, subprocess.CompletedProcess]:
    """A working-tree copy in `dest` with `recipe` ({section: {key: value}}) applied to params.yaml, after
    `make gate` (the README's own-model recipe, end to end)."""
    checkout = working_tree_copy(dest)
    params = yaml.safe_load((checkout / "params.yaml").read_text())
    for section, values in recipe.items():
        params.setdefault(section, {}).update(values)
    (checkout / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    done = subprocess.run(["make", "gate"], cwd=checkout, capture_output=True, text=True, timeout=3600)
    print(done.stdout[-4000:])
    return checkout, done


@pytest.fixture(scope="session")
def demo_checkout(tmp_path_factory) -> Path:
    """A copy of the checkout after the real `dvc repro` of the demo pipeline. The demo's model is in git: demo_data
    draws the same bytes on every CPU, so demo_train is current and nothing trains (checked first, in seconds).
    CI time: QUICK_BENCHMARK and QUICK_ROBUSTNESS, appended to params.yaml as text (its comments stay): the default
    run lengths and severities cost ~80 s more here and prove nothing about the pipeline the short ones do not. Two 1-s pairs on a loaded machine
    resolve no speed-up, and the demo's differs by CPU (2.3x on the EPYC without avx_vnni; 1.36 [1.23, 1.50] with
    the default runs, 1.19 [0.59, 2.38] with these under the suite's load, on an AMX Xeon): the tests that use
    this checkout are about the pipeline, so its speed gate asks INT8 to be no slower (min_speedup 1.0) and counts
    an undecided interval as passed (test_benchmark and test_gate_semantics judge speed)."""
    first = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]  # under make test: its nodeid ends in @<lane>
    if "@" in first and not first.endswith("@demo"):  # a second lane would build it again: minutes
        pytest.fail(f"{first} reaches demo_checkout outside the demo's lane: mark it pytest.mark.xdist_group('demo')")
    checkout = working_tree_copy(tmp_path_factory.mktemp("checkout"))
    params = checkout / "params.yaml"
    assert not {"benchmark", "robustness"} & set(yaml.safe_load(params.read_text()) or {}), \
        "params.yaml sets benchmark: or robustness: already"
    text = params.read_text()
    assert SPEED_LIMIT in text, f"params.yaml no longer sets '{SPEED_LIMIT}'"
    text = "\n".join("  min_speedup: 1.0\n  inconclusive: pass" if line.startswith(SPEED_LIMIT) else line
                     for line in text.splitlines()) + "\n"
    params.write_text(text + "\n" + yaml.safe_dump({"benchmark": QUICK_BENCHMARK, "robustness": QUICK_ROBUSTNESS},
                                                   sort_keys=False))
    git(checkout, "commit", "-qam", "CI time: short benchmark runs, judged for INT8 no slower than FP32")
    drawn = subprocess.run(["dvc", "repro", "demo_data"], cwd=checkout, env=venv_env(), capture_output=True,
                           text=True, timeout=600)
    assert drawn.returncode == 0, drawn.stdout[-3000:] + drawn.stderr[-3000:]
    status = subprocess.run(["dvc", "status", "--json", "demo_train"], cwd=checkout, env=venv_env(),
                            capture_output=True, text=True, timeout=600)
    if status.returncode or json.loads(status.stdout or "{}"):
        pytest.fail(f"the committed demo model is stale ({status.stdout.strip() or status.stderr[-500:]}): "
                    "`dvc commit demo_data demo_train` when the change does not affect training, else `dvc repro` "
                    "(it trains) and commit models/demo/yolov8n_demo.pt with dvc.lock")
    done = subprocess.run(["dvc", "repro"], cwd=checkout, env=venv_env(), capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Running stage 'demo_train'" not in done.stdout, done.stdout[-3000:]
    return checkout


def demo_data_for(task: str, dest: Path) -> Path:
    """The `demo:` dataset of `task` (what demo_data draws with the checkout's params) in `dest`, its yaml's
    root '.': a folder to hand to a project as its own data."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text()) or {}
    params.setdefault("demo", {})["task"] = task
    project = dest / "project"
    project.mkdir(parents=True)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    done = stage_in_process("demo_data", project)
    assert done.returncode == 0, done.stderr
    data = dest / "data"
    shutil.move(project / "data" / "demo", data)
    spec = yaml.safe_load((data / "demo.yaml").read_text())
    (data / "demo.yaml").write_text(yaml.safe_dump({**spec, "path": "."}, sort_keys=False))
    return data


@dataclasses.dataclass(frozen=True)
class FreshRunner:
    """A fork's fresh clone after every `run:` step of the gate job (tests/runner.py), and where it came from."""

    checkout: Path  # the runner: judged, not to be changed (copy it)
    gate: object  # the gate step (runner.Step): its stdout, returncode
    output: str  # every step's stdout, joined
    env: dict  # the runner's environment
    summary: Path  # $GITHUB_STEP_SUMMARY
    fork_origin: Path  # the fork's bare origin
    remote: Path  # the fork's DVC remote
    upstream: Path  # upstream's checkout (the demo after its pipeline), its origin beside it
    upstream_origin: Path
    weights: Path  # the model the fork judges


@pytest.fixture(scope="session")
def fresh_runner(tmp_path_factory, demo_checkout) -> FreshRunner:
    """A fork of an upstream release judges a model of its own on a fresh runner: the pinned pose demo model and
    the pose demo's data, `dvc add`ed and pushed to the fork's DVC remote; a new clone of the fork's origin (no DVC
    cache) runs every `run:` step of the gate job. Once per session: the workflow test and the pose demo read it."""
    from tests import pinned_models, runner

    work = tmp_path_factory.mktemp("fresh_runner")
    upstream, upstream_origin = work / "upstream", work / "upstream.git"
    runner.publish_upstream(demo_checkout, upstream, upstream_origin)
    data = demo_data_for("pose", work / "pose")
    fork_origin, remote = work / "fork.git", work / "dvc-remote"
    weights = pinned_models.weights("pose")
    # its own quantize settings: with the default range estimator this model fails its box gate (drop 0.017 [0.008,
    # 0.026]); `make tune` chose minmax for it (0.002 [-0.003, 0.007]; docs/tasks.md), pasted as a fork would
    runner.publish_a_fork(upstream_origin, weights, data, work / "fork", fork_origin, remote,
                          promote={"name": "detector-int8", "family": "yolov8n-pose"},
                          quantize={"range_estimator": "minmax"})
    checkout = runner.clone(fork_origin, work / "runner")
    env = runner.runner_env(work / "step_summary.md")
    steps = runner.run_job(runner.jobs()["gate"], checkout, env)
    return FreshRunner(checkout, steps[runner.GATE_STEP], "\n".join(step.stdout for step in steps.values()), env,
                       work / "step_summary.md", fork_origin, remote, upstream, upstream_origin, weights)


# The naive config: the head's decode quantized too, symmetric activations. The demo's model fails the accuracy gate
# with it: tune drops it after 50 images (drop 0.0247 [0.0117, 0.0371] at aeb6d37).
NAIVE_QUANTIZE = {"preset": "performance", "keep_decode_float": False,
                  "ignored_scope": {"names": [], "patterns": [], "types": [], "subgraphs": []}}


@dataclasses.dataclass(frozen=True)
class Tuned:
    """A checkout after `make tune`, and what `make tune` printed."""

    checkout: Path
    stdout: str


@pytest.fixture(scope="session")
def naive_demo(tmp_path_factory, demo_checkout) -> Tuned:
    """A copy of the demo with the naive config current, after `make tune`: DVC re-runs quantize .. autofix under it
    (autofix's search and its prices), then tune races the naive config (c0), which fails, and races it again with
    autofix's float scope (c1), which passes: tune's block is autofix's scope on the naive settings. The autofix
    and tune tests copy it. The speed gate's limit is 1.0 here and no shift is judged: these tests are about
    clean accuracy (autofix and tune judging shifts: tests/test_robustness.py and test_tune_on_a_tiny_model)."""
    project = tmp_path_factory.mktemp("naive") / "demo"
    shutil.copytree(demo_checkout, project, symlinks=True)
    params = yaml.safe_load((project / "params.yaml").read_text())
    space = {"preset": ["performance"], "model_type": ["none"], "fast_bias_correction": [True],
             "range_estimator": ["default"], "subset_size": [300], "keep_decode_float": [False]}
    params |= {"quantize": NAIVE_QUANTIZE, "benchmark": QUICK_BENCHMARK, "tune": {"space": space},
               "autofix": {"price_rounds": 2, "price_seconds": 1},  # CI time: the prices' interval, not precision
               "gates": {**params.get("gates", {}), "min_speedup": 1.0},
               # CI time: autofix and tune score their scope and each passing candidate under every shift, as much
               # as a robustness stage each; the naive config also fails the noise gate
               "robustness": {"shifts": []}}
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    tuned = subprocess.run(["make", "tune"], cwd=project, env=venv_env(), capture_output=True, text=True,
                           timeout=1800)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    return Tuned(project, tuned.stdout)


SAMPLE_PROJECT = ROOT / "docs/sample/project"  # `make sample`'s snapshot: the demo's params and metrics


@pytest.fixture
def project(tmp_path) -> Path:
    """The demo's params and pipeline metrics as `make sample` took them (not the working tree, which a fork's
    own model rewrites); no models, no dataset."""
    shutil.copytree(SAMPLE_PROJECT, tmp_path, dirs_exist_ok=True)
    return tmp_path


def chromium() -> str:
    """The browser, or a skip where it cannot be installed (no apt); a machine with apt must have it."""
    from qgate.browser import find_chromium

    browser = find_chromium()
    if browser:
        return browser
    if shutil.which("apt-get"):
        pytest.fail("no Chromium here: `apt-get install chromium` (.ci/run installs it when missing)")
    pytest.skip("no Chromium and no apt-get to install it")


def stage(name: str, cwd: Path, params: str = "params.yaml") -> subprocess.CompletedProcess:
    """Run `python -m stages.<name>` the way DVC does, in `cwd`; return the finished process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", f"stages.{name}", "--params", params], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def stage_in_process(name: str, cwd: Path) -> subprocess.CompletedProcess:
    """`stages.<name>.main` on `cwd`'s params.yaml in this process, as `stage` reports it (0, or 2 and the
    one-line error on stderr): what the CLI runs, without a fresh interpreter importing torch / NNCF again
    (~1-4 s a stage). For tests that run many models through the stages; `stage` tests the CLI itself."""
    from qgate.errors import QgateError
    from qgate.params import load_params

    module = importlib.import_module(f"stages.{name}")
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        module.main(load_params("params.yaml"))
        return subprocess.CompletedProcess([name], 0, "", "")
    except QgateError as exc:
        return subprocess.CompletedProcess([name], 2, "", f"error: {exc}")
    finally:
        os.chdir(previous)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The last stderr line, where stages print their one-line error."""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


TABLE_ROW = re.compile(r"^((?:accuracy|speed|drift|structure|provenance)_\w+) .*  "
                       r"(pass|FAIL|inconclusive \((?:pass|FAIL)\))$")


def table_results(stdout: str) -> dict[str, str]:
    """The verdict table `qgate.judge` prints: each gate's result column (pass, FAIL, inconclusive (pass|FAIL))."""
    return {match[1]: match[2] for match in map(TABLE_ROW.match, stdout.splitlines()) if match}


def headline(stdout: str) -> str:
    """The verdict's last line before 'report: ...' ('PASS ...' or 'FAIL: ...')."""
    return stdout.split("\n\n")[-1].splitlines()[0]


def verdict_is_consistent(done: subprocess.CompletedProcess) -> bool:
    """`make gate` (or qgate.judge) exits non-zero and its headline says FAIL exactly when its table fails a gate."""
    failed = bool(failed_in_table(done.stdout))
    return done.returncode == (1 if failed else 0) and headline(done.stdout).startswith("FAIL:" if failed else "PASS")


def failed_in_table(stdout: str) -> set[str]:
    """The gates the verdict table counts as failed."""
    return {gate for gate, result in table_results(stdout).items() if result.endswith(("FAIL", "FAIL)"))}


def comment_text(block: str) -> str:
    """A pasteable block's comment lines as one text (qgate.paste wraps them), after checking their width."""
    comments = [line for line in block.splitlines() if line.startswith("#")]
    assert all(len(line) <= WIDTH for line in comments), comments
    return " ".join(line.removeprefix("# ") for line in comments)


def assert_fails_cleanly(name: str, project: Path, fragments: list[str], output: str) -> str:
    """Run stage `name`: exit 2, one error line holding every fragment, no traceback, no `output` file."""
    result = stage(name, project)
    assert result.returncode == 2, result.stderr
    line = error_line(result)
    for fragment in fragments:
        assert fragment in line, line
    assert "Traceback" not in result.stderr
    assert not (project / output).exists()
    return line


def make_dataset(root: Path, images: int = 6, seed: int = 0, classes: int = len(DEMO_CLASSES),
                 task: str = "detect") -> Path:
    """A small synthetic dataset with a val split under `root`, of the first `classes` demo classes, labelled for
    `task` like the demo's; its yaml (a classifier's: its folder of class folders)."""
    import cv2

    from stages.demo_data import DEMO_LABELS, draw_image, label_line

    rng = np.random.default_rng(seed)
    if task == "classify":
        return _class_folders(root, images, rng, classes)
    for split in ("val", "calib"):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(images):
            image, shapes = draw_image(rng, classes, 3, DEMO_LABELS[task].max_overlap, DEMO_LABELS[task].rotated)
            cv2.imwrite(str(root / "images" / split / f"{i}.jpg"), image)
            text = "".join(label_line(shape, task, image.shape[:2]) + "\n" for shape in shapes)
            (root / "labels" / split / f"{i}.txt").write_text(text)
    spec = {"path": ".", "val": "images/val", "calib": "images/calib", "names": dict(enumerate(DEMO_CLASSES[:classes])),
            **DEMO_LABELS[task].yaml}
    (root / "data.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return root / "data.yaml"


def _class_folders(root: Path, images: int, rng: np.random.Generator, classes: int) -> Path:
    """val and calib splits of `images` images of one demo shape each, in the folder of its class (every class has
    a folder, empty or not: Ultralytics' classification layout)."""
    import cv2

    from stages.demo_data import draw_image

    for split in ("val", "calib"):
        for name in DEMO_CLASSES[:classes]:
            (root / split / name).mkdir(parents=True, exist_ok=True)
        made = 0
        while made < images:
            image, shapes = draw_image(rng, classes, 1)
            if shapes:
                cv2.imwrite(str(root / split / DEMO_CLASSES[shapes[0][0]] / f"{made}.jpg"), image)
                made += 1
    return root


# benchmark_app where speed is not what a test is about: the speed gate still judges these pairs (by its interval,
# or by its point when inconclusive). The default (5-s runs, more pairs up to 120 s while the interval is wide)
# cost ~67 s a `make gate` on the demo here, and up to 120 s where pairs are noisy.
QUICK_BENCHMARK = {"seconds": 1, "repeats": 2, "max_seconds": 8}
# the default shifts at their higher severity: each severity is two evaluations of the val split (~8 s on the demo, ~15 s on
# COCO128 at 640 here); the stage's code is the same at one or two
QUICK_ROBUSTNESS = {"severities": [2]}
SPEED_LIMIT = "  min_speedup:"  # the demo's params.yaml line demo_checkout relaxes


def pycocotools_stats(ground_truth: dict, detections: list[dict], iou_type: str = "bbox") -> np.ndarray:
    """pycocotools' own `summarize()` stats of `detections` with its default settings: what qgate must equal."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress and the table
        gt = COCO()
        gt.dataset = ground_truth
        gt.createIndex()
        evaluator = COCOeval(gt, gt.loadRes(detections), iou_type)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return evaluator.stats


def full_params(path: Path = ROOT / "params.yaml") -> dict:
    """Every key of a params file with its value (the file's or qgate's default), as plain YAML data to edit."""
    from qgate.params import as_dict, load_params

    return as_dict(load_params(path))


def write_params(project: Path, weights: Path, dataset: Path, imgsz: int = 128, **overrides) -> Path:
    """params.yaml for a project in `project`, based on the repository's, with paths and overrides applied.

    Overrides are `section__key=value`, e.g. `quantize__subset_size=2`.
    """
    params = full_params()
    params["model"].update(weights=str(weights), dataset=str(dataset), data_dir=str(dataset.parent), imgsz=imgsz)
    params["benchmark"].update(QUICK_BENCHMARK)
    for dotted, value in overrides.items():
        section, key = dotted.split("__")
        params[section][key] = value
    path = project / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_weights(tmp_path_factory) -> Path:
    """An untrained YOLOv8n detection checkpoint with the demo's 4 class names (built, not downloaded)."""
    offline.ultralytics_settings_off()
    from ultralytics import YOLO

    import torch

    folder = tmp_path_factory.mktemp("tiny")
    cfg = yaml.safe_load((Path(__import__("ultralytics").__file__).parent / "cfg/models/v8/yolov8.yaml").read_text())
    cfg["nc"] = len(DEMO_CLASSES)
    (folder / "yolov8n.yaml").write_text(yaml.safe_dump(cfg))  # Ultralytics reads the scale from the file name
    torch.manual_seed(0)  # the same random weights every run
    model = YOLO(str(folder / "yolov8n.yaml"), task="detect")
    model.model.names = dict(enumerate(DEMO_CLASSES))
    model.save(str(folder / "tiny.pt"))
    return folder / "tiny.pt"


@pytest.fixture(scope="session")
def exported_project(tmp_path_factory, tiny_weights) -> Path:
    """A project folder whose tiny model has gone through the real export stage."""
    project = tmp_path_factory.mktemp("project")
    dataset = make_dataset(project / "data")
    write_params(project, tiny_weights, dataset)
    result = stage("export", project)
    assert result.returncode == 0, result.stderr
    return project


def copy_project(source: Path, dest: Path, weights: Path, **overrides) -> Path:
    """A new project in `dest` with `source`'s outputs and dataset, and fresh params with `overrides`."""
    import shutil

    for folder in ("models", "metrics", "artifacts", "data"):
        if (source / folder).exists():
            shutil.copytree(source / folder, dest / folder)
    write_params(dest, weights, dest / "data" / "data.yaml", **overrides)
    return dest


@pytest.fixture(scope="session")
def quantized_project(tmp_path_factory, exported_project, tiny_weights) -> Path:
    """The tiny project after the real baseline and quantize stages."""
    project = copy_project(exported_project, tmp_path_factory.mktemp("quantized"), tiny_weights)
    for name in ("baseline", "quantize"):
        result = stage(name, project)
        assert result.returncode == 0, result.stderr
    return project


def edit_int8(project: Path, edit) -> None:
    """Apply `edit` to the project's INT8 IR in place (planted faults)."""
    path = project / "models" / "int8" / "model_int8.xml"
    model = ov.Core().read_model(path)
    edit(model)
    ov.save_model(model, path.with_name("edited.xml"), compress_to_fp16=False)
    path.with_name("edited.xml").replace(path)
    path.with_name("edited.bin").replace(path.with_suffix(".bin"))


def feeding_quantizer(model, consumer: str):
    """The FakeQuantize right before `consumer`'s activation input."""
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    node = ops[consumer].input_value(0).get_node()
    assert node.get_type_name() == "FakeQuantize", node.get_type_name()
    return node


def scale_range(fq, factor: float) -> None:
    """Multiply a FakeQuantize's input and output range by `factor` (< 1 clips)."""
    for port in range(1, 5):  # input_low, input_high, output_low, output_high
        data = fq.input_value(port).get_node().get_data() * factor
        fq.input(port).replace_source_output(opset.constant(data.astype(np.float32)).output(0))


def plant_range_fault(project: Path, layer: str, factor: float = 0.05) -> None:
    """Shrink the range of the quantizer feeding `layer` (clipping); the planted IR stands in for quantize's."""
    from qgate.io import sha256_file

    edit_int8(project, lambda model: scale_range(feeding_quantizer(model, layer), factor))
    record = json.loads((project / "metrics/quantize.json").read_text())
    record["int8_ir_bin_sha256"] = sha256_file(project / "models/int8/model_int8.bin")
    (project / "metrics/quantize.json").write_text(json.dumps(record))


def judge(project: Path) -> subprocess.CompletedProcess:
    """`python -m qgate.judge` in a checkout copy, with its own code and venv as `make gate` judges; the process."""
    return subprocess.run([str(project / ".venv/bin/python"), "-m", "qgate.judge"], cwd=project, capture_output=True,
                          text=True, timeout=600)


def judged_here(project: Path) -> subprocess.CompletedProcess:
    """`python -m qgate.judge` on a project of stage outputs only (a test's tmp folder): this checkout's gates and
    code, this interpreter; the process."""
    if not (project / "gates").exists():
        shutil.copytree(ROOT / "gates", project / "gates")
    return subprocess.run([sys.executable, "-m", "qgate.judge"], cwd=project, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def divergence_and_ranking(project: Path) -> tuple[dict, list[str], dict]:
    """Run the divergence and sensitivity stages in `project`: divergence metrics, divergent layers, ranking metrics."""
    for name in ("divergence", "sensitivity"):
        done = stage(name, project)
        assert done.returncode == 0, done.stderr[-3000:]
    with open(project / "reports/divergence.csv") as handle:
        divergent = [row["name"] for row in csv.DictReader(handle) if row["divergent"] == "1"]
    return (json.loads((project / "metrics/divergence.json").read_text()), divergent,
            json.loads((project / "metrics/sensitivity.json").read_text()))


def git(repo: Path, *args: str) -> str:
    """`git args` in `repo` as a test user; its stdout (a failure fails the test with git's message)."""
    done = subprocess.run(["git", "-c", "user.name=qgate", "-c", "user.email=qgate@localhost", *args], cwd=repo,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path, demo_checkout) -> Path:
    """A copy of the demo checkout after `dvc repro`, its outputs committed, a bare origin and a DVC remote."""
    repo = tmp_path / "repo"
    shutil.copytree(demo_checkout, repo, symlinks=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(tmp_path / "origin.git")], check=True)
    git(repo, "remote", "add", "origin", str(tmp_path / "origin.git"))
    dvc(repo, "remote", "add", "-d", "local", str(tmp_path / "dvc-remote"))
    dvc(repo, "config", "core.analytics", "false")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pipeline outputs, DVC remote")
    dvc(repo, "push", "-q")
    git(repo, "push", "-q", "origin", "HEAD:main")
    return repo


def dvc(repo: Path, *args: str) -> str:
    """The venv's `dvc args` in `repo`; its stdout (a failure fails the test with DVC's output)."""
    done = subprocess.run(["dvc", *args], cwd=repo, env=venv_env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def assert_overlays_paint_every_layer(project: Path, viewed: Path, monkeypatch) -> None:
    """`make view`'s overlays on the `viewed` ONNX graph: every layer of the divergence table is on a node Model
    Explorer's ONNX adapter builds, painted with the SQNR of the layer that writes the node's output."""
    from model_explorer.utils import convert_adapter_response
    from model_explorer_onnx.main import ONNXAdapter

    from qgate import view
    from qgate.node_overlays import OVERLAYS, ViewedGraph, layer_nodes

    monkeypatch.chdir(project)
    assert view.main(str(project / "params.yaml"), files_only=True) == 0
    # the files the report's graph link names (`view.graph_link`, from OVERLAYS) are the ones `make view` writes
    assert sorted((project / view.OVERLAY_DIR).iterdir()) == sorted(project / view.overlay_file(title)
                                                                    for title in OVERLAYS)
    sqnr = json.loads((project / view.OVERLAY_DIR / "SQNR_dB.json").read_text())["results"]
    graph = ViewedGraph(viewed)
    with open(project / "reports/divergence.csv") as handle:
        rows = list(csv.DictReader(handle))
    node_of = layer_nodes(graph, rows)
    assert len(node_of) == len({r["name"] for r in rows}), [r["name"] for r in rows if r["name"] not in node_of]
    written = {node_of[r["name"]]: r for r in rows}  # the last layer on a node writes its output
    assert {node: value["value"] for node, value in sqnr.items()} == {
        node: round(float(r["sqnr_db"]), 2) for node, r in written.items()}
    explorer = convert_adapter_response(ONNXAdapter().convert(str(graph.path), {}))["graphs"][0]
    assert set(sqnr) <= {node["id"] for node in explorer["nodes"]}
