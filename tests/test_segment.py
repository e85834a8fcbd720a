"""Beside ../shared/reference: the official YOLOv8n-seg on COCO128-seg at 640, judged on mask mAP by `make gate`
with the own-model recipe, and its masks scored like pycocotools scores Ultralytics' own predictions."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import openvino as ov
import pytest
import yaml

from qgate.artifacts import FP32_IR_NAME
from qgate.cocoeval import coco_map
from qgate.dataset import load_dataset, split_images, ultralytics_yaml
from qgate.evaluator import evaluate
from qgate.tasks import task_for
from tests.conftest import QUICK_BENCHMARK, failed_in_table, gate_own_model, table_results
from tests.test_reference import REFERENCE

pytestmark = [
    pytest.mark.reference,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(not (REFERENCE / "models" / "yolov8n-seg.pt").exists(),
                       reason=f"no segmentation reference at {REFERENCE} (set QGATE_REFERENCE)"),
]

SEGMENT_MODEL = {  # the README's own-model recipe, pointed at the segmentation reference
    "model": {"weights": str(REFERENCE / "models" / "yolov8n-seg.pt"),
              "dataset": str(REFERENCE / "data" / "coco128-seg.yaml"),
              "data_dir": str(REFERENCE / "data" / "coco128-seg"), "imgsz": 640},
    "quantize": {"calibration_split": "train", "allow_val_calibration": True},
    # CI time: each autofix evaluation at 640 costs ~20 s here and 128 images resolve no group's gain (12
    # evaluations measured, none kept); two show the search runs on masks
    "autofix": {"max_evaluations": 2},
    "benchmark": QUICK_BENCHMARK,
}
PARITY_IMAGES = 32  # Ultralytics' save_json mask steps cost ~0.45 s an image at 640: a subset keeps CI short


@pytest.fixture(scope="module")
def seg_gated(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A copy of the checkout with the recipe applied to the segmentation reference, after `make gate`."""
    return gate_own_model(tmp_path_factory.mktemp("segment_checkout"), SEGMENT_MODEL)


def test_make_gate_judges_a_segment_model_on_masks_and_boxes(seg_gated):
    checkout, done = seg_gated
    headline = done.stdout.split("\n\n")[-1].splitlines()[0]  # the line before 'report: ...'
    assert headline.startswith(("PASS", "FAIL:")), done.stdout[-3000:] + done.stderr[-3000:]  # not a crash
    assert (done.returncode == 0) == headline.startswith("PASS")
    results = table_results(done.stdout)
    assert {"accuracy_map50_95_drop", "accuracy_mask_map50_95_drop"} <= results.keys(), done.stdout[-3000:]
    assert "mask mAP50-95 drop, FP32 - INT8" in done.stdout and "box mAP50-95 drop, FP32 - INT8" in done.stdout
    assert headline.startswith("FAIL") == bool(failed_in_table(done.stdout)), done.stdout[-3000:]
    int8 = json.loads((checkout / "metrics" / "int8.json").read_text())
    baseline = json.loads((checkout / "metrics" / "baseline.json").read_text())
    assert int8["mask_map50_95_drop"] == pytest.approx(baseline["mask_map50_95"] - int8["mask_map50_95"], abs=1e-5)
    assert int8["mask_map50_95_drop_ci_low"] <= int8["mask_map50_95_drop"] <= int8["mask_map50_95_drop_ci_high"]
    assert baseline["mask_map50_95"] < baseline["map50_95"]  # masks are the harder metric of this model
    autofix = json.loads((checkout / "metrics" / "autofix.json").read_text())
    assert "fixed_mask_map50_95_drop" in autofix  # autofix aims at the task's own metric
    junit = (checkout / "reports" / "gates.xml").read_text()
    assert "accuracy_mask_map50_95_drop" in junit
    report = (checkout / "reports" / "report.md").read_text()
    assert report.split("## Results")[1].split("\n")[2].startswith("INT8 mask mAP50-95")  # the first thing said
    per_class = report.split("## Accuracy per class")[1].split("\n## ")[0]
    assert "FP32 mask mAP50-95" in per_class and "FP32 box mAP50-95" in per_class


@pytest.fixture(scope="module")
def ultralytics_subset(tmp_path_factory) -> tuple[object, list[dict], list[Path]]:
    """Ultralytics' val(rect=False, save_json=True) of the .pt on the first images, and those images."""
    from qgate import offline

    offline.ultralytics_settings_off()
    from ultralytics import YOLO

    folder = tmp_path_factory.mktemp("ultralytics_seg")
    shutil.copytree(REFERENCE / "data" / "coco128-seg", folder / "coco128-seg")  # Ultralytics writes a .cache
    dataset = load_dataset(REFERENCE / "data" / "coco128-seg.yaml")
    images = [folder / path.relative_to(dataset.root.parent) for path in split_images(dataset, "val")[:PARITY_IMAGES]]
    (folder / "subset.txt").write_text("".join(f"{path}\n" for path in images))
    spec = yaml.safe_load((REFERENCE / "data" / "coco128-seg.yaml").read_text()) | {
        "path": str(folder), "train": "subset.txt", "val": "subset.txt"}
    (folder / "subset.yaml").write_text(yaml.safe_dump(spec))
    result = YOLO(str(REFERENCE / "models" / "yolov8n-seg.pt")).val(
        data=str(ultralytics_yaml(load_dataset(folder / "subset.yaml"), folder / "abs.yaml")), imgsz=640, batch=8,
        rect=False, save_json=True, plots=False, device="cpu", project=str(folder), name="val", verbose=False)
    return result, json.loads((Path(result.save_dir) / "predictions.json").read_text()), images


def test_masks_match_pycocotools_on_ultralytics_own_predictions(seg_gated, ultralytics_subset):
    checkout, _ = seg_gated
    result, predictions, images = ultralytics_subset
    record = json.loads((checkout / "metrics" / "export_record.json").read_text())
    task = task_for(record)
    names = tuple(record["class_names"])
    ours = evaluate(ov.Core().read_model(str(checkout / "models" / "export" / FP32_IR_NAME)), images, names, 640,
                    task=task)
    index = {int(path.stem): i for i, path in enumerate(images)}  # Ultralytics: image id = the file's number
    theirs = [{**p, "image_id": index[p["image_id"]]} for p in predictions]  # category id = class + 1 here
    for family in task.metrics.scored:
        truth = task.ground_truth(images, [(image["height"], image["width"]) for image in ours.ground_truth["images"]],
                                  names)
        pycocotools = coco_map(truth, [dict(p) for p in theirs], family.iou_type)[0]
        printed = result.seg.map if family.prefix else result.box.map
        print(f"{family.title()}: qgate {ours.value(family.key()):.4f}, pycocotools on Ultralytics' predictions "
              f"{pycocotools:.4f}, Ultralytics printed {printed:.4f} ({PARITY_IMAGES} images)")
        assert ours.value(family.key()) == pytest.approx(pycocotools, abs=0.005)
        # Ultralytics' own matcher: 0.009 off on these 32 images, 0.0002 (masks) and 0.004 (boxes) on all 128
        assert ours.value(family.key()) == pytest.approx(printed, abs=0.02)
