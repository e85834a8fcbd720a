"""Demo dataset -> YOLOv8n trained from scratch (yolov8n.yaml, CPU, seeded) -> weights + val mAP."""

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
from qgate.params import Params

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Train, copy the final weights to `demo.weights`, and return the Ultralytics val mAP."""
    demo = params.demo
    weights, metrics_path = Path(demo.weights), Path(demo.metrics)
    metrics_path.unlink(missing_ok=True)
    dataset = load_dataset(Path(demo.data_dir) / "demo.yaml")
    offline.ultralytics_settings_off()
    _use_all_cores()
    from ultralytics import YOLO

    with tempfile.TemporaryDirectory() as tmp:
        data_yaml = ultralytics_yaml(dataset, Path(tmp) / "demo.yaml")
        start = time.perf_counter()
        log.info("[1/2] demo_train: %d epochs at imgsz %d", demo.epochs, demo.imgsz)
        # nbs=batch: one optimizer step per batch. Ultralytics' default (nbs 64) accumulates 4-8 batches,
        # which leaves a few dozen steps in a CPU budget. Mosaic off: it halves object size and slows
        # convergence; the synthetic val split has the training distribution anyway.
        YOLO("yolov8n.yaml", task="detect").train(
            data=str(data_yaml), epochs=demo.epochs, imgsz=demo.imgsz, batch=demo.batch, nbs=demo.batch,
            optimizer=demo.optimizer, lr0=demo.lr0, warmup_epochs=1, mosaic=0.0, close_mosaic=0,
            seed=demo.seed, deterministic=True, workers=0, device="cpu", amp=False, plots=False, val=False,
            verbose=False, project=tmp, name="train", exist_ok=True)
        train_seconds = time.perf_counter() - start
        trained = Path(tmp) / "train" / "weights" / "last.pt"
        log.info("[2/2] demo_train: validating on the val split")
        result = YOLO(str(trained)).val(data=str(data_yaml), imgsz=demo.imgsz, batch=demo.batch, rect=False,
                                        plots=False, device="cpu", project=tmp, name="val", verbose=False)
        weights.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trained, weights.with_suffix(".tmp"))
        weights.with_suffix(".tmp").rename(weights)
    metrics = {"map50_95": round(float(result.box.map), 4), "map50": round(float(result.box.map50), 4),
               "epochs": demo.epochs, "imgsz": demo.imgsz, "train_seconds": round(train_seconds, 1)}
    write_json(metrics_path, metrics)
    return metrics


def _use_all_cores() -> None:
    # Ultralytics trains on cpu_count - 1 threads: one of two cores here, which doubles the epoch time.
    import ultralytics.utils.torch_utils as torch_utils

    torch_utils.NUM_THREADS = os.cpu_count() or 1


if __name__ == "__main__":
    run_stage(main, __doc__)
