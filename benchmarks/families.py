"""One table for the README: each detection family trained on the demo data, judged by qgate's default params.

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

from qgate.dataset import load_dataset, ultralytics_yaml  # noqa: E402
from qgate.params import load_params  # noqa: E402
from stages.demo_train import train_on_demo_data, validate_on_demo_data  # noqa: E402

FAMILIES = yaml.safe_load((ROOT / "tests" / "families.yaml").read_text())["families"]
STAGES = ("export", "baseline", "quantize", "int8_eval", "divergence", "sensitivity", "autofix", "benchmark")


def _scaled(stem: str) -> str:
    """The scaled yaml Ultralytics builds from a family's file: yolov8.yaml -> yolov8n.yaml, yolo26 -> yolo26n."""
    return re.sub(r"^(yolov?\d+)(?![\dnslmxtcbe-])", r"\1n", stem) + ".yaml"  # yolov10n.yaml is scaled already


def cpu_flags() -> str:
    """What decides INT8 speed here: VNNI and BF16 or AVX2 only."""
    flags = Path("/proc/cpuinfo").read_text().split()
    found = [f for f in ("avx512_vnni", "avx512_bf16", "amx_int8", "avx2") if f in flags]
    return "+".join(found) or "unknown"


def run_family(family: dict, seconds: int, work: Path) -> dict:
    """Train, then run the stages in `work` with the repository's params and this model; return the numbers."""
    params = load_params(ROOT / "params.yaml")
    demo = dataclasses.replace(params.demo, data_dir=str(ROOT / params.demo.data_dir))
    start = time.perf_counter()
    weights = train_on_demo_data(_scaled(Path(family["yaml"]).stem), demo, work / "train")
    ultralytics_map = float(validate_on_demo_data(weights, demo, work / "train").box.map)
    train_seconds = time.perf_counter() - start
    dataset = ultralytics_yaml(load_dataset(Path(demo.data_dir) / "demo.yaml"), work / "demo.yaml")  # absolute path
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["model"].update(weights=str(weights), dataset=str(dataset), data_dir=demo.data_dir)
    raw["benchmark"].update(seconds=seconds)
    raw["export"]["end2end"] = family.get("end2end", False)
    (work / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for stage in STAGES:
        done = subprocess.run([sys.executable, "-m", f"stages.{stage}"], cwd=work, env=env, capture_output=True,
                              text=True)
        if done.returncode:
            raise SystemExit(f"{family['name']} {stage}: {done.stderr.strip().splitlines()[-1]}")
    metric = {name: json.loads((work / "metrics" / f"{name}.json").read_text())
              for name in ("baseline", "int8", "quantize", "benchmark", "export_record", "sensitivity", "autofix")}
    return {"family": family["name"], "model": _scaled(Path(family["yaml"]).stem),
            "ultralytics_val": ultralytics_map, "fp32": metric["baseline"]["map50_95"],
            "int8": metric["int8"]["map50_95"], "drop": metric["int8"]["map50_95_drop"],
            "decode_ops": metric["quantize"]["ops_float_by_decode_rule"],
            "speedup": metric["benchmark"]["speedup_fps"], "int8_fps": metric["benchmark"]["int8_fps"],
            "layout": metric["export_record"]["head_layout"], "train_seconds": train_seconds,
            "groups": metric["sensitivity"]["groups"], "top_group": metric["sensitivity"]["top_quantizer"],
            "autofix_needed": metric["autofix"]["needed"]}


def main() -> None:
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
          f"CPU: {cpu_flags()}, {os.cpu_count()} cores; benchmark_app {params.benchmark.hint}, "
          f"{params.benchmark.repeats} x {args.seconds} s, medians\n")
    print("| family | model | head | Ultralytics val (.pt) | FP32 mAP50-95 | INT8 mAP50-95 | drop | decode ops float "
          "| quantizer groups ranked | INT8/FP32 FPS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} | {r['model']} | {r['layout']} | {r['ultralytics_val']:.4f} | {r['fp32']:.4f} | "
              f"{r['int8']:.4f} | {r['drop']:+.4f} | {r['decode_ops']} | {r['groups']} | {r['speedup']:.2f}x |")


if __name__ == "__main__":
    main()
