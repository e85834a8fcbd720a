"""The demo per task (`demo.task: segment | pose`): `make gate` trains YOLOv8n-seg / -pose on the synthetic shapes
(outlines, extreme points) and judges it with the default gates (where the model trained on this CPU fails on
accuracy, after the README's fix: `make tune`'s block pasted); qgate's FP32 scores equal pycocotools on
Ultralytics' own predictions of the trained model (the only pose model here: no public pose checkpoint); a fault
planted where only masks / keypoints pass fails that task's gate and is the layer named."""

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
from stages.demo_train import ULTRALYTICS_RESULTS
from tests.conftest import (QUICK_BENCHMARK, divergence_and_ranking, failed_in_table, gate_own_model,
                            judge, plant_range_fault, stage, table_results)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

TASKS = ("segment", "pose")
# A layer only the task's own output reads: the segment head's prototypes after their upsample, the pose head's
# keypoint branch on the stride-8 level (the demo's shapes are found there). A range fault planted in front of it
# (the quantizer's range x 0.05) breaks that output and leaves the boxes exactly as they were.
OWN_BRANCH_FAULT = {"segment": "/model.22/proto/cv2/conv/Conv/WithoutBiases",
                    "pose": "/model.22/cv4.0/cv4.0.1/conv/Conv/WithoutBiases"}


@pytest.fixture(scope="module", params=TASKS)
def task_demo(request, tmp_path_factory) -> tuple[str, Path, subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """A copy of the checkout with `demo.task` set, after `make gate` (trains that task's demo model); where that
    fails on accuracy alone, after the README's other fix: `make tune`, its block pasted, `make gate` again.

    The demo model is trained on the machine that runs it and differs by CPU: the pose demo lost 0.004 box mAP50-95
    on one CPU and 0.017 on another (AMD EPYC, avx512_vnni without avx_vnni), where no float scope autofix tried came
    within its target and `range_estimator: minmax` did (0.002). Returns the task, the checkout, the first and the
    last `make gate`.
    """
    # default gates. CI time: autofix's search and pricing are tested in test_autofix, not here (on the failing pose
    # demo its 12 evaluations cost 92 s and found nothing); tune without full bias correction (accuracy only, the
    # slow quantizing) has half the candidates, and keeps both range estimators (minmax is what passed there)
    recipe = {"demo": {"task": request.param}, "benchmark": QUICK_BENCHMARK,
              "autofix": {"price_rounds": 0, "max_evaluations": 2}, "tune": {"space": {"fast_bias_correction": [True]}}}
    checkout, first = gate_own_model(tmp_path_factory.mktemp(f"{request.param}_demo"), recipe)
    if first.returncode == 0 or not failed_in_table(first.stdout):
        return request.param, checkout, first, first
    return request.param, checkout, first, _tuned_and_gated(checkout)


def _tuned_and_gated(checkout: Path) -> subprocess.CompletedProcess:
    """`make tune`, its block pasted under `quantize:`, `make gate`: the last run (a failed tune fails here)."""
    tuned = subprocess.run(["make", "tune"], cwd=checkout, capture_output=True, text=True, timeout=3600)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    block = yaml.safe_load((checkout / "reports" / "tune_quantize.yaml").read_text())
    assert block, tuned.stdout[-3000:]  # "nothing to paste": no candidate passed
    params = yaml.safe_load((checkout / "params.yaml").read_text())
    params["quantize"] = {**params.get("quantize", {}), **block}
    (checkout / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return subprocess.run(["make", "gate"], cwd=checkout, capture_output=True, text=True, timeout=3600)


def test_the_task_demo_passes_its_default_gates_on_its_own_metric(task_demo):
    task, checkout, first, done = task_demo
    # the default quantize settings pass, or fail on accuracy alone and the fix the README names passes
    assert all(gate.startswith("accuracy_") for gate in failed_in_table(first.stdout)), first.stdout[-4000:]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    record = json.loads((checkout / "metrics" / "export_record.json").read_text())
    own = task_for(record).metrics.primary
    assert record["task"] == task and own.prefix
    drop_gate = f"accuracy_{own.key('map50_95_drop')}"
    results = table_results(done.stdout)
    assert results[drop_gate] in ("pass", "inconclusive (pass)") and "accuracy_map50_95_drop" in results
    assert f"{own.title()} drop, FP32 - INT8" in done.stdout
    int8 = json.loads((checkout / "metrics" / "int8.json").read_text())
    assert int8[own.key("map50_95_drop_ci_low")] <= int8[own.key("map50_95_drop")] <= int8[
        own.key("map50_95_drop_ci_high")]
    trained = json.loads((checkout / "metrics" / "demo_train.json").read_text())
    assert trained[own.key()] > 0.5  # the demo model learned its task, not only boxes
    assert drop_gate in (checkout / "reports" / "gates.xml").read_text()
    report = (checkout / "reports" / "report.md").read_text()
    assert report.split("## Results")[1].split("\n")[2].startswith(f"INT8 {own.title()}")  # the first thing said


def test_the_task_demo_scores_like_pycocotools_on_ultralytics_own_predictions(task_demo, tmp_path):
    from qgate import offline

    offline.ultralytics_settings_off()
    from ultralytics import YOLO

    task_name, checkout, *_ = task_demo
    record = json.loads((checkout / "metrics" / "export_record.json").read_text())
    task, names, imgsz = task_for(record), tuple(record["class_names"]), record["imgsz"]
    dataset = load_dataset(checkout / "data" / "demo" / "demo.yaml")
    images = split_images(dataset, "val")
    result = YOLO(str(checkout / "models" / "demo" / "yolov8n_demo.pt")).val(
        data=str(ultralytics_yaml(dataset, tmp_path / "demo.yaml")), imgsz=imgsz, batch=8, rect=False,
        save_json=True, plots=False, device="cpu", project=str(tmp_path), name="val", verbose=False)
    index = {path.stem: i for i, path in enumerate(images)}  # Ultralytics: image id = the file's stem
    theirs = [{**p, "image_id": index[p["image_id"]]}  # category id = class + 1, as qgate's ground truth
              for p in json.loads((Path(result.save_dir) / "predictions.json").read_text())]
    ours = evaluate(ov.Core().read_model(str(checkout / "models" / "export" / FP32_IR_NAME)), images, names, imgsz,
                    task=task)
    truth = task.ground_truth(images, [(image["height"], image["width"]) for image in ours.ground_truth["images"]],
                              names)
    for family in task.metrics.scored:
        pycocotools = coco_map(truth, [dict(p) for p in theirs], family.iou_type)[0]
        printed = getattr(result, ULTRALYTICS_RESULTS[family.iou_type]).map
        print(f"{task_name} {family.title()}: qgate {ours.value(family.key()):.4f}, pycocotools on Ultralytics' "
              f"predictions {pycocotools:.4f}, Ultralytics printed {printed:.4f} ({len(images)} images)")
        assert ours.value(family.key()) == pytest.approx(pycocotools, abs=0.005)


def test_a_fault_that_breaks_only_the_task_s_own_output_fails_its_gate_and_is_named(task_demo, tmp_path):
    """Measured on the demos: mask drop 0.005 -> 0.49, keypoint drop 0.001 -> 0.43, box drop unchanged. The task's
    own gate fails, the box gate does not, and its advice names the layer, first in the sensitivity ranking: that
    ranking scores mask IoU / OKS besides boxes, so a group that breaks only masks or keypoints still ranks first."""
    task, checkout, *_ = task_demo
    layer = OWN_BRANCH_FAULT[task]
    planted = tmp_path / "planted"
    shutil.copytree(checkout, planted, symlinks=True, ignore=shutil.ignore_patterns(".git", ".dvc"))
    plant_range_fault(planted, layer)
    done = stage("int8_eval", planted)
    assert done.returncode == 0, done.stderr[-3000:]
    own = task_for(json.loads((checkout / "metrics" / "export_record.json").read_text())).metrics.primary
    healthy, broken = (json.loads((project / "metrics" / "int8.json").read_text()) for project in (checkout, planted))
    assert broken[own.key("map50_95_drop")] > healthy[own.key("map50_95_drop")] + 0.1, broken
    assert broken["map50_95_drop"] == pytest.approx(healthy["map50_95_drop"], abs=0.002), broken
    _, divergent, ranking = divergence_and_ranking(planted)
    # first, not alone: on the images the fault's bad cases pick, a mask-coefficient conv near the threshold
    # (9.2 dB lost there unplanted) was divergent too once
    assert divergent[0] == layer, divergent
    assert ranking["lead_divergent_layer"] == layer and ranking["lead_divergent_rank"] == 1, ranking
    judged = judge(planted)
    own_gate = f"accuracy_{own.key('map50_95_drop')}"
    failed = failed_in_table(judged.stdout)
    assert own_gate in failed and "accuracy_map50_95_drop" not in failed, judged.stdout[-3000:]
    block = next(b for b in judged.stdout.split("What to do:", 1)[1].split("\n\n") if f"FAIL  {own_gate}" in b)
    assert f"look at: divergent layer {layer} (" in block and "rank #1 in" in block, block
