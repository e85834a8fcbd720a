"""Cost of the divergence stage: wall time and peak memory for 8 and 32 images, vs one plain inference.

Each measurement runs `python -m stages.divergence` as its own process, polled for peak RSS. The
ratio divides the stage's wall time by one plain FP32 + one INT8 inference of the same IRs.

    python benchmarks/divergence.py                                   # the demo (after `dvc repro`)
    python benchmarks/divergence.py --reference ../shared/reference   # yolov8n at 640 (builds the IRs first)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qgate import offline  # noqa: E402

offline.configure()

import numpy as np  # noqa: E402
import openvino as ov  # noqa: E402


def run_stage(name: str, params_file: Path, cwd: Path) -> tuple[float, float]:
    """Run one stage as a child process; return (wall seconds, peak RSS in GB)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", f"stages.{name}", "--params", str(params_file)], cwd=cwd,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, process = 0, psutil.Process(child.pid)
    while child.poll() is None:
        try:
            peak = max(peak, process.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    if child.returncode:
        sys.exit(f"error: stage {name} failed: {child.stderr.read()[-500:]}")
    return time.perf_counter() - start, peak / 2**30


def plain_pair_seconds(fp32: Path, int8: Path, imgsz: int, precision: str) -> float:
    """Median time of one FP32 plus one INT8 inference of a float image tensor."""
    core, config = ov.Core(), {"INFERENCE_PRECISION_HINT": precision}
    models = [core.compile_model(str(p), "CPU", config) for p in (fp32, int8)]
    tensor = np.random.default_rng(0).random((1, 3, imgsz, imgsz), dtype=np.float32)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        for model in models:
            model(tensor)
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def _write_params(base: dict, work: Path, images: int) -> Path:
    outputs = {key: str(work / f"{images}_{Path(base['divergence'][key]).name}")
               for key in ("csv", "table", "plot", "metrics")}  # never the repository's own reports
    params = {**base, "divergence": {**base["divergence"], "images": images, **outputs}}
    path = work / f"params_{images}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def main() -> None:
    """Prepare the IRs (reference) or use the demo's, then measure 8 and 32 images."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="a reference case folder (models/yolov8n.pt, data/coco128)")
    parser.add_argument("--images", type=int, nargs="+", default=[8, 32])
    args = parser.parse_args()
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        work, cwd = Path(tmp), ROOT
        if args.reference:
            cwd = work
            reference = args.reference.resolve()
            base["model"].update(weights=str(reference / "models" / "yolov8n.pt"), imgsz=640,
                                 dataset=str(reference / "data" / "coco128.yaml"), data_dir=str(reference / "data"))
            base["quantize"].update(calibration_split="train", allow_val_calibration=True)
            params_file = _write_params(base, work, args.images[0])
            for name in ("export", "baseline", "quantize", "int8_eval"):
                print(f"preparing the reference case: {name}", flush=True)
                run_stage(name, params_file, cwd)
        fp32 = cwd / base["export"]["out_dir"] / "model_fp32.xml"
        int8 = cwd / base["quantize"]["out_dir"] / "model_int8.xml"
        pair = plain_pair_seconds(fp32, int8, base["model"]["imgsz"], base["baseline"]["inference_precision"])
        print(f"\n{base['model']['weights']} at imgsz {base['model']['imgsz']}; one plain FP32 + INT8 inference: "
              f"{pair * 1000:.0f} ms")
        print(f"{'images':>7}{'seconds':>10}{'peak GB':>10}{'x one pair':>12}{'x pairs':>10}")
        for images in args.images:
            seconds, peak = run_stage("divergence", _write_params(base, work, images), cwd)
            print(f"{images:>7}{seconds:>10.1f}{peak:>10.2f}{seconds / pair:>12.0f}{seconds / (pair * images):>10.1f}")


if __name__ == "__main__":
    main()
