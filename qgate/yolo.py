"""Load an Ultralytics checkpoint of a task qgate judges, with clear errors; read versions for provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qgate.errors import QgateError
from qgate.task_metrics import GATED_TASKS

# Exports (300 queries, [1, 300, 6]) but its decoder, evaluation parity and quantization are untested here.
UNSUPPORTED_HEADS = {"RTDETRDecoder": "RT-DETR (transformer decoder head)"}


def load_detector(weights: str | Path) -> Any:
    """Return `ultralytics.YOLO` for a detection or segment `.pt`; QgateError for missing, corrupt or other files."""
    weights = Path(weights)
    if not weights.is_file():
        raise QgateError(f"{weights}: weights not found; set model.weights in params.yaml "
                         "(or run `dvc repro demo_train` for the demo model)")
    from ultralytics import YOLO

    try:
        model = YOLO(str(weights))
        task = getattr(model.model, "task", None) or model.task
        names = model.names
    except Exception as exc:  # torch/pickle raise many types for a corrupt or foreign file
        raise QgateError(f"{weights}: not a readable Ultralytics checkpoint ({type(exc).__name__}); "
                         "point model.weights at a YOLO detection, segmentation or pose .pt") from exc
    if task not in GATED_TASKS or not names:
        raise QgateError(f"{weights}: is a '{task}' model; qgate judges {', '.join(GATED_TASKS)} models only "
                         "(OBB and classification are not supported yet)")
    model.task = task
    head = type(model.model.model[-1]).__name__
    if head in UNSUPPORTED_HEADS:
        raise QgateError(f"{weights}: {UNSUPPORTED_HEADS[head]} is not supported yet; qgate judges the YOLO "
                         "detection families (v3u, v5u, v6, v8, v9, v10, 11, 12, 26)")
    return model


def versions() -> dict[str, str]:
    """Versions of the libraries that determine the numbers, for provenance records."""
    import importlib.metadata as md

    return {f"{name.replace('-', '_')}_version": md.version(name)
            for name in ("ultralytics", "torch", "openvino", "nncf", "pycocotools")}
