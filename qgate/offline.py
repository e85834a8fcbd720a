"""Offline settings for every stage: no downloads, no telemetry, project-local Ultralytics config."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ULTRALYTICS_CONFIG_DIR = PROJECT_ROOT / ".cache" / "ultralytics"

_INTEGRATIONS_OFF = {
    "dvc": False, "mlflow": False, "tensorboard": False, "wandb": False,
    "clearml": False, "comet": False, "raytune": False, "sync": False, "neptune": False,
    "hub": False,
}


def configure() -> None:
    """Set the environment so that Ultralytics, OpenVINO and DVC never touch the network.

    Must run before `ultralytics` is imported: it reads these variables at import time.
    """
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_AUTOINSTALL", "False")
    os.environ.setdefault("YOLO_CONFIG_DIR", str(ULTRALYTICS_CONFIG_DIR))
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    _install_font(Path(os.environ["YOLO_CONFIG_DIR"]))
    _opt_out_of_openvino_telemetry()


def _install_font(config_dir: Path) -> None:
    # Ultralytics' check_font('Arial.ttf') downloads the font on every train/val unless it is here.
    target = config_dir / "Ultralytics" / "Arial.ttf"
    if target.exists():
        return
    import matplotlib

    source = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _opt_out_of_openvino_telemetry() -> None:
    # Same file `opt_in_out --opt_out` writes; without it OpenVINO/NNCF send ~30 requests per run.
    consent = Path.home() / "intel" / "openvino_telemetry"
    if consent.exists():
        return
    try:
        consent.parent.mkdir(parents=True, exist_ok=True)
        consent.write_text("0")
    except OSError:
        pass  # read-only home: telemetry cannot reach the network here anyway


def ultralytics_settings_off() -> None:
    """Turn off every Ultralytics integration (DVC, MLflow, W&B, ...) that could log or upload."""
    from ultralytics import settings

    settings.update({k: v for k, v in _INTEGRATIONS_OFF.items() if k in settings})
