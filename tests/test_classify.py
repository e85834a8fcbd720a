"""The classification task's parts against Ultralytics' own: the folder-per-class layout, the centre-crop
preprocessing (`classify_transforms`), top-1/top-5 (`ClassifyMetrics`), their paired intervals, and a tiny
untrained YOLOv8n-cls exported to ONNX scored image by image as Ultralytics predicts and validates it."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from qgate.class_folders import class_ground_truth, load_class_folders
from qgate.dataset import split_images
from qgate.errors import QgateError
from qgate.heads import Postprocess
from qgate.preprocess import center_cropped, to_tensor
from qgate.task_metrics import TASK_METRICS
from qgate.tasks import Classify, Detect, task_for
from qgate.topk import TopkScorer, classification, paired_topk_drop, top_k
from tests.conftest import DEMO_CLASSES

CLASSES = ("cat", "dog", "fox")


def class_folders(root, per_class: dict[str, int], split: str = "val", seed: int = 0, sizes=((48, 64), (80, 40))):
    """`root/split/<class>/<i>.jpg`: smooth random images (different sizes and aspect ratios) per class."""
    rng = np.random.default_rng(seed)
    for name, count in per_class.items():
        (root / split / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            h, w = sizes[i % len(sizes)]
            small = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)  # upscaled: edges a resize must get right
            cv2.imwrite(str(root / split / name / f"{i}.jpg"), cv2.resize(small, (w, h)))
    return root


def test_class_folders_name_classes_by_their_sorted_folders(tmp_path):
    class_folders(tmp_path, {"dog": 2, "cat": 1, "fox": 1}, "train")
    class_folders(tmp_path, {"fox": 2, "cat": 1}, "validation")
    dataset = load_class_folders(tmp_path)
    assert dataset.names == CLASSES and dataset.splits == {"train": "train", "val": "validation"}
    images = split_images(dataset, "val")
    truth = class_ground_truth(images, [(48, 64)] * len(images), dataset.names)
    assert [a["category_id"] for a in truth["annotations"]] == [1, 3, 3]  # cat, fox, fox: ImageFolder's order
    assert Classify().labels(images[1], dataset.names) == [2]


@pytest.mark.parametrize("layout, error", [
    ({}, "no train/ or val/ folder"),
    ({"val/loose.jpg": None}, "no class folder"),
    ({"val/cat/a.jpg": None, "val/cat/deeper/b.jpg": None}, "not directly in a class folder"),
    ({"train/cat/a.jpg": None, "val/cow/b.jpg": None}, "class 'cow' is not among the 1 classes"),
])
def test_a_misplaced_image_or_folder_is_refused_naming_it(tmp_path, layout, error):
    for name in layout:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(tmp_path / name), np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(QgateError, match=error):
        load_class_folders(tmp_path)


@pytest.mark.parametrize("imgsz", [32, 64])
@pytest.mark.parametrize("hw", [(48, 64), (80, 40), (64, 64), (33, 97), (31, 32)])
def test_center_crop_is_ultralytics_classify_transforms(hw, imgsz):
    """The same float tensor as Ultralytics' val/predict transform of the same decoded image, to the bit."""
    from PIL import Image
    from ultralytics.data.augment import classify_transforms

    rng = np.random.default_rng(hw[0] * imgsz)
    bgr = cv2.resize(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8), (hw[1], hw[0]), interpolation=cv2.INTER_CUBIC)
    theirs = classify_transforms(imgsz)(Image.fromarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))).numpy()[None]
    prepared, geometry = center_cropped(bgr, imgsz)
    assert prepared.shape == (imgsz, imgsz, 3) and prepared.dtype == np.uint8 and geometry is None
    np.testing.assert_array_equal(to_tensor(prepared), theirs)


@pytest.mark.parametrize("classes", [3, 12])
def test_top_k_is_ultralytics_classify_metrics(classes):
    """Top-1 and top-5 of random probabilities as Ultralytics computes them (top-5 is 1 with fewer classes)."""
    import torch
    from ultralytics.utils.metrics import ClassifyMetrics

    rng = np.random.default_rng(classes)
    probabilities = rng.dirichlet(np.ones(classes), size=60)
    targets = rng.integers(0, classes, 60)
    names = tuple(f"c{i}" for i in range(classes))
    truth = {"images": [{"id": i} for i in range(60)],
             "annotations": [{"id": i + 1, "image_id": i, "category_id": int(t) + 1} for i, t in enumerate(targets)],
             "categories": [{"id": i + 1, "name": n} for i, n in enumerate(names)]}
    (top1, top5), per_class = top_k(truth, [classification(p, i) for i, p in enumerate(probabilities)])
    metrics = ClassifyMetrics()
    metrics.process([torch.tensor(targets)], [torch.tensor(probabilities).argsort(1, descending=True)[:, :5]])
    assert (top1, top5) == pytest.approx((metrics.top1, metrics.top5), abs=1e-6)  # theirs: float32 means
    assert 0 < top1 < top5 <= 1 and (top5 == 1) == (classes <= 5)
    first = per_class[0]
    own = targets == 0
    assert first["images"] == own.sum() and first["top1"] == pytest.approx((probabilities[own].argmax(1) == 0).mean())


def test_ties_rank_the_lower_class_first_and_a_class_absent_from_val_has_no_accuracy():
    """Hand-made: equal probabilities rank by class id (a rule, where Ultralytics' torch argsort leaves ties to
    chance); a class without val images gets no per-class accuracy and does not move the overall one."""
    tied = classification(np.array([0.1, 0.3, 0.3, 0.3]), 0)
    assert tied["category_id"] == 2 and tied["ranked"] == [2, 3, 4, 1]
    truth = {"images": [{"id": 0}, {"id": 1}],
             "annotations": [{"id": 1, "image_id": 0, "category_id": 3}, {"id": 2, "image_id": 1, "category_id": 1}],
             "categories": [{"id": c + 1, "name": name} for c, name in enumerate(("a", "b", "c", "d"))]}
    (top1, top5), per_class = top_k(truth, [tied, classification(np.array([0.7, 0.1, 0.1, 0.1]), 1)])
    assert (top1, top5) == (0.5, 1.0)
    assert [(row["images"], row["top1"]) for row in per_class] == [(1, 1.0), (0, None), (1, 0.0), (0, None)]


def test_paired_top1_drop_counts_the_images_whose_class_changed():
    """Row 0 is the full set; flipping k of n correct images drops top-1 by exactly k/n, inside its interval, and
    a model against itself drops by 0 on every resample."""
    n, k = 40, 6
    truth = {"images": [{"id": i} for i in range(n)],
             "annotations": [{"id": i + 1, "image_id": i, "category_id": 1 + i % 3} for i in range(n)],
             "categories": [{"id": c + 1, "name": name} for c, name in enumerate(CLASSES)]}
    right = [{"image_id": i, "category_id": 1 + i % 3, "score": 0.9, "ranked": [1 + i % 3]} for i in range(n)]
    flipped = [dict(p, category_id=1 + (p["category_id"] % 3), ranked=[1 + (p["category_id"] % 3)])
               if p["image_id"] < k else p for p in right]
    paired = paired_topk_drop(truth, right, flipped, samples=200, level=0.95, seed=0)
    assert paired.fp32.point == 1.0 and paired.drop.point == pytest.approx(k / n)
    assert 0 < paired.drop.low < k / n < paired.drop.high and paired.second_drop.point == pytest.approx(k / n)
    same = paired_topk_drop(truth, right, right, samples=200, level=0.95, seed=0)
    assert (same.drop.low, same.drop.point, same.drop.high) == (0.0, 0.0, 0.0)
    with pytest.raises(QgateError, match="no object sizes"):
        TopkScorer(truth, 10, 0).scores(right, area="small")


def test_the_classify_task_reads_probabilities():
    """Decode, the sensitivity error (the FP32 top class's probability change) and the bad-case match."""
    task = task_for({"task": "classify", "class_names": list(CLASSES)})
    assert isinstance(task, Classify) and task.metrics is TASK_METRICS["classify"]
    reference, candidate = (np.array([[0.2, 0.7, 0.1]]),), (np.array([[0.45, 0.4, 0.15]]),)
    fp32, int8 = (task.predictions(o, Postprocess(conf=0.9), 4) for o in (reference, candidate))
    assert fp32 == [{"image_id": 4, "category_id": 2, "score": 0.7, "ranked": [2, 1, 3]}]
    mask = task.confident(reference, 0.9)
    assert task.detection_error(candidate, reference, mask) == pytest.approx(0.3)
    assert task.match(fp32, int8, 0.5) == [] and task.match(fp32, fp32, 0.5) == [1.0]


ANIMALS = ("cat", "dog", "elk", "emu", "fox", "owl", "yak")  # more than 5: top-5 is not trivially 1


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory):
    """An untrained YOLOv8n-cls of 7 classes exported to ONNX by Ultralytics at imgsz 64, and a val split of
    differently shaped images. Its batch norms take the statistics of random inputs first: as initialised, the
    activations fade layer by layer and every image gets the same probabilities, which would prove nothing."""
    import torch
    from ultralytics import YOLO

    from tests.test_families import tiny_detector

    folder = tmp_path_factory.mktemp("tiny_cls")
    weights = tiny_detector(folder / "model", "v8/yolov8-cls.yaml", classes=list(ANIMALS), task="classify")
    model = YOLO(str(weights))
    network = model.model.float()
    for module in network.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None  # the plain average of what it sees
    torch.manual_seed(0)
    with torch.no_grad():
        network.train()(torch.rand(16, 3, 64, 64))
    network.eval()
    model.save(str(weights))
    onnx = YOLO(str(weights)).export(format="onnx", imgsz=64, dynamic=False, simplify=False)
    data = class_folders(folder / "data", dict.fromkeys(ANIMALS, 3), sizes=((48, 64), (80, 40), (70, 70)))
    class_folders(folder / "data", dict.fromkeys(ANIMALS, 1), "train")
    return onnx, data, weights


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_an_exported_classifier_scores_as_ultralytics_predicts_and_validates_it(tiny_classifier, runtime):
    """On either runtime, every image's top class and probability are Ultralytics' predict() of the same ONNX (same
    resize and crop), and top-1/top-5 are its val() (seconds)."""
    from ultralytics import YOLO

    from qgate.evaluator import evaluate
    from qgate.runtimes import runtime_named

    onnx, data, _ = tiny_classifier
    dataset = load_class_folders(data)
    images = split_images(dataset, "val")
    ours = evaluate(runtime_named(runtime), onnx, images, dataset.names, 64, task=Classify(), precision="f32")
    theirs = [r.probs.data.numpy() for r in YOLO(onnx, task="classify").predict([str(p) for p in images], imgsz=64,
                                                                               verbose=False)]
    assert [d["category_id"] - 1 for d in ours.detections] == [int(p.argmax()) for p in theirs]
    np.testing.assert_allclose([d["score"] for d in ours.detections], [p.max() for p in theirs], atol=1e-5)
    assert len({d["category_id"] for d in ours.detections}) > 1  # the images make the model disagree
    validated = YOLO(onnx, task="classify").val(data=str(data), imgsz=64, batch=1, plots=False, verbose=False)
    print(f"tiny classifier: qgate {ours.metrics}, Ultralytics top1 {validated.top1:.4f} top5 {validated.top5:.4f}")
    assert ours.metrics == pytest.approx({"top1": validated.top1, "top5": validated.top5}, abs=1e-6)
    assert ours.metrics["top5"] < 1


def test_the_export_record_reads_a_classifier_s_output_as_probabilities_and_refuses_a_detector_s(tiny_classifier):
    """The task owns its head layout: the exported -cls model's one output is `probabilities`; a detection output
    handed to the classifier (or the classifier's to a detector) is refused naming the file and both shapes."""
    from qgate.runtimes import runtime_named

    onnx, *_ = tiny_classifier
    runtime = runtime_named("openvino")
    shapes = runtime.output_shapes(runtime.from_onnx(Path(onnx), onnx, False))
    assert Classify.head_layout(shapes, len(ANIMALS), "cls.pt", {}) == "probabilities"
    with pytest.raises(QgateError, match=r"^cls.pt: output shape \[1, 7\] is neither"):
        Detect.head_layout(shapes, len(ANIMALS), "cls.pt", {})
    with pytest.raises(QgateError, match=r"^det.pt: output shape \[1, 11, 1344\] is not \[1, 7\] class probabilities"):
        Classify.head_layout([[1, 11, 1344]], len(ANIMALS), "det.pt", {})


def test_a_dataset_of_the_other_task_is_refused_in_one_line(tmp_path, exported_project, tiny_weights,
                                                           tiny_classifier):
    """A folder of class folders given to a detector stops its first stage that reads data in one line, exit 2, no
    metrics file; a detection dataset yaml given to a classifier likewise."""
    from tests.conftest import assert_fails_cleanly, copy_project, stage_in_process, write_params

    folders = class_folders(tmp_path / "animals", dict.fromkeys(DEMO_CLASSES, 1))
    project = copy_project(exported_project, tmp_path / "project", tiny_weights, model__dataset=str(folders))
    (project / "metrics/baseline.json").unlink(missing_ok=True)
    assert_fails_cleanly("baseline", project, [f"{folders}: is a folder; a detect model is judged on an Ultralytics "
                                               "dataset yaml", "set model.dataset to that yaml"],
                         "metrics/baseline.json")

    detection_yaml = project / "data" / "data.yaml"
    _, _, classifier = tiny_classifier
    (tmp_path / "classify").mkdir()
    write_params(tmp_path / "classify", classifier, detection_yaml, imgsz=64)
    assert stage_in_process("export", tmp_path / "classify").returncode == 0  # export reads no images
    assert_fails_cleanly("baseline", tmp_path / "classify",
                         [f"{detection_yaml}: is a file; a classify model is judged on a folder of class folders",
                          "set model.dataset to that folder"], "metrics/baseline.json")


def test_a_classifier_is_calibrated_on_its_own_crops(tiny_classifier, tmp_path):
    """Calibration feeds the quantizer each image as the task prepares it: NNCF quantizes the tiny classifier on
    centre crops at imgsz (each image once), never letterboxes; an unreadable image is named with the fix."""
    from qgate.calibration import Calibration
    from qgate.params import load_params
    from qgate.runtimes import nncf_settings, runtime_named
    from tests.conftest import write_params

    onnx, data, _ = tiny_classifier
    images = split_images(load_class_folders(data), "val")
    prepared = []

    def recorded(image, imgsz):
        crop, geometry = Classify().prepare(image, imgsz)
        prepared.append((crop.shape, geometry))
        return crop, geometry

    runtime = runtime_named("openvino")
    params = load_params(write_params(tmp_path, Path(onnx), data, imgsz=64))
    int8 = nncf_settings.quantize(runtime.from_onnx(Path(onnx), onnx, False), Calibration(images, 64, recorded),
                                  params, [])
    assert prepared == [((64, 64, 3), None)] * len(images)
    assert runtime.quantizer_count(int8) > 0
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    with pytest.raises(QgateError, match=rf"^{re.escape(str(broken))}: unreadable calibration image"):
        Calibration([broken], 64, Classify().prepare).tensor(broken)


def test_a_classifier_goes_through_the_whole_pipeline_to_a_verdict_on_top1(tiny_classifier, tmp_path):
    """Every stage of `make gate`, then the judge, on a classifier with the default params (quick benchmark and
    robustness). The export record reads its output as probabilities; quantize calibrates on the train split's
    centre crops; int8_eval writes the top-1 drop with its paired interval and top-5's, no metric of a deployed
    threshold or of object sizes (a class per image has neither), and a bad case for every image whose class
    changed; divergence compares one prediction per image; the verdict and the report lead with top-1."""
    import json

    from tests.conftest import QUICK_ROBUSTNESS, judged_here, stage_in_process, verdict_is_consistent, write_params

    _, data, weights = tiny_classifier
    write_params(tmp_path, weights, data, imgsz=64, quantize__calibration_split="train",
                 robustness__severities=QUICK_ROBUSTNESS["severities"])
    for name in ("export", "baseline", "quantize", "int8_eval", "robustness", "benchmark", "divergence",
                 "sensitivity", "autofix"):
        done = stage_in_process(name, tmp_path)
        assert done.returncode == 0, (name, done.stderr)
    record = json.loads((tmp_path / "metrics/export_record.json").read_text())
    assert (record["task"], record["head_layout"], record["class_names"]) == ("classify", "probabilities",
                                                                              list(ANIMALS))
    baseline, int8 = (json.loads((tmp_path / f"metrics/{name}.json").read_text()) for name in ("baseline", "int8"))
    assert baseline["images"] == int8["images"] == 3 * len(ANIMALS)
    quantized = json.loads((tmp_path / "metrics/quantize.json").read_text())
    assert quantized["calibration_images"] == len(ANIMALS) and quantized["calibration_overlaps_val"] == 0
    assert int8["top1_drop"] == pytest.approx(baseline["top1"] - int8["top1"], abs=1e-5)
    assert int8["top1_drop_ci_low"] <= int8["top1_drop"] <= int8["top1_drop_ci_high"], sorted(int8)
    assert "top5_drop_ci_low" in int8 and int8["bootstrap_samples"] > 0
    foreign = ("at_conf", "small", "map50", "deploy_")  # a detector's keys: no box interval, threshold or size
    assert not [key for key in int8 if any(word in key for word in foreign)], int8
    fp32_classes, int8_classes = ([p["category_id"] for p in json.loads((tmp_path / path).read_text())]
                                  for path in ("artifacts/baseline_detections.json", "artifacts/int8_detections.json"))
    with open(tmp_path / "reports/bad_cases.csv") as handle:
        changed = sum(1 for row in csv.DictReader(handle) if float(row["disagreement"]) > 0)
    assert changed == int8["images_changed"] == sum(a != b for a, b in zip(fp32_classes, int8_classes))
    divergence = json.loads((tmp_path / "metrics/divergence.json").read_text())
    assert divergence["detections_compared"] == 2 * divergence["images"]  # FP32's top class, then INT8's
    robustness = json.loads((tmp_path / "metrics/robustness.json").read_text())
    assert "dark_2_top1" in robustness and not [key for key in robustness if "map" in key], sorted(robustness)

    judged = judged_here(tmp_path)
    assert "accuracy_top1_drop" in judged.stdout and "at_conf" not in judged.stdout, judged.stdout[-3000:]
    assert verdict_is_consistent(judged), judged.stdout[-3000:]
    report = (tmp_path / "reports/report.md").read_text()
    assert report.split("## Results", 1)[1].lstrip().startswith("INT8 top-1 accuracy **"), report[:600]


def test_a_range_fault_only_the_classifier_s_last_layer_reads_is_named_first_and_fails_top1(tiny_classifier,
                                                                                             tmp_path):
    """The val images filed under the FP32 model's own classes, so FP32's top-1 is 1 and every class INT8 changes is
    a drop. The quantizer of the pooled features, which only the final Linear reads, clipped to 5% of its range:
    divergence names the layer reading it first, and the judge fails accuracy_top1_drop, where the plain INT8
    model changed few classes."""
    import json
    import shutil

    import openvino as ov

    from qgate.runtimes.openvino.head_graph import output_layers
    from tests.conftest import failed_in_table, judged_here, plant_range_fault, stage_in_process, write_params

    _, data, weights = tiny_classifier
    project = tmp_path / "project"
    project.mkdir()
    write_params(project, weights, data, imgsz=64, quantize__calibration_split="train")
    for name in ("export", "baseline"):
        assert stage_in_process(name, project).returncode == 0
    images = split_images(load_class_folders(data), "val")
    predicted = json.loads((project / "artifacts/baseline_detections.json").read_text())
    relabelled = tmp_path / "fp32_labels"
    shutil.copytree(data / "train", relabelled / "train")
    for name in ANIMALS:
        (relabelled / "val" / name).mkdir(parents=True)
    for path, prediction in zip(images, sorted(predicted, key=lambda p: p["image_id"])):
        filed = relabelled / "val" / ANIMALS[prediction["category_id"] - 1]
        shutil.copy(path, filed / f"{path.parent.name}_{path.name}")
    write_params(project, weights, relabelled, imgsz=64, quantize__calibration_split="train")
    for name in ("baseline", "quantize", "int8_eval"):
        assert stage_in_process(name, project).returncode == 0, name
    assert json.loads((project / "metrics/baseline.json").read_text())["top1"] == 1.0
    plain = json.loads((project / "metrics/int8.json").read_text())

    fp32 = ov.Core().read_model(project / "models/export/model_fp32.xml")
    (linear,) = output_layers(fp32)  # the head's one learned output layer
    ops = {op.get_friendly_name(): op for op in fp32.get_ordered_ops()}
    reader = ops[linear].input_value(0).get_node().get_friendly_name()  # the flatten between the pool and the Linear
    plant_range_fault(project, reader)
    # the untrained model's own INT8 noise leaves ~10 dB of SQNR before the head, so no fault there can lose the
    # default 10 dB more (measured: 9.1 dB at 5% of the range; the next largest local drop is 7.7 dB, at 27 dB)
    write_params(project, weights, relabelled, imgsz=64, quantize__calibration_split="train",
                 divergence__local_drop_db=8)
    for name in ("int8_eval", "divergence"):
        assert stage_in_process(name, project).returncode == 0, name
    planted = json.loads((project / "metrics/int8.json").read_text())
    divergence = json.loads((project / "metrics/divergence.json").read_text())
    print(f"plain INT8 changed {plain['images_changed']} classes, planted {planted['images_changed']} of "
          f"{planted['images']}; first divergent layer {divergence['first_divergent_layer']}")
    assert divergence["first_divergent_layer"] == reader
    assert planted["images_changed"] > plain["images_changed"] and planted["top1_drop_ci_low"] > 0.01

    judged = judged_here(project)
    assert "accuracy_top1_drop" in failed_in_table(judged.stdout) and judged.returncode == 1, judged.stdout[-3000:]


def test_a_classifier_is_judged_on_top1_and_by_no_gate_of_objects(tmp_path, monkeypatch):
    """The gates follow the record's task: a classifier's drop gate is top-1's (`gates.max_top1_drop`), its
    optional gates judge top-1 too, and the gates of a deployed threshold and of small objects are not there."""
    import json

    from qgate.gates import gates
    from qgate.params import load_params
    from tests.conftest import write_params

    monkeypatch.chdir(tmp_path)
    params = load_params(write_params(tmp_path, tmp_path / "cls.pt", tmp_path / "data", gates__max_top1_drop=0.02))
    Path(params.export.record).parent.mkdir(parents=True)
    Path(params.export.record).write_text(json.dumps({"task": "classify", "class_names": list(ANIMALS)}))
    judged = {gate.name: gate for gate in gates(params)}
    assert judged["accuracy_top1_drop"].limit == 0.02 and judged["accuracy_top1_drop"].label.startswith("top-1")
    assert "accuracy_int8_top1_floor" in judged and "accuracy_top1_drop_rel" in judged
    assert not [name for name in judged if "at_conf" in name or "small" in name or "map50" in name], list(judged)
    Path(params.export.record).write_text(json.dumps({"task": "detect", "class_names": list(ANIMALS)}))
    assert {"accuracy_recall_at_conf_drop", "accuracy_small_map50_95_drop"} <= {gate.name for gate in gates(params)}
