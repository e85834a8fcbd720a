"""One table for docs/drift-gates.md: each detection family trained on the demo data, judged by qgate's default params.

For every family marked `benchmark` in tests/families.yaml: train it from scratch on the demo data with the
`demo:` schedule (`stages.demo_train.train_on_demo_data`), then run the real stages (export to benchmark, as
`make gate` does) in a work folder with the repository's params.yaml, only `model.weights`
changed. Prints FP32 and INT8 mAP50-95, the drop, the speed-up and the CPU that measured it.

    dvc repro demo_data                      # the demo data, once
    python benchmarks/families.py            # from the project root; the `benchmark` families of tests/families.yaml
    python benchmarks/families.py --families 11 --seconds 5
"""

from __future__ import annotations

import argparse
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
from qgate.dataset import load_dataset, ultralytics_yaml  # noqa: E402
from qgate.gates import judge_all  # noqa: E402
from qgate.params import load_params  # noqa: E402
from stages.demo_train import train_on_demo_data, validate_on_demo_data  # noqa: E402

FAMILIES = yaml.safe_load((ROOT / "tests" / "families.yaml").read_text())["families"]
STAGES = ("export", "baseline", "quantize", "int8_eval", "divergence", "sensitivity", "autofix", "benchmark")


def _scaled(stem: str) -> str:
    """The scaled yaml Ultralytics builds from a family's file: yolov8.yaml -> yolov8n.yaml, yolo26 -> yolo26n."""
    return re.sub(r"^(yolov?\d+)(?![\dnslmxtcbe-])", r"\1n", stem) + ".yaml"  # yolov10n.yaml is scaled already


def run_family(family: dict, seconds: int, work: Path) -> dict:
    """Train, then run the stages in `work` with the repository's params and this model; return the numbers."""
    demo = load_params(ROOT / "params.yaml").demo
    start = time.perf_counter()
    weights = train_on_demo_data(_scaled(Path(family["yaml"]).stem), demo, work / "train")  # cwd: the checkout
    ultralytics_map = float(validate_on_demo_data(weights, demo, work / "train").box.map)
    train_seconds = time.perf_counter() - start
    data_dir = ROOT / demo.data_dir
    dataset = ultralytics_yaml(load_dataset(data_dir / "demo.yaml"), work / "demo.yaml")  # absolute path
    raw = yaml.safe_load((ROOT / "params.yaml").read_text()) or {}
    raw.setdefault("model", {}).update(weights=str(weights), dataset=str(dataset), data_dir=str(data_dir))
    raw.setdefault("benchmark", {}).update(seconds=seconds)
    raw.setdefault("export", {})["end2end"] = family.get("end2end", False)
    (work / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for stage in STAGES:
        done = subprocess.run([sys.executable, "-m", f"stages.{stage}"], cwd=work, env=env, capture_output=True,
                              text=True)
        if done.returncode:
            raise SystemExit(f"{family['name']} {stage}: {done.stderr.strip().splitlines()[-1]}")
    metric = {name: json.loads((work / "metrics" / f"{name}.json").read_text())
              for name in ("baseline", "int8", "quantize", "benchmark", "export_record", "sensitivity", "autofix",
                           "divergence")}
    verdicts = judged(work)
    return {"family": family["name"], "model": _scaled(Path(family["yaml"]).stem),
            "ultralytics_val": ultralytics_map, "fp32": metric["baseline"]["map50_95"],
            "int8": metric["int8"]["map50_95"], "drop": metric["int8"]["map50_95_drop"],
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
    for family in chosen:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(run_family(family, args.seconds, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nDemo data, {params.demo.epochs} epochs at imgsz {params.model.imgsz}, default params.yaml; "
          f"CPU: {describe(cpu_info())}, {os.cpu_count()} cores; benchmark_app {params.benchmark.hint}, "
          f"{params.benchmark.repeats} x {args.seconds} s, medians\n")
    print("| family | model | head | Ultralytics val (.pt) | FP32 mAP50-95 | INT8 mAP50-95 | drop | decode ops float "
          "| quantizer groups ranked | INT8/FP32 FPS | detection error | layers below floor | output SQNR dB "
          "| gates not passed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        others = ", ".join(f"{gate}: {state}" for gate, state in r["gates"].items() if state != "pass") or "none"
        print(f"| {r['family']} | {r['model']} | {r['layout']} | {r['ultralytics_val']:.4f} | {r['fp32']:.4f} | "
              f"{r['int8']:.4f} | {r['drop']:+.4f} | {r['decode_ops']} | {r['groups']} | {r['speedup']:.2f}x | "
              f"{r['detection_error']:.4f} | {r['below_floor_frac']:.0%} | {r['output_sqnr_db']:.1f} | {others} |")


if __name__ == "__main__":
    main()
