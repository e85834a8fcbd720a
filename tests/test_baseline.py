"""The baseline stage end to end on a tiny exported model, and its bad-input errors."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.conftest import assert_fails_cleanly, make_dataset, stage, write_params


def _project_with_export(tmp_path, exported_project, tiny_weights):
    shutil.copytree(exported_project / "models", tmp_path / "models")
    (tmp_path / "metrics").mkdir()
    shutil.copy(exported_project / "metrics" / "export_record.json", tmp_path / "metrics")
    dataset = make_dataset(tmp_path / "data", images=3)
    write_params(tmp_path, tiny_weights, dataset)
    return tmp_path, dataset


def test_baseline_writes_metrics_per_class_and_detections(tmp_path, exported_project, tiny_weights):
    project, _ = _project_with_export(tmp_path, exported_project, tiny_weights)
    result = stage("baseline", project)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((project / "metrics" / "baseline.json").read_text())
    record = json.loads((project / "metrics" / "export_record.json").read_text())
    assert metrics["images"] == 3 and metrics["instances"] > 0
    assert metrics["inference_precision"] == "f32"
    assert metrics["model_sha256"] == record["model_sha256"]
    assert 0.0 <= metrics["map50_95"] <= metrics["map50"] <= 1.0
    per_class = json.loads((project / "metrics" / "baseline_per_class.json").read_text())
    assert [row["class_name"] for row in per_class] == record["class_names"]
    detections = json.loads((project / "artifacts" / "baseline_detections.json").read_text())
    assert len(detections) == metrics["detections"]


def _break_labels(dataset, line):
    label = sorted((dataset.parent / "labels" / "val").glob("*.txt"))[0]
    label.write_text(line + "\n")
    return label.name


def _break_yaml_path(dataset):
    spec = yaml.safe_load(dataset.read_text())
    spec["path"] = str(dataset.parent / "moved")
    dataset.write_text(yaml.safe_dump(spec))
    return "dataset root"


def _empty_val(dataset):
    shutil.rmtree(dataset.parent / "images" / "val")
    (dataset.parent / "images" / "val").mkdir()
    return "'val' split has no images"


def _unreadable_image(dataset):
    sorted((dataset.parent / "images" / "val").iterdir())[0].write_bytes(b"not a jpeg")
    return "unreadable image; replace it or remove it from the split"


def _missing_ir(dataset):
    shutil.rmtree(dataset.parent.parent / "models")
    return "run `dvc repro export`"


@pytest.mark.parametrize(
    ("breaker", "fragments"),
    [
        pytest.param(lambda d: _break_labels(d, "7 0.5 0.5 0.1 0.1"), ["class id 7 is outside 0..3"],
                     id="class-id-ge-nc"),
        pytest.param(lambda d: _break_labels(d, "0 0.5 0.5 1.7 0.1"), ["coordinates must be normalized"],
                     id="coords-outside"),
        pytest.param(_break_yaml_path, ["data.yaml", "does not exist"], id="dataset-path-missing"),
        pytest.param(_empty_val, ["data.yaml"], id="empty-val-split"),
        pytest.param(_missing_ir, ["model_fp32.xml"], id="missing-ir"),
        pytest.param(_unreadable_image, ["0.jpg"], id="unreadable-image"),
    ],
)
def test_bad_input_fails_without_metrics(tmp_path, exported_project, tiny_weights, breaker, fragments):
    project, dataset = _project_with_export(tmp_path, exported_project, tiny_weights)
    assert_fails_cleanly("baseline", project, [*fragments, breaker(dataset)], "metrics/baseline.json")
