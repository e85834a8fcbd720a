"""One table for docs/drift-gates.md and docs/tasks.md: each family trained on the demo data of its task, judged by
qgate's default params.

For every family marked `benchmark` in tests/families.yaml: write the demo data of its task (`demo.task`: boxes,
outlines, keypoints or class folders; `stages.demo_data`), train it from scratch with the `demo:` schedule
(`stages.demo_train.train_on_demo_data`), then run the real stages (export to benchmark, as `make gate` does) in a
work folder with the repository's params.yaml, only the model and data changed. Prints FP32 and INT8 of the task's
own metric (mAP50-95 of boxes, masks or keypoints; a classifier's top-1), the drop and its interval, the speed-up
and the CPU.

    python benchmarks/families.py            # from the project root; the `benchmark` families of tests/families.yaml
    python benchmarks/families.py --families 11 v8-seg --seconds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qgate import offline  # noqa: E402

offline.configure()

from qgate.cpu import cpu_info, describe  # noqa: E402
from qgate.gates import judge_all  # noqa: E402
from qgate.params import DEMO_DATASET_FILES, DemoParams, load_params  # noqa: E402
from qgate.task_metrics import TASK_METRICS  # noqa: E402
from stages.demo_train import (ULTRALYTICS_RESULTS, train_on_demo_data, ultralytics_data,  # noqa: E402
                               validate_on_demo_data)

FAMILIES = yaml.safe_load((ROOT / "tests" / "families.yaml").read_text())["families"]
STAGES = ("export", "baseline", "quantize", "int8_eval", "robustness", "divergence", "sensitivity", "autofix",
          "benchmark")  # every stage `make gate` judges: a missing metrics file fails its gate


def _scaled(stem: str) -> str:
    """The scaled yaml Ultralytics builds from a family's file: yolov8.yaml -> yolov8n.yaml, yolo26 -> yolo26n,
    yolo11-seg -> yolo11n-seg, yolo11-obb -> yolo11n-obb."""
    base, task = re.fullmatch(r"(.*?)(-seg|-pose|-obb|-cls)?", stem).groups()
    return re.sub(r"^(yolov?\d+)(?![\dnslmxtcbe-])", r"\1n", base) + (task or "") + ".yaml"  # yolov10n is scaled


def demo_data(task: str, work: Path) -> Path:
    """The demo data of `task` written under `work` (its `data/demo`, as the stage writes it); `work`."""
    work.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text()) or {}
    raw.setdefault("demo", {})["task"] = task
    raw.setdefault("model", {})["dataset"] = str(Path(DemoParams.data_dir) / DEMO_DATASET_FILES[task])
    (work / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "stages.demo_data"], cwd=work, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        raise SystemExit(f"demo_data ({task}): {done.stderr.strip().splitlines()[-1]}")
    return work


def run_family(family: dict, seconds: int, work: Path, data_root: Path) -> dict:
    """Train on the demo data under `data_root`, then run the stages in `work` with the repository's params and
    this model; return the numbers."""
    demo = load_params(data_root / "params.yaml").demo
    demo = dataclasses.replace(demo, epochs=family.get("epochs", demo.epochs))  # a classifier's demo needs 24
    own = TASK_METRICS[demo.task].primary
    start = time.perf_counter()
    data_dir = data_root / demo.data_dir
    os.chdir(data_root)  # the demo yaml names its folder relative to the project root
    try:
        weights = train_on_demo_data(_scaled(Path(family["yaml"]).stem), demo, work / "train")
        validated = validate_on_demo_data(weights, demo, work / "train")
        dataset = ultralytics_data(demo, work)  # an absolute path, for the stages run in `work`
    finally:
        os.chdir(ROOT)
    ultralytics_map = float(ULTRALYTICS_RESULTS[own.name](validated)[0])
    train_seconds = time.perf_counter() - start
    raw = yaml.safe_load((ROOT / "params.yaml").read_text()) or {}
    raw.setdefault("model", {}).update(weights=str(weights), dataset=str(dataset), data_dir=str(data_dir))
    raw.setdefault("benchmark", {}).update(seconds=seconds)
    raw.setdefault("export", {})["end2end"] = family.get("end2end", False)
    (work / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    run_stages(work, STAGES, family["name"])
    metric = {name: json.loads((work / "metrics" / f"{name}.json").read_text())
              for name in ("baseline", "int8", "quantize", "benchmark", "export_record", "sensitivity", "autofix",
                           "divergence")}
    verdicts = judged(work)
    int8 = metric["int8"]
    return {"family": family["name"], "model": _scaled(Path(family["yaml"]).stem), "metric": own.main.title,
            "ultralytics_val": ultralytics_map, "fp32": metric["baseline"][own.main.key],
            "int8": int8[own.main.key], "drop": int8[own.main.stat("drop")],
            "drop_ci": (int8[own.main.stat("drop_ci_low")], int8[own.main.stat("drop_ci_high")]),
            "speedup_ci": (metric["benchmark"]["speedup_fps_ci_low"], metric["benchmark"]["speedup_fps_ci_high"]),
            "decode_ops": metric["quantize"]["ops_float_by_decode_rule"],
            "speedup": metric["benchmark"]["speedup_fps"], "int8_fps": metric["benchmark"]["int8_fps"],
            "layout": metric["export_record"]["head_layout"], "train_seconds": train_seconds,
            "groups": metric["sensitivity"]["groups"], "top_group": metric["sensitivity"]["top_quantizer"],
            "autofix_needed": metric["autofix"]["needed"],
            "detection_error": metric["divergence"]["detection_error"],
            "below_floor_frac": metric["divergence"]["layers_below_sqnr_floor_frac"],
            "output_sqnr_db": metric["divergence"]["output_sqnr_db"],
            "gates": {v.gate: v.state if v.passed else f"{v.state} (counted failed)" for v in verdicts},
            "values": {v.gate: v.value for v in verdicts}}


def run_stages(work: Path, stages: tuple[str, ...], label: str) -> None:
    """Run each stage's CLI in `work` with this checkout's code; stop with `label`, the stage and its error line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for stage in stages:
        done = subprocess.run([sys.executable, "-m", f"stages.{stage}"], cwd=work, env=env, capture_output=True,
                              text=True)
        if done.returncode:
            raise SystemExit(f"{label} {stage}: {done.stderr.strip().splitlines()[-1]}")


def judged(work: Path) -> list:
    """Every default gate's verdict on the metrics in `work`, as `make gate` judges them."""
    previous = Path.cwd()
    os.chdir(work)
    try:
        return judge_all(load_params("params.yaml"))
    finally:
        os.chdir(previous)


def main() -> None:
    os.chdir(ROOT)  # the demo data and the training read the checkout's relative paths
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="*", help="names from tests/families.yaml (default: the benchmark ones)")
    parser.add_argument("--seconds", type=int, default=10, help="benchmark_app seconds per run (3 interleaved runs)")
    args = parser.parse_args()
    chosen = [f for f in FAMILIES if (f["name"] in args.families if args.families else f.get("benchmark"))]
    params = load_params(ROOT / "params.yaml")
    rows = []
    with tempfile.TemporaryDirectory() as data_tmp:
        for family in chosen:
            task = family.get("task", "detect")
            data_root = Path(data_tmp) / task
            if not data_root.exists():
                demo_data(task, data_root)
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(run_family(family, args.seconds, Path(tmp), data_root))
                print(json.dumps(rows[-1]), flush=True)
    print(f"\nDemo data, {params.demo.epochs} epochs (a family's own `epochs` where families.yaml sets it) at imgsz "
          f"{params.model.imgsz}, default params.yaml; "
          f"CPU: {describe(cpu_info())}, {os.cpu_count()} cores; benchmark_app {params.benchmark.hint}, "
          f"{params.benchmark.repeats} x {args.seconds} s, medians\n")
    print("| family | model | head | metric | Ultralytics val (.pt) | FP32 | INT8 | drop [95%] | decode ops float "
          "| quantizer groups ranked | INT8/FP32 FPS [95%] | detection error | layers below floor | output SQNR dB "
          "| gates not passed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        others = ", ".join(f"{gate}: {state}" for gate, state in r["gates"].items() if state != "pass") or "none"
        (low, high), (slow, shigh) = r["drop_ci"], r["speedup_ci"]
        print(f"| {r['family']} | {r['model']} | {r['layout']} | {r['metric']} | {r['ultralytics_val']:.4f} | "
              f"{r['fp32']:.4f} | {r['int8']:.4f} | {r['drop']:+.4f} [{low:+.4f}, {high:+.4f}] | {r['decode_ops']} | "
              f"{r['groups']} | {r['speedup']:.2f}x [{slow:.2f}, {shigh:.2f}] | {r['detection_error']:.4f} | "
              f"{r['below_floor_frac']:.0%} | {r['output_sqnr_db']:.1f} | {others} |")


if __name__ == "__main__":
    main()
