"""Demo dataset -> YOLOv8n of `demo.task` trained from scratch (yolov8n[-seg|-pose].yaml, CPU, seeded) -> weights +
Ultralytics' val mAP of each scored family (box, and mask or keypoint)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from qgate import offline
from qgate.cli import run_stage
from qgate.dataset import load_dataset, ultralytics_yaml
from qgate.io import write_json
from qgate.params import DemoParams, Params
from qgate.task_metrics import TASK_METRICS

log = logging.getLogger(__name__)

DEMO_MODELS = {"detect": "yolov8n.yaml", "segment": "yolov8n-seg.yaml", "pose": "yolov8n-pose.yaml"}  # from scratch:
# nothing is downloaded
ULTRALYTICS_RESULTS = {"bbox": "box", "segm": "seg", "keypoints": "pose"}  # iouType -> Ultralytics' metrics attribute


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
        scored = getattr(result, ULTRALYTICS_RESULTS[family.iou_type])
        metrics |= {family.main.key: round(float(scored.map), 4),
                    family.second.key: round(float(scored.map50), 4)}
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

    data_yaml = ultralytics_yaml(load_dataset(Path(demo.data_dir) / "demo.yaml"), work / "demo.yaml")
    # nbs=batch: one optimizer step per batch. Ultralytics' default (nbs 64) accumulates 4-8 batches,
    # which leaves a few dozen steps in a CPU budget. Mosaic off: it halves object size and slows
    # convergence; the synthetic val split has the training distribution anyway.
    YOLO(model_yaml).train(
        data=str(data_yaml), epochs=demo.epochs, imgsz=demo.imgsz, batch=demo.batch, nbs=demo.batch,
        optimizer=demo.optimizer, lr0=demo.lr0, warmup_epochs=1, mosaic=0.0, close_mosaic=0,
        seed=demo.seed, deterministic=True, workers=0, device="cpu", amp=False, plots=False, val=False,
        verbose=False, project=str(work), name="train", exist_ok=True)
    return work / "train" / "weights" / "last.pt"


def validate_on_demo_data(weights: Path, demo: DemoParams, work: Path):
    """Ultralytics' own val of `weights` on the demo's val split at the static size exported models run."""
    from ultralytics import YOLO

    return YOLO(str(weights)).val(data=str(work / "demo.yaml"), imgsz=demo.imgsz, batch=demo.batch, rect=False,
                                  plots=False, device="cpu", project=str(work), name="val", verbose=False)


def _use_all_cores() -> None:
    # Ultralytics trains on cpu_count - 1 threads: one of two cores here, which doubles the epoch time.
    import ultralytics.utils.torch_utils as torch_utils

    torch_utils.NUM_THREADS = os.cpu_count() or 1


if __name__ == "__main__":
    run_stage(main, __doc__)
