"""The quantize stage on a tiny real model: INT8 IR, precision table, scope validation, calibration rules, and
NNCF's SmoothQuant on MatMuls."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import openvino as ov
import pytest

from qgate.params import load_params
from qgate.runtimes.openvino.head_graph import output_layers
from qgate.runtimes.nncf_settings import advanced_parameters
from tests.conftest import ROOT, assert_fails_cleanly, copy_project, stage


def _rows(project):
    with open(project / "reports" / "precision_table.csv") as handle:
        return list(csv.DictReader(handle))


def test_quantize_writes_int8_ir_table_and_metrics(quantized_project):
    metrics = json.loads((quantized_project / "metrics" / "quantize.json").read_text())
    model = ov.Core().read_model(quantized_project / "models" / "int8" / "model_int8.xml")
    fake_quantizes = sum(op.get_type_name() == "FakeQuantize" for op in model.get_ops())
    assert metrics["quantizer_count"] == fake_quantizes > 0
    rows = _rows(quantized_project)
    assert metrics["ops_int8"] == sum(r["precision"] == "int8" for r in rows) > 0
    decode = [r for r in rows if r["name"] == "/model.22/dfl/conv/Conv"]
    assert decode and decode[0]["precision"] == "float"
    assert decode[0]["why"] == "ignored by the head-decode rule (quantize.keep_decode_float)"
    assert metrics["ops_float_by_decode_rule"] == sum(r["why"] == decode[0]["why"] for r in rows) > 5
    assert metrics["ops_ignored_by_scope"] == 0  # the default params.yaml names no op
    assert metrics["ops_float_by_output_layer_rule"] == 0  # off by default
    convs = [r for r in rows if r["type"] == "Convolution" and r["precision"] == "int8"]
    assert convs and all(r["weights_int8"] == "1" and r["act_levels"] == "256" for r in convs)
    assert all(float(r["act_input_low"]) < float(r["act_input_high"]) for r in convs)
    # make_dataset writes 6 calib images; the default subset_size (300) is clamped to them
    assert metrics["calibration_images"] == 6
    assert metrics["calibration_overlaps_val"] == 0


def test_the_output_layer_rule_keeps_each_head_branch_last_conv_float(tmp_path, exported_project, tiny_weights):
    fp32 = ov.Core().read_model(exported_project / "models" / "export" / "model_fp32.xml")
    # YOLOv8's head: per level, the last conv of the box branch (cv2) and of the class branch (cv3)
    expected = {f"/model.22/{branch}.{level}/{branch}.{level}.2/Conv/WithoutBiases"
                for branch in ("cv2", "cv3") for level in range(3)}
    assert set(output_layers(fp32)) == expected
    project = copy_project(exported_project, tmp_path, tiny_weights, quantize__keep_output_layers_float=True)
    assert stage("quantize", project).returncode == 0
    kept = {r["name"]: r for r in _rows(project) if r["why"].startswith("ignored by the output-layer rule")}
    assert set(kept) == expected and all(r["precision"] == "float" for r in kept.values())
    assert json.loads((project / "metrics" / "quantize.json").read_text())["ops_float_by_output_layer_rule"] == 6


def _fails(project, *fragments):
    return assert_fails_cleanly("quantize", project, list(fragments), "metrics/quantize.json")


@pytest.mark.parametrize(
    ("scope", "fragment"),
    [
        pytest.param({"names": ["/model.99/conv/Conv"]}, "quantize.ignored_scope.names[0] '/model.99/conv/Conv'",
                     id="name-matches-nothing"),
        pytest.param({"patterns": [".*nothing_like_this.*"]}, "quantize.ignored_scope.patterns[0]",
                     id="pattern-matches-nothing"),
        pytest.param({"types": ["LSTMCell"]}, "quantize.ignored_scope.types[0] 'LSTMCell'", id="type-absent"),
        pytest.param({"subgraphs": [{"inputs": ["/model.22/Concat"], "outputs": ["no_such_output"]}]},
                     "quantize.ignored_scope.subgraphs[0]", id="subgraph-endpoint-absent"),
    ],
)
def test_scope_entry_matching_nothing_is_named(tmp_path, exported_project, tiny_weights, scope, fragment):
    full = {"names": [], "patterns": [], "types": [], "subgraphs": [], **scope}
    project = copy_project(exported_project, tmp_path, tiny_weights, quantize__ignored_scope=full)
    _fails(project, fragment, "matches no op")


def test_calibration_on_val_is_refused_unless_allowed(tmp_path, exported_project, tiny_weights):
    project = copy_project(exported_project, tmp_path / "refused", tiny_weights, quantize__calibration_split="val")
    _fails(project, "data.yaml", "6 of 6 'val' images are also in 'val'", "allow_val_calibration")
    allowed = copy_project(exported_project, tmp_path / "allowed", tiny_weights, quantize__calibration_split="val",
                           quantize__allow_val_calibration=True, quantize__subset_size=2)
    result = stage("quantize", allowed)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((allowed / "metrics" / "quantize.json").read_text())
    assert metrics["calibration_overlaps_val"] == 1 and metrics["calibration_images"] == 2


def test_empty_calibration_split(tmp_path, exported_project, tiny_weights):
    project = copy_project(exported_project, tmp_path, tiny_weights)
    for image in (project / "data" / "images" / "calib").iterdir():
        image.unlink()
    _fails(project, "'calib' split has no images")


def test_unreadable_calibration_image(tmp_path, exported_project, tiny_weights):
    project = copy_project(exported_project, tmp_path, tiny_weights)
    sorted((project / "data" / "images" / "calib").iterdir())[0].write_bytes(b"not a jpeg")
    _fails(project, "unreadable calibration image")


def test_missing_fp32_ir(tmp_path, exported_project, tiny_weights):
    import shutil

    project = copy_project(exported_project, tmp_path, tiny_weights)
    shutil.rmtree(project / "models" / "export")
    _fails(project, "model_fp32.xml", "run `dvc repro export`")


def _two_matmuls() -> ov.Model:
    """x [1, 8, 16] through two MatMuls: the ops NNCF's SmoothQuant smooths."""
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8, 16], np.float32, name="x")
    y = ops.matmul(x, ops.constant(rng.normal(size=(16, 16)).astype(np.float32)), False, False)
    return ov.Model([ops.matmul(y, ops.constant(rng.normal(size=(16, 16)).astype(np.float32)), False, False)], [x])


def test_smooth_quant_alpha_reaches_nncf_with_model_type_transformer():
    """quantize.smooth_quant_alpha sets the scales SmoothQuant multiplies the MatMuls' inputs by (another alpha,
    other scales); -1 switches it off, and with model_type none NNCF never runs it."""
    import nncf

    rng = np.random.default_rng(1)
    channels = np.linspace(0.1, 20, 16, dtype=np.float32)  # outlier channels: what SmoothQuant moves into weights
    data = nncf.Dataset([rng.normal(size=(1, 8, 16)).astype(np.float32) * channels for _ in range(4)])
    cfg = load_params(ROOT / "params.yaml").quantize

    def smoothing(model_type, alpha: float) -> list[float]:
        quantized = nncf.quantize(_two_matmuls(), data, subset_size=4, model_type=model_type,
                                  advanced_parameters=advanced_parameters(replace(cfg, smooth_quant_alpha=alpha)))
        return [float(v) for op in quantized.get_ordered_ops() if op.get_type_name() == "Constant"
                and "smooth_quant" in op.get_friendly_name() for v in op.get_vector()]

    transformer = nncf.ModelType.TRANSFORMER
    default, half = smoothing(transformer, 0.95), smoothing(transformer, 0.5)
    assert default and half and default != half
    assert smoothing(transformer, -1) == [] and smoothing(None, 0.95) == []
