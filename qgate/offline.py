"""Settings every qgate process runs with: no downloads, no telemetry, project-local Ultralytics config, and model
files loaded as data (Ultralytics' weights_only loading), never as code."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ULTRALYTICS_CONFIG_DIR = PROJECT_ROOT / ".cache" / "ultralytics"
SAFE_LOAD_FLAG = "ULTRALYTICS_SAFE_LOAD"  # read once, when ultralytics.utils is imported

_INTEGRATIONS_OFF = {
    "dvc": False, "mlflow": False, "tensorboard": False, "wandb": False,
    "clearml": False, "comet": False, "raytune": False, "sync": False, "neptune": False,
    "hub": False,
}


def configure() -> None:
    """Set the environment so that Ultralytics, OpenVINO and DVC never touch the network and no model file runs code.

    Must run before `ultralytics` is imported: it reads these variables at import time.
    """
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_AUTOINSTALL", "False")
    os.environ.setdefault("YOLO_CONFIG_DIR", str(ULTRALYTICS_CONFIG_DIR))
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    _load_models_as_data()
    os.environ.setdefault("MPLBACKEND", "Agg")
    _install_font(Path(os.environ["YOLO_CONFIG_DIR"]))
    _opt_out_of_openvino_telemetry()


def _load_models_as_data() -> None:
    # A .pt is a pickle: by default Ultralytics unpickles it with weights_only=False, which runs any callable the
    # file names (a crafted checkpoint's os.system did, in export). The flag makes every load torch's weights_only
    # one, with Ultralytics' allow-list of model classes; set, not defaulted, so no environment switches it off.
    # Child processes (Ray workers, DVC's stages, benchmark scripts) inherit it.
    os.environ[SAFE_LOAD_FLAG] = "1"
    utils = sys.modules.get("ultralytics.utils")
    if utils is not None and not getattr(utils, "SAFE_LOAD", False):
        raise RuntimeError("ultralytics was imported before qgate.offline.configure(): its model loading would "
                           "still run code from model files; call configure() first")


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
