"""`compute.executor: ray` on a real two-node Ray cluster on 127.0.0.1: the same results as local, and its faults."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from qgate.executors import open_executor
from qgate.errors import QgateError
from qgate.evaluator import Predictor, prediction_job, shards
from qgate.heads import Postprocess
from qgate.tasks import Detect
from qgate.params import ComputeParams, load_params
from qgate.runtimes.openvino import OpenVINO
from qgate.runtimes.openvino.inference import PortableModel
from tests.conftest import ROOT, assert_fails_cleanly, copy_project, error_line, stage

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# Ray rewrites 127.0.0.1 in an address to this machine's network IP (where a loopback-only cluster does not
# listen) unless it is told this is no multi-machine cluster; set before Ray is imported, inherited by the stages.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
TIMING = {"seconds"}  # wall-clock metrics; every other one must match


@pytest.fixture(scope="module")
def ray_cluster():
    """A head and one more node, one CPU each, on 127.0.0.1; shut down after the module's tests."""
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 200 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes(timeout=60)
        yield cluster.address
    finally:
        cluster.shutdown()


def ray_compute(address: str, **overrides) -> dict:
    """`compute:` overrides (for copy_project) that run on the cluster at `address`."""
    settings = {"executor": "ray", "address": address, "shard_images": 2, "timeout_s": 120, **overrides}
    return {f"compute__{key}": value for key, value in settings.items()}


def _run(project: Path, *names: str) -> None:
    for name in names:
        result = stage(name, project)
        assert result.returncode == 0, result.stderr[-3000:]


def _metrics(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in TIMING}


def test_baseline_and_int8_eval_on_ray_match_local(tmp_path, quantized_project, tiny_weights, ray_cluster):
    local = copy_project(quantized_project, tmp_path / "local", tiny_weights)
    remote = copy_project(quantized_project, tmp_path / "ray", tiny_weights, **ray_compute(ray_cluster))
    _run(local, "baseline", "int8_eval")
    _run(remote, "baseline", "int8_eval")
    for name in ("artifacts/baseline_detections.json", "artifacts/int8_detections.json",
                 "metrics/baseline_per_class.json", "metrics/int8_per_class.json", "reports/bad_cases.csv"):
        assert (remote / name).read_bytes() == (local / name).read_bytes(), name
    assert json.loads((local / "artifacts/baseline_detections.json").read_text()), "no detection to compare"
    for name in ("metrics/baseline.json", "metrics/int8.json"):
        assert _metrics(remote / name) == _metrics(local / name), name


SHIFTED = "dark"  # the shift tune judges each passing candidate under (one severity: each is two evaluations)
# tune.csv's racing and shift columns (the speed ones are benchmark_app's, on the driver)
RACED = ("candidate", "status", "why", "images", "evaluations", "map50_95_drop", "map50_95_drop_ci_low",
         "map50_95_drop_ci_high", f"shift_{SHIFTED}_drop", f"shift_{SHIFTED}_drop_ci_low",
         f"shift_{SHIFTED}_drop_ci_high")


def raced(row: dict) -> dict:
    """A tune.csv row's racing columns; a passing candidate's why is about speed (benchmark_app on the driver, one
    noisy measurement per run), so it is left out."""
    return {key: row[key] for key in RACED if not (key == "why" and row["status"] == "passed")}


def test_tune_races_the_same_candidates_on_ray(tmp_path, quantized_project, tiny_weights, ray_cluster):
    """tune's INT8 models exist only in memory and are predicted a subset at a time: every candidate scores the
    same on the cluster, subset by subset, stops for the same reason, and has the same drop under a shift (its
    shifted copies of the val images are predicted on the cluster too)."""
    import csv

    # two models scored (one quantizing to a model scored already is tune's own test: test_tune.py); one shift at
    # one severity (CI time: the defaults are 8 more evaluations a candidate, the same code)
    tune = {"tune__space": {"preset": ["mixed", "performance"], "model_type": ["none"],
                            "fast_bias_correction": [True], "range_estimator": ["default"],
                            "subset_size": [300], "keep_decode_float": [True]}, "tune__first_images": 2,
            "robustness__shifts": [SHIFTED], "robustness__severities": [2]}
    local = copy_project(quantized_project, tmp_path / "local", tiny_weights, **tune)
    remote = copy_project(quantized_project, tmp_path / "ray", tiny_weights, **tune, **ray_compute(ray_cluster))
    tables = []
    for project in (local, remote):
        _run(project, "tune")
        with open(project / "reports/tune.csv") as handle:
            tables.append([raced(row) for row in csv.DictReader(handle)])
    assert tables[0] == tables[1] and [row["status"] for row in tables[0]] == ["passed", "passed"]
    assert all(row[f"shift_{SHIFTED}_drop"] != "" for row in tables[0])  # each was judged under the shift


def test_an_autofix_candidate_evaluates_the_same_on_ray(quantized_project, ray_cluster):
    """Autofix's models exist only in memory (reverted groups): they travel as IR bytes and score the same."""
    import openvino as ov

    from qgate.evaluator import evaluate
    from qgate.runtimes.openvino.quantizer_groups import quantizer_groups, revert

    params = load_params(quantized_project / "params.yaml")
    core = ov.Core()
    fp32, int8 = (core.read_model(quantized_project / "models" / name)
                  for name in ("export/model_fp32.xml", "int8/model_int8.xml"))
    groups = quantizer_groups(int8)
    candidate = revert(int8, fp32, groups, {0, len(groups) - 1})
    images = sorted((quantized_project / "data/images/val").glob("*.jpg"))
    names = tuple(json.loads((quantized_project / "metrics/export_record.json").read_text())["class_names"])
    local = evaluate(OpenVINO(), candidate, images, names, params.model.imgsz)
    with open_executor(ComputeParams("ray", ray_cluster, None, 1, 2, 120)) as executor:
        remote = evaluate(OpenVINO(), candidate, images, names, params.model.imgsz, executor=executor, shard_images=2)
    assert local.detections and remote.detections == local.detections
    assert (remote.metrics, remote.per_class) == (local.metrics, local.per_class)


def test_the_local_executor_never_imports_ray(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path / "p", tiny_weights)
    code = ("import sys; from qgate.params import load_params; from stages import baseline; "
            "baseline.main(load_params('params.yaml')); print('ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=project, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_a_killed_worker_has_its_shards_retried(quantized_project, ray_cluster, caplog):
    params = load_params(quantized_project / "params.yaml")
    images = sorted((quantized_project / "data/images/val").glob("*.jpg")) * 10  # enough shards to outlive a kill
    predictor = Predictor(OpenVINO(), (PortableModel(quantized_project / "models/int8/model_int8.xml"),), "f32",
                          params.model.imgsz, Postprocess(), Detect())
    compute = ComputeParams(executor="ray", address=ray_cluster, workers=2, cpus_per_worker=1, shard_images=1,
                            timeout_s=120)
    with open_executor(ComputeParams("local", None, None, 1, 1, 60)) as executor:
        expected = list(executor.run(prediction_job(predictor), shards(images, False, 1)))
    with caplog.at_level(logging.WARNING, logger="qgate.cluster"), open_executor(compute) as executor:
        results = executor.run(prediction_job(predictor), shards(images, True, 1))
        got = [next(results)]
        os.kill(executor.pids[-1], signal.SIGKILL)  # mid-run: the other shards are queued or running
        got += list(results)
        assert len(executor.actors) == 1
    assert "a worker died" in caplog.text
    assert [r for shard in got for r in shard] == expected[0]


@pytest.mark.cluster
def test_a_cluster_whose_workers_are_all_gone_fails_in_one_line(quantized_project):
    """Every worker node removed mid-run: the replacements never start, and the run ends in one line, in time."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    try:
        worker_node = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes(timeout=60)
        params = load_params(quantized_project / "params.yaml")
        images = sorted((quantized_project / "data/images/val").glob("*.jpg")) * 10
        predictor = Predictor(OpenVINO(), (PortableModel(quantized_project / "models/int8/model_int8.xml"),), "f32",
                              params.model.imgsz, Postprocess(), Detect())
        compute = ComputeParams("ray", cluster.address, None, 1, 1, 15)
        with pytest.raises(QgateError, match="is gone or stuck") as failure, open_executor(compute) as executor:
            results = executor.run(prediction_job(predictor), shards(images, True, 1))
            next(results)
            cluster.remove_node(worker_node)
            list(results)
        assert "\n" not in str(failure.value) and "compute.executor: local" in str(failure.value)
    finally:
        cluster.shutdown()


# Python runs sitecustomize at start-up: on the head's PYTHONPATH, this makes the first `deaths_left` Ray Client servers
# the head forks for a driver die before they start, as ray-project/ray#63202's race does at random.
CLIENT_SERVER_DIES = """
import os, pathlib, sys
if "--mode=specific-server" in sys.argv:
    left = pathlib.Path(__file__).with_name("deaths_left")
    if int(left.read_text()) > 0:
        left.write_text(str(int(left.read_text()) - 1))
        os._exit(1)
"""


@contextlib.contextmanager
def client_head():
    """A head with a Ray Client server (`ray://`, how a CI runner outside the cluster joins); it and its address."""
    from ray.cluster_utils import Cluster

    port = _free_port()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False, "ray_client_server_port": port})
    try:
        deadline = time.monotonic() + 60
        while True:  # the client server comes up a few seconds after the head
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the Ray Client server did not start"
                time.sleep(0.5)
        yield cluster, f"ray://127.0.0.1:{port}"
    finally:
        cluster.shutdown()


@pytest.fixture
def client_cluster():
    """A head with a Ray Client server; it and its address."""
    with client_head() as head:
        yield head


@pytest.fixture
def dying_client_servers(tmp_path, monkeypatch):
    """A function that starts a Ray Client head whose first `deaths` servers for a driver die starting."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(CLIENT_SERVER_DIES)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    # the head waits this long for a dead server, once for the driver's data and 5 times for its logs (30 s each)
    monkeypatch.setenv("RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S", "5")

    def start(deaths: int):
        (hook / "deaths_left").write_text(str(deaths))
        return client_head()
    return start


def _demo_like(project: Path, copies: int) -> tuple[list[Path], Predictor]:
    params = load_params(project / "params.yaml")
    images = sorted((project / "data/images/val").glob("*.jpg")) * copies
    return images, Predictor(OpenVINO(), (PortableModel(project / "models/int8/model_int8.xml"),), "f32",
                             params.model.imgsz, Postprocess(), Detect())


def test_a_ray_client_address_gives_the_local_detections(quantized_project, client_cluster):
    images, predictor = _demo_like(quantized_project, 2)
    with open_executor(ComputeParams("local", None, None, 1, 1, 60)) as executor:
        expected = list(executor.run(prediction_job(predictor), shards(images, False, 1)))[0]
    with open_executor(ComputeParams("ray", client_cluster[1], None, 1, 2, 120)) as executor:
        got = [r for shard in executor.run(prediction_job(predictor), shards(images, True, 2)) for r in shard]
    assert got == expected


def test_a_ray_client_server_that_dies_starting_is_started_again(quantized_project, dying_client_servers, caplog):
    """The head's per-driver server dying as it starts (ray-project/ray#63202's race, made certain here): qgate joins
    again and gets the local detections. ~35 s of it is Ray's own wait for the dead server, which no setting of
    Ray's shortens safely; nothing cheaper makes a real head lose one."""
    images, predictor = _demo_like(quantized_project, 1)
    with open_executor(ComputeParams("local", None, None, 1, 1, 60)) as executor:
        expected = list(executor.run(prediction_job(predictor), shards(images, False, 1)))[0]
    with dying_client_servers(1) as (_, address), caplog.at_level(logging.WARNING, logger="qgate.cluster"), \
            open_executor(ComputeParams("ray", address, None, 1, 2, 60)) as executor:
        got = [r for shard in executor.run(prediction_job(predictor), shards(images, True, 2)) for r in shard]
    assert got == expected
    assert "died starting" in caplog.text  # once, or more where Ray's own race killed a server too


def test_a_ray_client_server_that_keeps_dying_fails_in_one_line(quantized_project, dying_client_servers,
                                                                monkeypatch):
    """When every join's server dies, the run ends in one line naming compute.address and what to do: one attempt
    allowed and one death (~35 s of Ray's waiting, as above), the limit rather than how high it is."""
    import qgate.cluster  # after this module has set Ray's environment

    # the limit, not how high it is: each death costs ~35 s; a join again after a death is the test above
    monkeypatch.setattr(qgate.cluster, "JOIN_ATTEMPTS", 1)
    with dying_client_servers(1) as (_, address), pytest.raises(QgateError) as failure, \
            open_executor(ComputeParams("ray", address, None, 1, 2, 60)):
        pass
    message = str(failure.value)
    assert "compute.address" in message and "died starting 1 times" in message and "restart the head" in message
    assert "\n" not in message


def test_a_ray_client_that_loses_the_head_fails_in_one_line(quantized_project, client_cluster, monkeypatch):
    """The one test of a Ray Client (ray://) session whose head goes away mid-job: the executor turns Ray's
    connection loss into one line instead of hanging. 10 s alone, 17 to 94 s under `make test` beside the other
    lane (Ray's client notices the loss slowly on a busy machine; the no-avx_vnni EPYC, docs/testing.md)."""
    monkeypatch.setenv("RAY_CLIENT_RECONNECT_GRACE_PERIOD", "3")  # Ray's default waits 30 s
    cluster, address = client_cluster
    images, predictor = _demo_like(quantized_project, 20)
    with pytest.raises(QgateError, match="is gone or stuck .connection lost") as failure, \
            open_executor(ComputeParams("ray", address, None, 1, 1, 60)) as executor:
        results = executor.run(prediction_job(predictor), shards(images, True, 1))
        next(results)
        cluster.shutdown()
        list(results)
    assert "\n" not in str(failure.value)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_cluster_fails_cleanly(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path / "p", tiny_weights,
                           **ray_compute(f"127.0.0.1:{_free_port()}"))
    (project / "metrics/baseline.json").unlink()
    assert_fails_cleanly("baseline", project, ["compute.address", "nothing answers", "compute.address: null"],
                         "metrics/baseline.json")


def test_more_workers_than_the_cluster_has_cpus(tmp_path, quantized_project, tiny_weights, ray_cluster):
    project = copy_project(quantized_project, tmp_path / "p", tiny_weights, **ray_compute(ray_cluster, workers=3))
    (project / "metrics/baseline.json").unlink()
    line = assert_fails_cleanly("baseline", project, ["compute.workers", "has 2"], "metrics/baseline.json")
    assert "lower them or add nodes" in line


@pytest.mark.parametrize("key, value, fragment", [
    ("executor", "spark", "'compute.executor' is 'spark'"),
    ("address", "head-node", "'compute.address' is 'head-node'"),
    ("workers", 0, "'compute.workers' is 0"),
    ("shard_images", 0, "'compute.shard_images' is 0"),
    ("timeout_s", 0, "'compute.timeout_s' is 0"),
])
def test_bad_compute_params(tmp_path, key, value, fragment):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"compute": {key: value}}))
    with pytest.raises(QgateError, match=fragment):
        load_params(tmp_path / "params.yaml")


@pytest.mark.slow
@pytest.mark.timeout(2400)  # may build the demo pipeline first
def test_demo_sensitivity_and_evaluations_on_ray_match_local(tmp_path, demo_checkout, ray_cluster):
    """The trained demo model: baseline, int8_eval and the sensitivity ranking, on the cluster, equal the pipeline's."""
    params = yaml.safe_load((demo_checkout / "params.yaml").read_text())
    params["compute"] = {"executor": "ray", "address": ray_cluster, "shard_images": 8, "timeout_s": 300}
    project = tmp_path / "project"  # the demo's inputs, its own outputs: the stages write to fixed paths
    for name in ("models", "metrics", "artifacts", "reports"):
        shutil.copytree(demo_checkout / name, project / name, ignore=shutil.ignore_patterns("benchmark"))
    (project / "data").symlink_to(demo_checkout / "data")
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    demo = load_params(demo_checkout / "params.yaml")
    outputs = {"baseline": ("metrics", "per_class", "detections"),
               "int8_eval": ("metrics", "per_class", "detections", "bad_cases"),
               "sensitivity": ("metrics", "csv", "plot")}
    for name, keys in outputs.items():
        for key in keys:
            (project / getattr(getattr(demo, name), key)).unlink()
        result = stage(name, project)
        assert result.returncode == 0, error_line(result) + result.stderr[-2000:]
        for key in keys:
            path = getattr(getattr(demo, name), key)
            got, want = project / path, demo_checkout / path
            if key == "metrics":
                assert _metrics(got) == _metrics(want), name
            else:
                assert got.read_bytes() == want.read_bytes(), f"{name}.{key}"


def test_a_worker_share_of_cpus_is_not_pinned_and_computes_the_same(quantized_project):
    """Pinned, two 1-thread workers on one machine both took core 0 (half speed); the outputs must not move."""
    import numpy as np

    from qgate.runtimes.openvino.inference import compile_model, head_outputs

    ir = quantized_project / "models/int8/model_int8.xml"
    shared, whole = compile_model(ir, "f32", threads=1), compile_model(ir, "f32")
    assert shared.get_property("ENABLE_CPU_PINNING") is False and shared.get_property("INFERENCE_NUM_THREADS") == 1
    size = shared.input(0).get_partial_shape()[1].get_length()
    images = [np.random.default_rng(i).integers(0, 256, (1, size, size, 3), dtype=np.uint8) for i in range(4)]
    assert all(np.array_equal(a, b) for a, b in zip(head_outputs(shared, images), head_outputs(whole, images)))
