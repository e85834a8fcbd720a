"""Side by side, same IR and images, one run: qgate's evaluator vs `YOLO('<dir>_openvino_model').val()`.

Prints images/s (wall time of the whole call: model compile, every image, mAP) and mAP50-95 of both, and the
ratio. Both run the IR at the same inference precision (f32 by default): Ultralytics would otherwise get BF16
on CPUs that have it, which is faster and not what the baseline measures.

    python benchmarks/evaluator.py                    # the demo (after `dvc repro baseline`)
    python benchmarks/evaluator.py --reference ../shared/reference
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

import openvino as ov  # noqa: E402

from qgate.dataset import load_dataset, split_images, ultralytics_yaml  # noqa: E402
from qgate.evaluator import evaluate  # noqa: E402
from qgate.runtimes.openvino.inference import compile_model  # noqa: E402
from qgate.runtimes.openvino import OpenVINO  # noqa: E402
from qgate.params import load_params  # noqa: E402
from qgate.artifacts import fp32_model  # noqa: E402


def ultralytics_model_dir(ir: Path, names: tuple[str, ...], imgsz: int, precision: str, dest: Path) -> Path:
    """The same IR in Ultralytics' `<name>_openvino_model/` layout, pinned to `precision` via rt_info."""
    folder = dest / "model_openvino_model"
    folder.mkdir(parents=True)
    model = ov.Core().read_model(ir)
    # Ultralytics compiles with its own Core and no precision hint; runtime_options in rt_info apply at compile.
    model.set_rt_info(precision, ["runtime_options", "INFERENCE_PRECISION_HINT"])
    ov.save_model(model, folder / "model.xml", compress_to_fp16=False)
    metadata = {"stride": 32, "task": "detect", "batch": 1, "imgsz": [imgsz, imgsz], "channels": 3,
                "names": dict(enumerate(names)), "args": {"batch": 1, "half": False, "int8": False,
                                                          "dynamic": False, "nms": False}}
    (folder / "metadata.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    return folder


def run_qgate(ir: Path, images: list[Path], names, imgsz: int, precision: str) -> tuple[float, float, float]:
    """(wall seconds, loop seconds, mAP50-95); the loop is predict + pycocotools, after compiling."""
    start = time.perf_counter()
    compiled = compile_model(ir, precision)
    loop_start = time.perf_counter()
    result = evaluate(OpenVINO(), compiled, images, names, imgsz)
    end = time.perf_counter()
    return end - start, end - loop_start, result.value("map50_95")


def run_ultralytics(model_dir: Path, data_yaml: Path, imgsz: int, work: Path) -> tuple[float, float, float]:
    """(wall seconds, loop seconds, mAP50-95); the loop is on_val_start..on_val_end, after model load."""
    from ultralytics import YOLO

    marks = {}
    model = YOLO(str(model_dir), task="detect")
    model.add_callback("on_val_start", lambda _: marks.setdefault("start", time.perf_counter()))
    model.add_callback("on_val_end", lambda _: marks.setdefault("end", time.perf_counter()))
    start = time.perf_counter()
    result = model.val(data=str(data_yaml), imgsz=imgsz, batch=1, rect=False, plots=False, device="cpu",
                       verbose=False, project=str(work), name="val", exist_ok=True)
    return time.perf_counter() - start, marks["end"] - marks["start"], float(result.box.map)


def main() -> None:
    """Parse arguments, run both evaluators `--repeats` times interleaved, print medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="a reference case folder (models/yolov8n.pt, data/coco128)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precision", default="f32")
    args = parser.parse_args()
    offline.ultralytics_settings_off()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ir, dataset_yaml, imgsz = _case(args, work)
        dataset = load_dataset(dataset_yaml)
        images = split_images(dataset, "val")
        model_dir = ultralytics_model_dir(ir, dataset.names, imgsz, args.precision, work)
        # Ultralytics writes a labels .cache beside the labels: give it a copy, never the source folder.
        shutil.copytree(dataset.root, work / "data")
        data_yaml = ultralytics_yaml(dataclasses.replace(dataset, root=work / "data"), work / "data.yaml")
        ours, theirs = [], []
        for _ in range(args.repeats):  # interleaved so drift on a noisy VM hits both alike
            ours.append(run_qgate(ir, images, dataset.names, imgsz, args.precision))
            theirs.append(run_ultralytics(model_dir, data_yaml, imgsz, work))
            shutil.rmtree(work / "val", ignore_errors=True)
    _report(len(images), imgsz, args.precision, ours, theirs)


def _case(args, work: Path) -> tuple[Path, Path, int]:
    if args.reference is None:
        params = load_params()
        ir = fp32_model(params)
        if not ir.exists():
            sys.exit(f"error: {ir}: missing; run `dvc repro export` first")
        return ir, Path(params.model.dataset), params.model.imgsz
    from ultralytics import YOLO

    onnx = YOLO(str(args.reference / "models" / "yolov8n.pt")).export(
        format="onnx", opset=17, imgsz=640, dynamic=False, simplify=True)
    ir = work / "reference_fp32.xml"
    ov.save_model(ov.convert_model(onnx), ir, compress_to_fp16=False)
    Path(onnx).unlink()
    return ir, args.reference / "data" / "coco128.yaml", 640


def _report(images: int, imgsz: int, precision: str, ours: list, theirs: list) -> None:
    ours_m = [statistics.median(run[i] for run in ours) for i in range(2)]
    theirs_m = [statistics.median(run[i] for run in theirs) for i in range(2)]
    print(f"\n{images} images at imgsz {imgsz}, inference precision {precision}, median of {len(ours)} runs")
    print("loop = every image read, inferred, decoded and scored; wall = the whole call, model load included")
    print(f"{'evaluator':<20}{'loop img/s':>12}{'wall img/s':>12}{'mAP50-95':>10}")
    for name, (wall, loop), runs in (("qgate", ours_m, ours), ("ultralytics val()", theirs_m, theirs)):
        print(f"{name:<20}{images / loop:>12.1f}{images / wall:>12.1f}{runs[0][2]:>10.4f}")
    print(f"ratio qgate / ultralytics: loop {theirs_m[1] / ours_m[1]:.2f}x, wall {theirs_m[0] / ours_m[0]:.2f}x; "
          f"mAP50-95 difference {ours[0][2] - theirs[0][2]:+.4f}")


if __name__ == "__main__":
    main()
