"""The INT8 drop of each automatic float rule on one judged project: the head decode off, on (the default), and
on with the head's output layers (`quantize.keep_decode_float`, `quantize.keep_output_layers_float`).

For a project after `make gate` (the demo, `demo.task: segment | pose`, or your own model): its exported IR,
metrics and params are copied to a temporary folder per setting, where the real quantize and int8_eval stages
(and benchmark, with --speed) run. Prints, per setting, the ops kept float by rule, the drop of the task's own
metric and of box mAP50-95 with their 95% intervals, the speed-up, and the CPU.

    python benchmarks/float_rules.py PROJECT            # PROJECT: a checkout after `make gate`
    python benchmarks/float_rules.py PROJECT --speed    # and benchmark_app's speed-up per setting
    python benchmarks/float_rules.py PROJECT --also-float-types ConvolutionBackpropData --only "head decode (default)"
        # adds a setting: the default plus every op of these types float (a segment head's prototype upsample)
    python benchmarks/float_rules.py PROJECT --quantize range_estimator=minmax --only "head decode (default)"
        # adds a setting: the default rules with other quantize values (here: ranges that clip no activation)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.families import run_stages  # noqa: E402
from qgate.cpu import cpu_info, describe  # noqa: E402
from qgate.task_metrics import recorded  # noqa: E402

SETTINGS = {  # name -> the quantize keys it sets
    "no rule": {"keep_decode_float": False, "keep_output_layers_float": False},
    "head decode (default)": {"keep_decode_float": True, "keep_output_layers_float": False},
    "head decode + output layers": {"keep_decode_float": True, "keep_output_layers_float": True},
}
COPIED = ("metrics", "artifacts")  # rewritten by the stages: copies; the rest is read only: links
LINKED = ("models/export", "data")


def run_setting(project: Path, work: Path, quantize: dict, speed: bool) -> dict:
    """The stages under one setting in `work`; the numbers of the table."""
    for name in COPIED:
        shutil.copytree(project / name, work / name)
    for name in LINKED:
        if (project / name).exists():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).symlink_to((project / name).resolve())
    params = yaml.safe_load((project / "params.yaml").read_text()) or {}
    params.setdefault("quantize", {}).update(quantize)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_stages(work, ("quantize", "int8_eval") + (("benchmark",) if speed else ()), str(quantize))
    return {name: json.loads((work / "metrics" / f"{name}.json").read_text())
            for name in ("quantize", "int8") + (("benchmark",) if speed else ())}


def _drop(int8: dict, family) -> str:
    key = family.main.stat("drop")
    return f"{int8[key]:+.4f} [{int8[key + '_ci_low']:+.4f}, {int8[key + '_ci_high']:+.4f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path, help="a checkout after `make gate`")
    parser.add_argument("--speed", action="store_true", help="also run benchmark_app per setting")
    parser.add_argument("--also-float-types", nargs="+", default=[], metavar="TYPE",
                        help="add a setting: the default rules plus every op of these OpenVINO types float")
    parser.add_argument("--only", nargs="+", default=list(SETTINGS), metavar="SETTING",
                        help="run only these of the built-in settings")
    parser.add_argument("--quantize", nargs="+", default=[], metavar="KEY=VALUE",
                        help="add a setting: the default rules with these quantize values (YAML values)")
    args = parser.parse_args()
    project = args.project.resolve()
    task = recorded(project / "metrics" / "export_record.json")
    own = task.primary
    settings = {name: SETTINGS[name] for name in args.only}
    if args.also_float_types:
        name = "head decode + " + ", ".join(args.also_float_types) + " ops"
        settings[name] = {**SETTINGS["head decode (default)"], "ignored_scope": {"types": args.also_float_types}}
    if args.quantize:
        values = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.quantize)}
        settings["head decode + " + ", ".join(args.quantize)] = {**SETTINGS["head decode (default)"], **values}
    rows = []
    for name, quantize in settings.items():
        with tempfile.TemporaryDirectory() as tmp:
            rows.append((name, run_setting(project, Path(tmp), quantize, args.speed)))
            print(name, json.dumps({k: v for k, v in rows[-1][1]["int8"].items() if "drop" in k}), flush=True)
    record = json.loads((project / "metrics" / "export_record.json").read_text())
    print(f"\n{project.name}: {task.name} model, imgsz {record['imgsz']}, its params.yaml otherwise; CPU: "
          f"{describe(cpu_info())}, {os.cpu_count()} cores\n")
    families = [own, *(family for family in task.scored if family is not own)]  # the task's own metric first
    print("| setting | ops float by rule or scope | " + " | ".join(f"{f.main.title} drop [95%]" for f in families)
          + (" | speed-up [95%] |" if args.speed else " |"))
    print("|---|---|" + "---|" * len(families) + ("---|" if args.speed else ""))
    for name, metrics in rows:
        quantized = metrics["quantize"]
        kept = ("ops_float_by_decode_rule", "ops_float_by_output_layer_rule", "ops_ignored_by_scope")
        cells = [name, str(sum(quantized[key] for key in kept))]
        cells += [_drop(metrics["int8"], family) for family in families]
        if args.speed:
            bench = metrics["benchmark"]
            cells.append(f"{bench['speedup_fps']:.2f}x [{bench['speedup_fps_ci_low']:.2f}, "
                         f"{bench['speedup_fps_ci_high']:.2f}]")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
