"""The divergence stage on the tiny quantized model: real capture, a planted fault, bad input."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import openvino.opset13 as opset
import pytest

from qgate.browser import open_page
from qgate.histograms import share_at_bounds
from qgate.node_overlays import ViewedGraph, layer_nodes
from qgate.page import anchor
from qgate.report_layers import LayerPictures, neighbourhood_caption
from tests.conftest import (DEMO_CLASSES, ROOT, assert_fails_cleanly, chromium, copy_project, edit_int8,
                            feeding_quantizer, make_dataset, scale_range, stage, write_params)

PLANTED = "/model.1/conv/Conv/WithoutBiases"


def _run(project):
    result = stage("divergence", project)
    assert result.returncode == 0, result.stderr
    with open(project / "reports" / "divergence.csv") as handle:
        rows = list(csv.DictReader(handle))
    return json.loads((project / "metrics" / "divergence.json").read_text()), rows, result


def test_divergence_report(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights)
    metrics, rows, _ = _run(project)
    assert metrics["layers"] == len(rows) > 100
    assert metrics["images"] == 6  # make_dataset writes 6 val images; default divergence.images is 8: clamped
    assert metrics["nan_inf_layers"] == 0
    assert metrics["instrumentation_sqnr_db"] > metrics["output_sqnr_db"] - 40
    assert [int(r["index"]) for r in rows] == list(range(len(rows)))
    assert (project / "reports" / "divergence.md").read_text().startswith("Output SQNR")
    with open(project / "reports" / "divergence_sqnr.csv") as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)


def test_planted_clipping_fault_is_found(tmp_path, quantized_project, tiny_weights):
    # The untrained tiny model's own worst local drop is ~14 dB: at 20 dB it is healthy, nothing is flagged
    # (real models are checked with the defaults: tests/test_autofix.py, test_reference.py)
    healthy = copy_project(quantized_project, tmp_path / "healthy", tiny_weights, divergence__local_drop_db=20)
    assert _run(healthy)[0]["divergent_layers"] == 0
    project = copy_project(quantized_project, tmp_path / "planted", tiny_weights, divergence__local_drop_db=20)
    edit_int8(project, lambda model: scale_range(feeding_quantizer(model, PLANTED), 0.05))
    metrics, rows, _ = _run(project)
    planted = next(r for r in rows if r["name"] == PLANTED)
    assert metrics["first_divergent_layer"] == PLANTED and planted["divergent"] == "1", planted
    assert [r["name"] for r in rows if r["divergent"] == "1"] == [PLANTED]
    assert float(planted["clip_fraction"]) > 0.3
    assert planted["advice"].startswith("clipping-dominated"), planted["advice"]
    ranked = sorted((r for r in rows if r["inherits_error"] == "1"), key=lambda r: -float(r["local_drop_db"]))
    assert ranked[0]["name"] == PLANTED
    # its histogram: INT8 piles on the narrowed range's bounds what FP32 has beyond them; unplanted, hardly any
    clipped, unclipped = (share_at_bounds(_histograms(p)[planted["input_quantizer"]]) for p in (project, healthy))
    piled, beyond = clipped["int8_at_low"] + clipped["int8_at_high"], clipped["fp32_below"] + clipped["fp32_above"]
    assert piled > 0.3 and abs(piled - float(planted["clip_fraction"])) < 0.05, (clipped, planted["clip_fraction"])
    assert abs(beyond - float(planted["clip_fraction"])) < 0.05, (clipped, planted["clip_fraction"])
    assert unclipped["int8_at_low"] + unclipped["int8_at_high"] < piled / 10, unclipped
    # the report's pictures: the layer's neighbourhood holds it and the ops on either side, its name links the histogram
    pictures = LayerPictures(rows, _histograms(project))
    around = pictures.graph.neighbourhood(PLANTED)
    assert PLANTED in around and planted["worst_input"] in around
    assert any(PLANTED in r["inputs"].split() and r["name"] in around for r in rows)
    assert [caption for caption, _, _ in pictures.neighbourhood(PLANTED)] == [neighbourhood_caption(PLANTED)]
    (caption, svg, _), = pictures.histogram(PLANTED)
    assert pictures.link(PLANTED) == f"[`{PLANTED}`](#{anchor(caption)})" and svg.startswith("<svg")


def _histograms(project) -> dict:
    return json.loads((project / "reports" / "divergence_histograms.json").read_text())


def test_nan_is_reported_not_fatal(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights)

    def poison(model):
        fq = feeding_quantizer(model, PLANTED)
        high = fq.input_value(4).get_node().get_data()
        fq.input(4).replace_source_output(opset.constant(np.full_like(high, np.nan)).output(0))

    edit_int8(project, poison)
    metrics, rows, _ = _run(project)
    assert metrics["nan_inf_layers"] > 0
    flagged = [r for r in rows if int(r["nan_inf"]) > 0]
    assert flagged and flagged[0]["advice"].startswith("NaN/Inf in INT8")


def test_more_images_than_the_split_is_clamped(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights, divergence__images=50)
    metrics, _, result = _run(project)
    assert metrics["images"] == 6
    assert "divergence.images 50 > 6 images in 'val': using all of them" in result.stderr


def test_irs_from_different_exports(tmp_path, quantized_project, tiny_weights):
    project = copy_project(quantized_project, tmp_path, tiny_weights)

    def rename(model):
        for op in model.get_ordered_ops():
            op.set_friendly_name(f"other_{op.get_friendly_name()}")

    edit_int8(project, rename)
    line = assert_fails_cleanly("divergence", project, ["model_int8.xml: only", "layers of", "match by name"],
                                "metrics/divergence.json")
    assert "only 0 of" in line


@pytest.mark.parametrize("images", [0])
def test_zero_images_is_a_params_error(tmp_path, quantized_project, tiny_weights, images):
    project = copy_project(quantized_project, tmp_path, tiny_weights, divergence__images=images)
    assert_fails_cleanly("divergence", project, ["'divergence.images' must be >= 1"], "metrics/divergence.json")


def test_int8_ir_of_another_model_with_the_same_op_names(tmp_path, quantized_project, tiny_weights):
    """Same family, other class count: every op name matches, the head's shapes do not (was a numpy crash)."""
    from tests.test_families import tiny_detector

    other_weights = tiny_detector(tmp_path / "other", "v8/yolov8.yaml", seed=1, classes=DEMO_CLASSES[:3])
    other = tmp_path / "other_project"
    other.mkdir()
    dataset = make_dataset(other / "data", images=2, classes=3)
    write_params(other, other_weights, dataset)
    for name in ("export", "quantize"):
        result = stage(name, other)
        assert result.returncode == 0, result.stderr
    project = copy_project(quantized_project, tmp_path / "mixed_up", tiny_weights)
    for suffix in (".xml", ".bin"):
        (project / "models/int8/model_int8").with_suffix(suffix).write_bytes(
            (other / "models/int8/model_int8").with_suffix(suffix).read_bytes())
    line = assert_fails_cleanly("divergence", project, ["model_int8.xml: layer", "different models"],
                                "metrics/divergence.json")
    assert "has shape" in line


GRAPH_DRAWN = "[...document.querySelectorAll('canvas')].some(c => c.width > 300 && c.height > 300)"


def test_make_view_serves_the_graph_with_its_overlays_on_localhost_and_stops(tmp_path, quantized_project,
                                                                               tiny_weights):
    """What `make view` runs: the graph in Model Explorer with the divergence overlays, the worst layer selected,
    in headless Chromium, with no request leaving the machine; the server reads no other file; SIGTERM (what Ctrl-C
    does) stops it."""
    project = copy_project(quantized_project, tmp_path, tiny_weights)
    _run(project)
    shutil.copy(quantized_project / "reports/precision_table.csv", project / "reports")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VIEW_PORT": str(port)}
    server = subprocess.Popen([sys.executable, "-m", "qgate.view"], cwd=project, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        address = _served_address(server, port)
        selected = json.loads(urllib.parse.unquote(address.split("?data=", 1)[1]))["uiState"]["paneStates"][0]
        node = selected["selectedNodeId"]
        # drawn, the overlays loaded, and the selected node's panel shown (after "Processing graph...", which a
        # busy machine makes last past the first drawn canvas)
        check = open_page(address, chromium(), ready=f"{GRAPH_DRAWN} && ['SQNR_dB.json', {json.dumps(node)}]"
                          ".every(t => document.body.innerText.includes(t))")
        sqnr = json.loads((project / "reports/view/SQNR_dB.json").read_text())["results"]
        first = json.loads((project / "metrics/divergence.json").read_text())["first_divergent_layer"]
        rows = list(csv.DictReader((project / "reports/divergence.csv").open()))
        graph = ViewedGraph(project / "models/export/model.onnx")
        # the first divergent layer's node (else the worst node)
        assert node == (layer_nodes(graph, rows)[first] if first else min(sqnr, key=lambda n: sqnr[n]["value"]))
        assert node in check.text and str(sqnr[node]["value"]) in check.text, check.text[:3000]  # its overlay
        assert [u for u in check.requests if not u.startswith((f"http://127.0.0.1:{port}/", "data:", "blob:"))] == [], \
            check.requests
        (tmp_path / "view.png").write_bytes(check.screenshot)
        with urllib.request.urlopen(address, timeout=30) as page:  # nor a connection opened ahead (preconnect)
            assert b"fonts.gstatic.com" not in page.read()
        assert _status(port, "api/v1/read_text_file?path=reports/view/SQNR_dB.json") == 200
        for other in ("params.yaml", str(project / "reports/view/../../params.yaml"), "/etc/hostname"):
            assert _status(port, f"api/v1/read_text_file?path={urllib.parse.quote(other)}") == 403, other
        convert = {"extensionId": "onnx_adapter", "cmdId": "convert", "settings": {}}
        assert _status(port, "apipost/v1/send_command", {**convert, "modelPath": str(project / "params.yaml")}) == 403
        # the viewed graph, but to be deleted with its folder when the server stops
        viewed = {**convert, "modelPath": "models/export/model.onnx", "deleteAfterConversion": True}
        assert _status(port, "apipost/v1/send_command", viewed) == 403
        assert _status(port, "api/v1/send_command?json=" + urllib.parse.quote(json.dumps(convert))) == 403
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/check_health", timeout=5)


def test_make_view_runs_the_viewer_and_only_writes_the_overlays_under_ci():
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MAKEFLAGS", "MAKELEVEL")}
    local, ci = (subprocess.run(["make", "-n", "view", *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=60).stdout.splitlines()[-1] for extra in ([], ["CI=true"]))
    assert local.endswith("python -m qgate.view ") and "VIEW_PORT=8080" in local, local
    assert ci.endswith("python -m qgate.view --files-only"), ci


def _status(port: int, path: str, posted: dict | None = None) -> int:
    """The HTTP status of a GET (or a JSON POST) to the server on 127.0.0.1:`port`."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/{path}", headers={"Content-Type": "application/json"},
                                     data=None if posted is None else json.dumps(posted).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def _served_address(server: subprocess.Popen, port: int) -> str:
    """The address `qgate.view` prints, once its server answers (within a minute)."""
    printed = [server.stdout.readline()]
    while not printed[-1].startswith("Model Explorer on ") and printed[-1] and len(printed) < 20:  # after warnings
        printed.append(server.stdout.readline())
    line = printed[-1]
    assert line.startswith(f"Model Explorer on http://127.0.0.1:{port}/?data="), printed
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/check_health", timeout=2)
            return line.split(" on ", 1)[1].strip()
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"nothing answers on 127.0.0.1:{port} a minute after `qgate.view` started")
