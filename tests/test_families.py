"""Every Ultralytics detection family ultralytics 8.4 ships, and segment and pose models of v8, 11 and 26: a tiny
untrained model goes through export -> baseline -> quantize -> int8_eval -> divergence -> sensitivity with the
default params (and, where every group is scored, autofix), and its graph surgery is exact (every quantizer group
in float computes the FP32 output)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
import yaml

from qgate import offline
from qgate.dataset import split_images
from qgate.preprocess import image_tensor
from qgate.runtimes.openvino.head_graph import output_layers
from qgate.runtimes.openvino.ops import WEIGHTED_TYPES
from qgate.runtimes.openvino.quantizer_groups import quantizer_groups, revert
from qgate.runtimes.openvino.taps import instrument
from qgate.task_metrics import TASK_METRICS
from qgate.tasks import TASKS
from stages.demo_data import DEMO_LABELS
from tests.conftest import (DEMO_CLASSES, assert_fails_cleanly, assert_overlays_paint_every_layer, error_line,
                            make_dataset, stage, stage_in_process, write_params)

FAMILIES_FILE = Path(__file__).resolve().parent / "families.yaml"
FAMILIES = yaml.safe_load(FAMILIES_FILE.read_text())["families"]
FAMILY_DROP_HIGHS = {f.main.stat("drop_ci_high") for task in TASK_METRICS.values() for f in task.scored}
STAGES = ("export", "baseline", "quantize", "int8_eval", "divergence", "sensitivity")


def tiny_detector(folder: Path, model_yaml: str, seed: int = 0, classes: list[str] = DEMO_CLASSES,
                  builder: str = "YOLO", task: str = "detect") -> Path:
    """An untrained model of `task` built from one of Ultralytics' model yamls by `builder` (YOLO or RTDETR),
    with the demo's class names (and a pose model with the demo's keypoints)."""
    offline.ultralytics_settings_off()
    import torch
    import ultralytics

    source = Path(ultralytics.__file__).parent / "cfg" / "models" / model_yaml
    cfg = yaml.safe_load(source.read_text())
    cfg["nc"] = len(classes)
    if task == "pose":  # the demo's keypoints, which make_dataset labels
        cfg["kpt_shape"] = DEMO_LABELS["pose"].yaml["kpt_shape"]
    # Ultralytics reads the scale from the file name (yolov8n.yaml -> n); single-scale yamls keep theirs
    stem = source.stem if "scales" not in cfg else re.sub(r"^(yolov?\d+)", r"\1n", source.stem)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.yaml").write_text(yaml.safe_dump(cfg))
    torch.manual_seed(seed)
    path = str(folder / f"{stem}.yaml")
    model = ultralytics.YOLO(path, task=task) if builder == "YOLO" else getattr(ultralytics, builder)(path)
    model.model.names = dict(enumerate(classes))
    model.save(str(folder / "tiny.pt"))
    return folder / "tiny.pt"


@pytest.mark.model
@pytest.mark.parametrize("family", [pytest.param(f, id=f["name"]) for f in FAMILIES if f.get("supported", True)])
def test_family_runs_every_analysis_stage_with_default_params(tmp_path, family, monkeypatch):
    """The family's own graph through every analysis stage, the one place each family's export, head layout,
    decode rule and graph surgery meet. Seconds each; the `rank` family (11-seg) ~50 s: every quantizer group's
    float version is compiled and scored, and autofix runs, on one graph with an attention block and a task head."""
    task = family.get("task", "detect")
    dataset = make_dataset(tmp_path / "data", images=4, task=task)
    classes = list(TASKS[task].dataset(dataset).names)  # a classifier's are its sorted class folders
    weights = tiny_detector(tmp_path / "model", family["yaml"], task=task, classes=classes)
    # an untrained model is confident nowhere: with `rank`, every anchor counts, so every group is scored
    write_params(tmp_path, weights, dataset, imgsz=family.get("imgsz", 128), sensitivity__images=2,
                 sensitivity__conf=0.0 if family.get("rank") else 0.25, export__end2end=family.get("end2end", False),
                 autofix__target_drop=-1.0)  # unreachable: autofix evaluates the all-float model on this graph
    for name in STAGES + (("autofix",) if family.get("rank") else ()):  # autofix needs a ranking
        result = stage_in_process(name, tmp_path)  # 27 families: a fresh interpreter per stage cost ~8 s each
        assert result.returncode == 0, f"{family['name']} {name}: {error_line(result)}"
    record = json.loads((tmp_path / "metrics/export_record.json").read_text())
    assert record["head_layout"] == family["layout"] and record["task"] == task
    int8 = json.loads((tmp_path / "metrics/int8.json").read_text())
    assert {f.main.stat("drop_ci_high") for f in TASK_METRICS[task].scored} == set(int8) & FAMILY_DROP_HIGHS
    quantize = json.loads((tmp_path / "metrics/quantize.json").read_text())
    assert quantize["quantizer_count"] > 0 and quantize["ops_float_by_decode_rule"] > 0
    with open(tmp_path / "reports/precision_table.csv") as handle:
        decode = [r for r in csv.DictReader(handle) if r["why"].startswith("ignored by the head-decode rule")]
    assert decode and all(r["precision"] == "float" for r in decode)
    fp32 = ov.Core().read_model(tmp_path / "models/export/model_fp32.xml")
    types = {op.get_friendly_name(): op.get_type_name() for op in fp32.get_ordered_ops()}
    layers = output_layers(fp32)  # found without node names: a detector's box and class branches on two levels
    assert len(layers) >= family.get("output_layers", 4) and all(types[name] in WEIGHTED_TYPES for name in layers)
    divergence = json.loads((tmp_path / "metrics/divergence.json").read_text())
    assert divergence["layers"] > 50 and divergence["nan_inf_layers"] == 0
    sensitivity = json.loads((tmp_path / "metrics/sensitivity.json").read_text())
    assert sensitivity["groups"] > 0
    if family.get("rank"):
        with open(tmp_path / "reports/sensitivity.csv") as handle:
            assert len(list(csv.DictReader(handle))) == sensitivity["groups"] and sensitivity["top_quantizer"]
        autofix = json.loads((tmp_path / "metrics/autofix.json").read_text())
        assert autofix["needed"] == 1 and autofix["evaluations"] == 1 and autofix["reached"] == 0
    _every_group_float_is_fp32(tmp_path, split_images(TASKS[task].dataset(dataset), "val")[0],
                               family.get("imgsz", 128))
    assert_overlays_paint_every_layer(tmp_path, tmp_path / "models/export/model.onnx", monkeypatch)



def _every_group_float_is_fp32(project: Path, image: Path, imgsz: int) -> None:
    """Graph surgery on this family's graph: all groups float is the FP32 model; attention groups alone compile.

    Compared at every op that reads a quantizer: an untrained model's head output hides INT8 error (its
    maps are nearly constant), so the output alone would pass even if nothing were reverted.
    """
    core = ov.Core()
    fp32 = core.read_model(project / "models/export/model_fp32.xml")
    int8 = core.read_model(project / "models/int8/model_int8.xml")
    groups = quantizer_groups(int8)
    probes = [(name, 0) for group in groups for name in group.ops]
    x = image_tensor(image, imgsz)
    config = {"INFERENCE_PRECISION_HINT": "f32"}

    def probed(model: ov.Model) -> list[np.ndarray]:
        return [t.copy() for t in core.compile_model(instrument(model, probes), "CPU", config)(x).to_tuple()]

    reference = probed(fp32)
    assert not all(np.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(probed(int8), reference))  # can fail
    for got, want in zip(probed(revert(int8, fp32, groups, set(range(len(groups))))), reference):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    types = {op.get_friendly_name(): op.get_type_name() for op in int8.get_ordered_ops()}
    for index, group in enumerate(groups):  # attention (activation x activation MatMul) alone
        if any(types[name] == "MatMul" for name in group.ops):  # its outputs only: compiling probes costs ~0.7 s
            alone = core.compile_model(revert(int8, fp32, groups, {index}), "CPU", config)(x).to_tuple()[0]
            assert alone.shape == reference[0].shape and np.isfinite(alone).all(), group.ops[0]


@pytest.mark.model
@pytest.mark.parametrize("family", [pytest.param(f, id=f["name"]) for f in FAMILIES if not f.get("supported", True)])
def test_unsupported_family_is_a_clear_error(tmp_path, family):
    weights = tiny_detector(tmp_path / "model", family["yaml"], builder=family.get("builder", "YOLO"),
                            task=family.get("task", "detect"))
    write_params(tmp_path, weights, make_dataset(tmp_path / "data", images=1),
                 export__end2end=family.get("end2end", False))
    result = stage("export", tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert family["error"] in error_line(result) and "tiny.pt" in error_line(result)
    assert not (tmp_path / "metrics/export_record.json").exists()


@pytest.mark.model
def test_a_pose_dataset_whose_sigmas_do_not_fit_the_keypoints_stops_export_in_one_line(tmp_path):
    weights = tiny_detector(tmp_path / "model", "v8/yolov8-pose.yaml", task="pose")
    dataset = make_dataset(tmp_path / "data", images=1, task="pose")
    spec = yaml.safe_load(dataset.read_text())
    dataset.write_text(yaml.safe_dump({**spec, "kpt_oks_sigmas": [0.1] * (spec["kpt_shape"][0] + 1)}))
    write_params(tmp_path, weights, dataset)
    expected = [f"{dataset}: kpt_oks_sigmas must be {spec['kpt_shape'][0]} positive numbers", "remove the key"]
    line = assert_fails_cleanly("export", tmp_path, expected, "metrics/export_record.json")
    assert not (tmp_path / "models/export").exists(), line  # the IR is not left half-written either
