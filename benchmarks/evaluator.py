"""Side by side, same IR and images, one run: qgate's evaluator vs `YOLO('<dir>_openvino_model').val()`.

Prints images/s (wall time of the whole call: model compile, every image, mAP) and mAP50-95 of both, and the
ratio. Both run the IR at the same inference precision (f32 by default): Ultralytics would otherwise get BF16
on CPUs that have it, which is faster and not what the baseline measures.

    python benchmarks/evaluator.py                    # the demo (after `dvc repro baseline`)
    python benchmarks/evaluator.py --reference ../shared/reference
"""

from __future__ import annotations

import argparse
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
from qgate.evaluator import compile_model, evaluate  # noqa: E402
from qgate.params import load_params  # noqa: E402
from stages.export import IR_NAME  # noqa: E402


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


def run_qgate(ir: Path, images: list[Path], names, imgsz: int, precision: str) -> tuple[float, float]:
    start = time.perf_counter()
    result = evaluate(compile_model(ir, precision), images, names, imgsz)
    return time.perf_counter() - start, result.map50_95


def run_ultralytics(model_dir: Path, data_yaml: Path, imgsz: int, work: Path) -> tuple[float, float]:
    from ultralytics import YOLO

    start = time.perf_counter()
    result = YOLO(str(model_dir), task="detect").val(
        data=str(data_yaml), imgsz=imgsz, batch=1, rect=False, plots=False, device="cpu", verbose=False,
        project=str(work), name="val", exist_ok=True)
    return time.perf_counter() - start, float(result.box.map)


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
        data_yaml = ultralytics_yaml(dataset, work / "data.yaml")
        ours, theirs = [], []
        for _ in range(args.repeats):  # interleaved so drift on a noisy VM hits both alike
            ours.append(run_qgate(ir, images, dataset.names, imgsz, args.precision))
            theirs.append(run_ultralytics(model_dir, data_yaml, imgsz, work))
            shutil.rmtree(work / "val", ignore_errors=True)
    _report(len(images), imgsz, args.precision, ours, theirs)


def _case(args, work: Path) -> tuple[Path, Path, int]:
    if args.reference is None:
        params = load_params()
        ir = Path(params.export.out_dir) / IR_NAME
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
    ours_s, theirs_s = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in theirs)
    print(f"\n{images} images at imgsz {imgsz}, inference precision {precision}, median of {len(ours)} runs")
    print(f"{'evaluator':<22}{'images/s':>10}{'seconds':>10}{'mAP50-95':>10}")
    print(f"{'qgate':<22}{images / ours_s:>10.1f}{ours_s:>10.2f}{ours[0][1]:>10.4f}")
    print(f"{'ultralytics val()':<22}{images / theirs_s:>10.1f}{theirs_s:>10.2f}{theirs[0][1]:>10.4f}")
    print(f"speed ratio (qgate / ultralytics): {theirs_s / ours_s:.2f}x; "
          f"mAP50-95 difference: {ours[0][1] - theirs[0][1]:+.4f}")


if __name__ == "__main__":
    main()
