"""Ray scale-out: images/s and peak RSS of one evaluation, local vs Ray (1 and 2 workers), 500 and 2000 images.

The model is the reference yolov8n (../shared/reference, 80 COCO classes) exported at 640, and quantized
by the quantize stage for the INT8 rate; the val set is synthetic (the demo's shapes drawn on 640 px
canvases, labels beside them), generated in a temporary folder, never committed. Each configuration runs
in a fresh process so its peak RSS is its own: the driver's, and each Ray actor's. Ray runs a private
instance on this machine (its start is timed apart). Then a projection on paper for a COCO-sized val set.

    python benchmarks/scale.py --reference ../shared/reference        # about 15 minutes on 2 vCPUs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

from qgate.params import ComputeParams, load_params  # noqa: E402

SIZES = (500, 2000)
CONFIGS = {"local": (None, 2), "ray 1 worker x 2 CPUs": (1, 2), "ray 2 workers x 1 CPU": (2, 1)}
COCO_VAL, AUTOFIX_EVALUATIONS, MACHINES = 5000, 12, (1, 4, 16)


def synthetic_val(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """`count` 640 px images of the demo's shapes with YOLO labels beside them (images/ and labels/)."""
    import cv2

    from stages.demo_data import draw_image, label_line

    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True)
    (folder / "labels").mkdir()
    paths = []
    for i in range(count):
        image, shapes = draw_image(rng, 4, 6)
        h, w = image.shape[:2]
        scale = 640 / max(h, w)
        image = cv2.resize(image, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_LINEAR)
        paths.append(folder / "images" / f"{i:05d}.jpg")
        cv2.imwrite(str(paths[-1]), image)
        (folder / "labels" / f"{i:05d}.txt").write_text("".join(label_line(shape, "detect", (h, w)) + "\n"
                                                               for shape in shapes))
    return paths


def measure(ir: str, images: list[Path], names: tuple[str, ...], workers: int | None, cpus: int) -> dict:
    """One evaluation in this process: images/s of prediction, scoring seconds, peak RSS of driver and actors.

    The driver's peak is read after prediction (images streamed, detections kept) and after scoring
    (pycocotools' tables), apart.
    """
    from qgate.executors import open_executor
    from qgate.compute import LocalExecutor, peak_rss_mb
    from qgate.evaluator import Predictor, predict, score
    from qgate.heads import Postprocess
    from qgate.tasks import Detect
    from qgate.runtimes.openvino import OpenVINO
    from qgate.runtimes.openvino.inference import PortableModel

    start = time.perf_counter()
    compute = ComputeParams("ray" if workers else "local", None, workers, cpus, 16, 600)
    with open_executor(compute) as executor:
        started = time.perf_counter() - start
        begin = time.perf_counter()
        per_image, shapes, precisions = predict(executor, Predictor(OpenVINO(), PortableModel(ir), "f32", 640,
                                                                    Postprocess(), Detect()), images, 16)
        predicted, predicted_rss = time.perf_counter() - begin, peak_rss_mb()
        result = score(images, names, per_image, shapes, predicted, precisions)
        scored = time.perf_counter() - begin - predicted
        actors = [] if isinstance(executor, LocalExecutor) else executor.peak_rss_mb()
    return {"images_per_second": result.images / predicted, "predict_seconds": predicted,
            "score_seconds": scored, "start_seconds": started,
            "predict_rss_mb": predicted_rss, "driver_rss_mb": peak_rss_mb(), "actor_rss_mb": actors,
            "map50_95": result.value("map50_95"), "detections": len(result.detections)}


def child(args) -> None:
    """`--child`: measure one configuration and print it as JSON (a fresh process: its own peak RSS)."""
    images = sorted(Path(args.images).glob("*.jpg"))[: args.count]
    names = tuple(json.loads(Path(args.names).read_text()))
    print(json.dumps(measure(args.child, images, names, args.workers or None, args.cpus)))


def run_child(ir: Path, images: Path, names: Path, count: int, workers: int | None, cpus: int) -> dict:
    command = [sys.executable, __file__, "--child", str(ir), "--images", str(images), "--names", str(names),
               "--count", str(count), "--workers", str(workers or 0), "--cpus", str(cpus)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def models(reference: Path, work: Path):
    """Export the reference yolov8n at 640 and quantize it with the repository's params; (params, fp32, int8)."""
    from benchmarks.peers import reference_params  # Ultralytics and NNCF: in the parent only, not in the
    from stages import export, quantize              # children whose peak RSS is measured

    from benchmarks.workspace import ROOT, inside, rooted
    from qgate.artifacts import fp32_model, int8_model

    offline.ultralytics_settings_off()
    params = reference_params(rooted(load_params(ROOT / "params.yaml")), reference)
    with inside(work, exported=None):  # the stages' fixed output paths land in `work`
        export.main(params)
        quantize.main(params)
    return params, work / fp32_model(params), work / int8_model(params)


def projection(rows: dict, int8: dict) -> None:
    """Minutes for baseline + INT8 + 12 autofix evaluations of a COCO-sized val set on N 2-vCPU machines.

    From the measured rows: Ray's prediction time t(n) = fixed + n x per-image (fitted on 500 and 2000
    images, 2 workers x 1 CPU: one machine's share); INT8 images cost the local INT8/FP32 ratio of an FP32
    one; pycocotools scoring stays serial on the driver; the Ray instance starts once.
    """
    small, large = (rows[("ray 2 workers x 1 CPU", size)] for size in SIZES)
    per_image = (large["predict_seconds"] - small["predict_seconds"]) / (SIZES[1] - SIZES[0])
    fixed = max(small["predict_seconds"] - SIZES[0] * per_image, 0.0)
    local = rows[("local", SIZES[1])]
    int8_ratio = local["images_per_second"] / int8["images_per_second"]
    score = local["score_seconds"] / SIZES[1]
    print(f"\nProjection: {COCO_VAL} images, baseline (FP32) + INT8 + {AUTOFIX_EVALUATIONS} autofix (INT8): Ray "
          f"{per_image * 1000:.1f} ms per FP32 image per machine + {fixed:.1f} s per evaluation (model load), "
          f"INT8 image = {int8_ratio:.2f} of an FP32 one, scoring {score * 1000:.1f} s per 1000 images (driver), "
          f"instance start {large['start_seconds']:.1f} s")
    costs = [1.0] + [int8_ratio] * (1 + AUTOFIX_EVALUATIONS)
    local_minutes = sum(COCO_VAL * (c / local["images_per_second"] + score) for c in costs) / 60
    print(f"   1 machine, local executor: {local_minutes:6.1f} min")
    for machines in MACHINES:
        seconds = large["start_seconds"] + sum(fixed + COCO_VAL * (c * per_image / machines + score) for c in costs)
        print(f"  {machines:>2} machine(s), ray executor: {seconds / 60:6.1f} min")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=Path("../shared/reference"))
    parser.add_argument("--child")
    parser.add_argument("--images")
    parser.add_argument("--names")
    parser.add_argument("--count", type=int)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    if args.child:
        return child(args)
    from qgate.cpu import cpu_info, describe
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        params, fp32, int8 = models(args.reference.resolve(), work)
        names = work / "names.json"
        names.write_text(json.dumps(json.loads(Path(params.export.record).read_text())["class_names"]))
        start = time.perf_counter()
        synthetic_val(work / "val", max(SIZES))
        print(f"{max(SIZES)} synthetic 640 px images in {time.perf_counter() - start:.0f} s; CPU {describe(cpu_info())}, "
              f"reference yolov8n FP32 at 640, f32")
        print(f"{'configuration':<24}{'images':>7}{'img/s':>8}{'vs local':>9}{'score s':>8}{'start s':>8}"
              f"{'driver MB (predict/scored)':>27}{'actor MB':>10}{'detections':>11}")
        rows = {}
        for size in SIZES:
            for name, (workers, cpus) in CONFIGS.items():
                row = rows[(name, size)] = run_child(fp32, work / "val/images", names, size, workers, cpus)
                ratio = row["images_per_second"] / rows[("local", size)]["images_per_second"]
                actors = "/".join(f"{mb:.0f}" for mb in row["actor_rss_mb"]) or "-"
                print(f"{name:<24}{size:>7}{row['images_per_second']:>8.2f}{ratio:>8.2f}x{row['score_seconds']:>8.1f}"
                      f"{row['start_seconds']:>8.1f}{row['predict_rss_mb']:>19.0f}/{row['driver_rss_mb']:<7.0f}"
                      f"{actors:>10}{row['detections']:>11}", flush=True)
        identical = {rows[(name, size)]["map50_95"] for name in CONFIGS for size in (max(SIZES),)}
        print(f"mAP50-95 at {max(SIZES)} images, every configuration: {sorted(identical)} (must be one value)")
        int8_row = run_child(int8, work / "val/images", names, min(SIZES), None, 2)
        print(f"INT8 local, {min(SIZES)} images: {int8_row['images_per_second']:.2f} img/s")
        projection(rows, int8_row)


if __name__ == "__main__":
    main()
