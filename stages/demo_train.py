"""Demo dataset -> YOLOv8n of `demo.task` trained from scratch (yolov8n[-seg|-pose|-obb|-cls].yaml, CPU, seeded) ->
weights + Ultralytics' val metrics of each scored family (box mAP, and mask's or keypoints'; top-1 and top-5)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from qgate import offline
from qgate.cli import run_stage
from qgate.dataset import load_dataset, ultralytics_yaml
from qgate.io import write_json
from qgate.params import DemoParams, Params
from qgate.task_metrics import TASK_METRICS

log = logging.getLogger(__name__)

DEMO_MODELS = {"detect": "yolov8n.yaml", "segment": "yolov8n-seg.yaml", "pose": "yolov8n-pose.yaml",
               "obb": "yolov8n-obb.yaml", "classify": "yolov8n-cls.yaml"}  # from scratch: nothing is downloaded
# Ultralytics' training augmentations a task's demo turns off. A classifier's: its random crops keep at least 80% of
# the image (the default, 50%, cuts the one shape that is the label), no random erasing (it hides the shape), no
# RandAugment. On an EPYC without avx_vnni the classify demo reached top-1 0.82 with these at 12 epochs, 0.745 with
# Ultralytics' defaults, 0.975 with these at 24 (docs/tasks.md).
DEMO_AUGMENTATION = {"classify": {"scale": 0.2, "erasing": 0.0, "auto_augment": None}}
# a scored family's (main, second) metric in Ultralytics' val results
ULTRALYTICS_RESULTS: dict[str, Callable] = {
    "bbox": lambda result: (result.box.map, result.box.map50),
    "segm": lambda result: (result.seg.map, result.seg.map50),
    "keypoints": lambda result: (result.pose.map, result.pose.map50),
    "rotated": lambda result: (result.box.map, result.box.map50),
    "classes": lambda result: (result.top1, result.top5),
}


def main(params: Params) -> dict:
    """Train, copy the final weights to `demo.weights`, and return the Ultralytics val mAP."""
    demo = params.demo
    weights, metrics_path = Path(demo.weights), Path(demo.metrics)
    metrics_path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        log.info("[1/2] demo_train: %d epochs at imgsz %d", demo.epochs, demo.imgsz)
        trained = train_on_demo_data(DEMO_MODELS[demo.task], demo, Path(tmp))
        train_seconds = time.perf_counter() - start
        log.info("[2/2] demo_train: validating on the val split")
        result = validate_on_demo_data(trained, demo, Path(tmp))
        weights.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trained, weights.with_suffix(".tmp"))
        weights.with_suffix(".tmp").rename(weights)
    metrics = {}
    for family in TASK_METRICS[demo.task].scored:
        main_value, second_value = ULTRALYTICS_RESULTS[family.name](result)
        metrics |= {family.main.key: round(float(main_value), 4), family.second.key: round(float(second_value), 4)}
    metrics |= {"epochs": demo.epochs, "imgsz": demo.imgsz, "train_seconds": round(train_seconds, 1)}
    write_json(metrics_path, metrics)
    return metrics


def train_on_demo_data(model_yaml: str, demo: DemoParams, work: Path) -> Path:
    """Train `model_yaml` (any Ultralytics yaml of the demo data's task, e.g. yolo11n.yaml) from scratch on the demo
    data with the `demo:` schedule; return the final weights under `work`. Other families' tests and benchmarks use
    it."""
    offline.ultralytics_settings_off()
    _use_all_cores()
    from ultralytics import YOLO

    data = ultralytics_data(demo, work)
    # nbs=batch: one optimizer step per batch. Ultralytics' default (nbs 64) accumulates 4-8 batches,
    # which leaves a few dozen steps in a CPU budget. Mosaic off: it halves object size and slows
    # convergence; the synthetic val split has the training distribution anyway.
    YOLO(model_yaml).train(
        data=data, epochs=demo.epochs, imgsz=demo.imgsz, batch=demo.batch, nbs=demo.batch,
        optimizer=demo.optimizer, lr0=demo.lr0, warmup_epochs=1, mosaic=0.0, close_mosaic=0,
        seed=demo.seed, deterministic=True, workers=0, device="cpu", amp=False, plots=False, val=False,
        verbose=False, project=str(work), name="train", exist_ok=True, **DEMO_AUGMENTATION.get(demo.task, {}))
    return work / "train" / "weights" / "last.pt"


def validate_on_demo_data(weights: Path, demo: DemoParams, work: Path):
    """Ultralytics' own val of `weights` on the demo's val split at the static size exported models run."""
    from ultralytics import YOLO

    return YOLO(str(weights)).val(data=ultralytics_data(demo, work), imgsz=demo.imgsz, batch=demo.batch, rect=False,
                                  plots=False, device="cpu", project=str(work), name="val", verbose=False)


def ultralytics_data(demo: DemoParams, work: Path) -> str:
    """What Ultralytics' `data=` takes for the demo's dataset: a copy of its yaml with an absolute `path` (under
    `work`), or a classify demo's folder."""
    dataset = Path(demo.dataset)
    if dataset.is_dir():  # Ultralytics' classification layout: the folder of split folders is the dataset
        return str(dataset.resolve())
    return str(ultralytics_yaml(load_dataset(dataset), work / "demo.yaml"))


def _use_all_cores() -> None:
    # Ultralytics trains on cpu_count - 1 threads: one of two cores here, which doubles the epoch time.
    import ultralytics.utils.torch_utils as torch_utils

    torch_utils.NUM_THREADS = os.cpu_count() or 1


if __name__ == "__main__":
    run_stage(main, __doc__)
