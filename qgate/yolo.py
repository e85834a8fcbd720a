"""Load an Ultralytics checkpoint of a task qgate judges and export it to a static ONNX (a runtime takes it from
there), with clear errors; read versions for provenance."""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path
from typing import Any

from qgate.errors import QgateError
from qgate.params import ExportParams
from qgate.task_metrics import GATED_TASKS

# Exports (300 queries, [1, 300, 6]) but its decoder, evaluation parity and quantization are untested here.
UNSUPPORTED_HEADS = {"RTDETRDecoder": "RT-DETR (transformer decoder head)"}
ONNX_NAME = "model.onnx"


def load_detector(weights: str | Path) -> Any:
    """Return `ultralytics.YOLO` for a `.pt` of a gated task; QgateError for missing, corrupt or other files."""
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
        refused = _refused_global(exc)
        if refused:
            raise QgateError(f"{weights}: refused: it names {refused}, which is not an Ultralytics or torch model "
                             "class, and loading it would run that code (qgate loads model files with weights_only); "
                             "if you trust the file, keep only its model: python -c \"import torch; torch.save("
                             f"{{'model': torch.load('{weights}', weights_only=False)['model']}}, 'model_only.pt')\"")\
                from None
        raise QgateError(f"{weights}: not a readable Ultralytics checkpoint ({type(exc).__name__}); point "
                         "model.weights at a YOLO detection, segmentation, pose, OBB or classification .pt") from exc
    if task not in GATED_TASKS or not names:
        raise QgateError(f"{weights}: is a '{task}' model; qgate judges {', '.join(GATED_TASKS)} models only")
    model.task = task
    head = type(model.model.model[-1]).__name__
    if head in UNSUPPORTED_HEADS:
        raise QgateError(f"{weights}: {UNSUPPORTED_HEADS[head]} is not supported yet; qgate judges the YOLO "
                         "detection families (v3u, v5u, v6, v8, v9, v10, 11, 12, 26)")
    return model


def _refused_global(exc: BaseException) -> str | None:
    """The global a weights_only load refused ('posix.system'), from the error Ultralytics raises for it, or None."""
    while exc is not None:
        if isinstance(exc, pickle.UnpicklingError):
            found = re.search(r"GLOBAL ([\w.]+)", str(exc))
            return found.group(1) if found else "a type outside the allow-list"
        exc = exc.__cause__ or exc.__context__
    return None


def export_onnx(model, weights: str | Path, imgsz: int, cfg: ExportParams, folder: Path) -> Path:
    """`model` (loaded from `weights`) as a static batch-1 FP32 ONNX at `imgsz`, written to `folder`/model.onnx."""
    # Ultralytics writes next to the weights it loaded (`pt_path`): export from a copy, so that a read-only source
    # folder works and a <stem>.onnx beside the user's weights is neither overwritten nor moved away.
    source = folder / "weights.pt"
    shutil.copyfile(weights, source)
    model.ckpt_path = model.model.pt_path = str(source)
    # nms=False asks an NMS-free head (v10/26) for its one-to-one [1, K, 6] output; None keeps the raw layout
    exported = model.export(format="onnx", opset=cfg.opset, imgsz=imgsz, dynamic=False, simplify=True, half=False,
                            batch=1, device="cpu", nms=False if cfg.end2end else None)
    onnx_path = folder / ONNX_NAME
    Path(exported).rename(onnx_path)
    source.unlink()
    return onnx_path


def versions() -> dict[str, str]:
    """Versions of the libraries that determine the numbers, for provenance records."""
    import importlib.metadata as md

    return {f"{name.replace('-', '_')}_version": md.version(name)
            for name in ("ultralytics", "torch", "openvino", "nncf", "pycocotools")}
