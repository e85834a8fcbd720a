"""Side by side on one FP32 model, calibration set and val split: three ways to get an INT8 OpenVINO model.

(a) qgate's `quantize` stage with the params.yaml defaults, (b) Ultralytics' own
`export(format='openvino', int8=True)` calibrated on the same images, (c) NNCF's
`quantize_with_accuracy_control` (max_drop the gate's limit, validated on the val split). Each INT8 model is
scored by qgate's evaluator and timed by benchmark_app with the `benchmark:` settings; the FP32 IR is
measured the same way, in the same run.

    python benchmarks/peers.py                                     # the demo (after `dvc repro export`)
    python benchmarks/peers.py --reference ../shared/reference     # official yolov8n + COCO128 at 640
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

import openvino as ov  # noqa: E402

from qgate.dataset import load_dataset, split_images, ultralytics_yaml  # noqa: E402
from qgate.evaluator import evaluate  # noqa: E402
from qgate.pipeline import baseline_postprocess  # noqa: E402
from qgate.runtimes.openvino.inference import compile_model  # noqa: E402
from qgate.runtimes.openvino import OpenVINO  # noqa: E402
from qgate.params import Params, load_params  # noqa: E402
from benchmarks.workspace import ROOT, inside, rooted  # noqa: E402
from qgate.artifacts import fp32_model  # noqa: E402
from qgate.calibration import Calibration  # noqa: E402
from qgate.precision import rule_scope  # noqa: E402
from qgate.runtimes import nncf_settings  # noqa: E402
from qgate.runtimes.openvino.benchmark_app import run_benchmark_app  # noqa: E402


def reference_params(params: Params, reference: Path) -> Params:
    """The repository's params pointed at the reference case: COCO128 has no calib split, so train (= val)."""
    model = dataclasses.replace(params.model, weights=str(reference / "models" / "yolov8n.pt"),
                                dataset=str(reference / "data" / "coco128.yaml"),
                                data_dir=str(reference / "data" / "coco128"), imgsz=640)
    q = dataclasses.replace(params.quantize, calibration_split="train", allow_val_calibration=True)
    return dataclasses.replace(params, model=model, quantize=q)


def run_qgate(params: Params, work: Path) -> tuple[Path, float]:
    dataset = load_dataset(params.model.dataset)
    calibration = Calibration.of(params, dataset)
    start = time.perf_counter()
    fp32 = ov.Core().read_model(fp32_model(params))
    model = nncf_settings.quantize(fp32, calibration, params, list(rule_scope(OpenVINO(), fp32, params)))
    seconds = time.perf_counter() - start
    ov.save_model(model, work / "qgate_int8.xml", compress_to_fp16=False)
    return work / "qgate_int8.xml", seconds


def run_ultralytics(params: Params, work: Path) -> tuple[Path, float]:
    from ultralytics import YOLO

    dataset = load_dataset(params.model.dataset)
    # A copy: Ultralytics writes a labels .cache beside the labels, and the source folder stays untouched.
    shutil.copytree(dataset.root, work / "ultralytics_data")
    data = ultralytics_yaml(dataclasses.replace(dataset, root=work / "ultralytics_data"), work / "calib.yaml")
    spec = yaml.safe_load(data.read_text())
    spec["val"] = dataset.splits[params.quantize.calibration_split]  # Ultralytics calibrates on `split`
    data.write_text(yaml.safe_dump(spec))
    weights = work / "weights.pt"
    shutil.copyfile(params.model.weights, weights)
    start = time.perf_counter()
    folder = YOLO(str(weights)).export(format="openvino", int8=True, data=str(data), imgsz=params.model.imgsz,
                                       batch=1, dynamic=False)
    seconds = time.perf_counter() - start
    return next(Path(folder).glob("*.xml")), seconds


def run_accuracy_control(params: Params, work: Path) -> tuple[Path, float]:
    """NNCF's accuracy control (below): its INT8 IR and wall seconds."""
    ir, seconds, _ = accuracy_control(params, work)
    return ir, seconds


def accuracy_control(params: Params, work: Path, tune_hyperparams: bool = False) -> tuple[Path, float, int]:
    """NNCF's `quantize_with_accuracy_control` from the `quantize:` settings, max_drop the gate's limit, validated
    on the split the gates judge (box mAP50-95, the baseline's postprocess): its INT8 IR, its wall seconds and how
    many val images it predicted, FP32's included (it validates each model on the whole split, then once more
    image by image for its ranking)."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    dataset = load_dataset(params.model.dataset)
    imgsz = params.model.imgsz
    calibration = Calibration.of(params, dataset)
    val = split_images(dataset, params.baseline.split)
    postprocess = baseline_postprocess(params)
    scored = 0

    def validate(compiled, items) -> tuple[float, None]:  # scores only the images it is given
        nonlocal scored
        items = list(items)
        scored += len(items)
        return evaluate(OpenVINO(), compiled, items, dataset.names, imgsz, postprocess).value("map50_95"), None

    fp32 = ov.Core().read_model(fp32_model(params))
    start = time.perf_counter()
    model = nncf.quantize_with_accuracy_control(
        fp32, nncf_settings.calibration_dataset(calibration), nncf.Dataset(val), validate,
        max_drop=params.gates.max_map50_95_drop, subset_size=len(calibration.images),
        advanced_quantization_parameters=nncf_settings.advanced_parameters(params.quantize),
        advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(tune_hyperparams=tune_hyperparams),
        **nncf_settings.nncf_settings(params, list(rule_scope(OpenVINO(), fp32, params))))
    seconds = time.perf_counter() - start
    ir = work / f"nncf_ac{'_tuned' if tune_hyperparams else ''}_int8.xml"
    ov.save_model(model, ir, compress_to_fp16=False)
    return ir, seconds, scored


def map50_95(ir: Path, params: Params) -> float:
    dataset = load_dataset(params.model.dataset)
    images = split_images(dataset, params.baseline.split)
    return evaluate(OpenVINO(), compile_model(ir, params.baseline.inference_precision), images, dataset.names,
                    params.model.imgsz).value("map50_95")


def median_fps(irs: list[Path], params: Params, work: Path) -> list[float]:
    """benchmark_app FPS of each IR: `benchmark.repeats` rounds, interleaved, median per IR."""
    samples: list[list[float]] = [[] for _ in irs]
    for repeat in range(params.benchmark.repeats):
        for i, ir in enumerate(irs):
            run = run_benchmark_app(ir, params.baseline.inference_precision, params.benchmark,
                                    work / f"bench_{i}_{repeat}", params.model.imgsz)
            samples[i].append(run["fps"])
    return [statistics.median(s) for s in samples]


@contextmanager
def benchmark_case(description: str) -> Iterator[tuple[Params, Path]]:
    """Parse `--reference`; yield the params (the demo's, or the exported reference case's) and a work folder,
    the current directory while the block runs (the stages write their outputs there)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reference", type=Path, help="a reference case folder (models/yolov8n.pt, data/coco128)")
    args = parser.parse_args()
    offline.ultralytics_settings_off()
    params = rooted(load_params(ROOT / "params.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.reference:
            params = reference_params(params, args.reference.resolve())
        with inside(Path(tmp), exported=None if args.reference else ROOT) as work:
            if args.reference:
                from stages import export

                export.main(params)
            yield params, work


def main() -> None:
    """Build the three INT8 models, then score and time each next to the FP32 IR."""
    with benchmark_case(__doc__.splitlines()[0]) as (params, work):
        rows = [("FP32 IR (no quantization)", fp32_model(params), 0.0)]
        for name, build in (("qgate quantize (defaults)", run_qgate), ("ultralytics export int8", run_ultralytics),
                            ("nncf accuracy control", run_accuracy_control)):
            ir, seconds = build(params, work)
            rows.append((name, ir, seconds))
        maps = [map50_95(ir, params) for _, ir, _ in rows]
        fps = median_fps([ir for _, ir, _ in rows], params, work)
        print(f"\n{params.model.weights} at imgsz {params.model.imgsz}; mAP50-95 by qgate's evaluator on "
              f"'{params.baseline.split}'; FPS: benchmark_app {params.benchmark.hint}, {params.benchmark.seconds} s, "
              f"{params.baseline.inference_precision}, median of {params.benchmark.repeats} interleaved runs")
        print(f"{'model':<30}{'mAP50-95':>10}{'drop':>9}{'FPS':>9}{'vs FP32':>9}{'build s':>9}")
        for (name, _, seconds), value, speed in zip(rows, maps, fps):
            print(f"{name:<30}{value:>10.4f}{maps[0] - value:>9.4f}{speed:>9.1f}{speed / fps[0]:>8.2f}x{seconds:>9.1f}")


if __name__ == "__main__":
    main()
