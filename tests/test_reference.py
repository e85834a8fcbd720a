"""Opt-in: export + baseline on the official yolov8n.pt and COCO128 agree with Ultralytics' own validation."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cv2
import pytest

from qgate.dataset import coco_ground_truth, load_dataset, split_images, ultralytics_yaml
from qgate.evaluator import coco_map
from tests.conftest import ROOT, stage, write_params

REFERENCE = Path(os.environ.get("QGATE_REFERENCE", ROOT.parent / "shared" / "reference"))

pytestmark = [
    pytest.mark.reference,
    pytest.mark.slow,
    pytest.mark.skipif(not (REFERENCE / "models" / "yolov8n.pt").exists(),
                       reason=f"no reference case at {REFERENCE} (set QGATE_REFERENCE)"),
]


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> tuple[dict, Path]:
    project = tmp_path_factory.mktemp("reference")
    # COCO128 has no calibration split: calibrate on train, which is also val, and say so.
    write_params(project, REFERENCE / "models" / "yolov8n.pt", REFERENCE / "data" / "coco128.yaml", imgsz=640,
                 quantize__calibration_split="train", quantize__allow_val_calibration=True)
    for name in ("export", "baseline"):
        result = stage(name, project)
        assert result.returncode == 0, result.stderr
    return json.loads((project / "metrics" / "baseline.json").read_text()), project


@pytest.fixture(scope="module")
def ultralytics_val(tmp_path_factory):
    from qgate import offline

    offline.ultralytics_settings_off()
    from ultralytics import YOLO

    folder = tmp_path_factory.mktemp("ultralytics")
    # A copy: Ultralytics writes a labels .cache beside the labels, and the reference folder stays untouched.
    shutil.copytree(REFERENCE / "data", folder / "data")
    data = ultralytics_yaml(load_dataset(folder / "data" / "coco128.yaml"), folder / "coco128.yaml")
    result = YOLO(str(REFERENCE / "models" / "yolov8n.pt")).val(
        data=str(data), imgsz=640, batch=8, rect=False, save_json=True, plots=False, device="cpu",
        project=str(folder), name="val", verbose=False)
    return result, json.loads((Path(result.save_dir) / "predictions.json").read_text())


def _ultralytics_predictions_scored_by_pycocotools(predictions: list[dict]) -> float:
    dataset = load_dataset(REFERENCE / "data" / "coco128.yaml")
    images = split_images(dataset, "val")
    shapes = [cv2.imread(str(p)).shape[:2] for p in images]
    gt = coco_ground_truth(images, shapes, dataset.names)
    ids = {image["file_name"]: image["id"] for image in gt["images"]}
    mapped = [{**p, "image_id": ids[p["file_name"]]} for p in predictions]
    return coco_map(gt, mapped)[0]


def test_reference_counts(ours):
    metrics, _ = ours
    assert metrics["images"] == 128
    assert metrics["instances"] == 929  # README of the reference case: 929 non-crowd boxes
    assert metrics["inference_precision"] == "f32"


def test_reference_map_matches_ultralytics(ours, ultralytics_val):
    metrics, _ = ours
    result, predictions = ultralytics_val
    theirs_pycocotools = _ultralytics_predictions_scored_by_pycocotools(predictions)
    print(f"qgate {metrics['map50_95']:.4f}  ultralytics+pycocotools {theirs_pycocotools:.4f}  "
          f"ultralytics box.map {result.box.map:.4f}")
    assert abs(metrics["map50_95"] - theirs_pycocotools) <= 0.005, (metrics["map50_95"], theirs_pycocotools)
    assert abs(metrics["map50_95"] - result.box.map) <= 0.01, (metrics["map50_95"], result.box.map)


def test_reference_quantize_and_int8_drop(ours):
    baseline, project = ours
    for name in ("quantize", "int8_eval"):
        result = stage(name, project)
        assert result.returncode == 0, result.stderr
    quantize = json.loads((project / "metrics" / "quantize.json").read_text())
    int8 = json.loads((project / "metrics" / "int8.json").read_text())
    print(f"reference INT8: mAP50-95 {int8['map50_95']:.4f}, drop {int8['map50_95_drop']:+.4f} "
          f"(calibrated on the evaluated images: {bool(quantize['calibration_overlaps_val'])})")
    assert quantize["calibration_overlaps_val"] == 1 and quantize["calibration_images"] == 128
    assert quantize["fake_quantize_count"] > 0
    assert int8["map50_95_drop"] == pytest.approx(baseline["map50_95"] - int8["map50_95"], abs=1e-5)
    assert int8["images"] == 128 and int8["inference_precision"] == "f32"
