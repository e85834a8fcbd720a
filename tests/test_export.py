"""The export stage on a tiny real model: ONNX + FP32 IR + record; bad weights are one-line errors."""

from __future__ import annotations

import json

import openvino as ov
import torch

from qgate.io import sha256_file
from tests.conftest import assert_fails_cleanly, make_dataset, write_params


def test_export_writes_fp32_ir_and_record(exported_project, tiny_weights):
    folder = exported_project / "models" / "export"
    record = json.loads((exported_project / "metrics" / "export_record.json").read_text())
    assert record["model_sha256"] == sha256_file(tiny_weights)
    assert record["ir_bin_sha256"] == sha256_file(folder / "model_fp32.bin")
    assert record["input_shape"] == [1, 3, 128, 128]
    assert record["class_names"] == ["ellipse", "rectangle", "triangle", "star"]
    from ultralytics import YOLO

    convs = sum(isinstance(m, torch.nn.Conv2d) for m in YOLO(str(tiny_weights)).model.modules())
    assert record["ir_op_types"]["Convolution"] == convs
    assert record["ir_op_count"] == sum(record["ir_op_types"].values())
    model = ov.Core().read_model(folder / "model_fp32.xml")
    weights = [op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"]
    assert {str(op.get_element_type()) for op in weights} >= {"<Type: 'float32'>"}
    assert not any(str(op.get_element_type()) == "<Type: 'float16'>" for op in weights), "IR compressed to FP16"


def test_export_writes_nothing_beside_the_weights(tmp_path, tiny_weights):
    """Ultralytics exports next to the weights it loaded: qgate's export runs on a copy, so a folder holding the
    weights (and an ONNX of the same stem, the user's) is left as it was."""
    from tests.conftest import stage_in_process

    weights = tmp_path / "mine" / "tiny.pt"
    weights.parent.mkdir()
    weights.write_bytes(tiny_weights.read_bytes())
    (weights.parent / "tiny.onnx").write_text("the user's own ONNX")
    project = _project(tmp_path / "project", weights)
    assert stage_in_process("export", project).returncode == 0
    assert sorted(p.name for p in weights.parent.iterdir()) == ["tiny.onnx", "tiny.pt"]
    assert (weights.parent / "tiny.onnx").read_text() == "the user's own ONNX"


def _project(tmp_path, weights):
    write_params(tmp_path, weights, make_dataset(tmp_path / "data", images=1))
    return tmp_path


def _assert_failed_cleanly(project, *fragments):
    assert_fails_cleanly("export", project, list(fragments), "metrics/export_record.json")
    assert not (project / "models" / "export").exists()


def test_missing_weights(tmp_path):
    project = _project(tmp_path, tmp_path / "absent.pt")
    _assert_failed_cleanly(project, "absent.pt: weights not found", "model.weights")


def test_corrupt_weights(tmp_path):
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"PK\x03\x04 this is not a checkpoint")
    project = _project(tmp_path, bad)
    _assert_failed_cleanly(project, "corrupt.pt: not a readable Ultralytics checkpoint")


class _OpensAFile:
    """Unpickled by a weights_only=False load, this object calls open(path, 'w'): code run from a model file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(tmp_path, tiny_weights):
    """A real detector's checkpoint with one more entry whose unpickling opens a file: export refuses it in one
    line naming what it would call and how to keep only the model, and the file never appears."""
    marker = tmp_path / "ran"
    checkpoint = torch.load(tiny_weights, weights_only=False)  # the test's own file: trusted here
    crafted = tmp_path / "crafted.pt"
    torch.save({**checkpoint, "payload": _OpensAFile(marker)}, crafted)
    project = _project(tmp_path, crafted)
    _assert_failed_cleanly(project, "crafted.pt: refused: it names io.open, which is not an Ultralytics or torch",
                           "keep only its model")
    assert not marker.exists()


def test_plain_state_dict_is_not_a_detector(tmp_path):
    foreign = tmp_path / "foreign.pt"
    torch.save({"weight": torch.zeros(3)}, foreign)
    project = _project(tmp_path, foreign)
    _assert_failed_cleanly(project, "foreign.pt", "YOLO detection, segmentation, pose, OBB or classification .pt")
