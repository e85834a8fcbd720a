"""Side by side in one run: qgate's `tune` against NNCF's accuracy control (with and without `tune_hyperparams`) and
Ultralytics' int8 export, each INT8 model judged by `make gate`'s accuracy gates and timed in interleaved rounds.

Run it on a qgate project where `make gate` has run (its FP32 IR, baseline detections and autofix scope are read,
nothing in it is written): this checkout (the demo), or a fork or scratch copy pointed at another model. Every
method starts from the project's `quantize:` settings (Ultralytics takes only its calibration split: its own
preset and float scope); NNCF's max_drop is `gates.max_map50_95_drop`.

    python benchmarks/tune.py                               # this checkout
    python benchmarks/tune.py --project ../my-fork          # another project, its params.yaml and outputs
    python benchmarks/tune.py --skip "nncf AC + tune_hyperparams"
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

import openvino as ov  # noqa: E402

from benchmarks.peers import accuracy_control, run_ultralytics  # noqa: E402
from benchmarks.workspace import ROOT, inside, rooted  # noqa: E402
from qgate.artifacts import export_record, fp32_model, model_name  # noqa: E402
from qgate.runtimes.openvino.ops import fake_quantize_count  # noqa: E402
from qgate.executors import open_executor  # noqa: E402
from qgate.cpu import cpu_info, describe  # noqa: E402
from qgate.intervals import ratio_interval  # noqa: E402
from qgate.params import AutofixParams, BaselineParams, Params, load_params  # noqa: E402
from qgate.pipeline import val_images  # noqa: E402
from qgate.racing import Budget, Candidate, Race  # noqa: E402
from qgate.tasks import task_for  # noqa: E402
from stages import tune  # noqa: E402

TUNE = "qgate tune"
PEERS = ("nncf accuracy control", "nncf AC + tune_hyperparams", "ultralytics export int8")


def main() -> None:
    """Build every method's INT8 model, judge each on the whole val split, time them all against FP32."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=ROOT, help="a qgate project where `make gate` has run")
    parser.add_argument("--skip", action="append", default=[], choices=PEERS, help="leave a peer out")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # tune's progress
    offline.ultralytics_settings_off()
    root = args.project.resolve()
    params = rooted(load_params(root / "params.yaml"), root)
    with tempfile.TemporaryDirectory() as tmp, \
            inside(Path(tmp), exported=root, links=(BaselineParams.detections, AutofixParams.scope), root=root):
        built = build_all(params, Path(tmp), [p for p in PEERS if p not in args.skip])
        judged = judge(params, built)
        speeds = benchmark(params, built, Path(tmp))
    print_table(params, root, built, judged, speeds)


def build_all(params: Params, work: Path, peers: list[str]) -> dict[str, dict]:
    """Each method's INT8 model with its wall seconds, the val images it predicted to choose, what it chose."""
    start = time.perf_counter()
    metrics = tune.main(params)  # its wall time includes its own benchmark rounds: the peers measure no speed
    seconds = time.perf_counter() - start
    with open(params.tune.csv, newline="") as handle:  # a candidate's subsets are nested: its last one counts
        images = sum(int(row["images"]) for row in csv.DictReader(handle))
    size = metrics.get("chosen_imgsz", params.model.imgsz)  # a deploy size of tune.imgsz, when one was chosen
    settings = metrics["chosen_settings"] | ({tune.IMGSZ_KEY: size} if size != params.model.imgsz else {})
    built = {TUNE: {"seconds": seconds, "images": images,
                    "chose": f"{metrics['chosen'] or 'nothing'} of {metrics['candidates']} candidates",
                    "settings": settings}}
    for name in peers:
        if name == "ultralytics export int8":
            ir, seconds = run_ultralytics(params, work)
            built[name] = {"ir": ir, "seconds": seconds, "images": 0, "chose": "its own float scope"}
        else:
            ir, seconds, images = accuracy_control(params, work, tune_hyperparams="tune_hyperparams" in name)
            built[name] = {"ir": ir, "seconds": seconds, "images": images, "chose": ""}
    for entry in built.values():
        if "ir" in entry:
            entry["model"] = ov.Core().read_model(entry["ir"])
    return built


def judge(params: Params, built: dict[str, dict]) -> dict[str, Candidate]:
    """Every model scored on the whole val split and judged as `make gate`'s accuracy gates judge it (tune's own race,
    one round); the speed and drift gates are not judged here."""
    record = export_record(params)
    val = val_images(params, record)
    with open_executor(params.compute) as executor:
        scorer = tune.SubsetScorer(params, record, val, executor)
        candidates = [Candidate(name, entry.get("settings", {})) for name, entry in built.items()
                      if "model" in entry or entry.get("settings")]
        for candidate in candidates:
            if "model" in built[candidate.name]:
                scorer.models[candidate.name] = built[candidate.name]["model"]
            else:  # tune's choice, quantized again from its settings (NNCF is deterministic: tune's test checks it)
                built[candidate.name]["model"] = scorer.model(candidate)
        task = task_for(record)
        Race(candidates, tune.accuracy_limits(params, task), len(val[0]), len(val[0]), Budget(10**9, math.inf),
             params.gates.confidence, params.gates.inconclusive).run(scorer.score)
    for candidate in candidates:
        built[candidate.name]["fq"] = fake_quantize_count(built[candidate.name]["model"])
    return {c.name: c for c in candidates}


def benchmark(params: Params, built: dict[str, dict], work: Path) -> dict[str, list[float]]:
    """Interleaved benchmark_app rounds of FP32 and every model (`benchmark.repeats`, 3 at least)."""
    irs, sizes = {"fp32": fp32_model(params)}, {"fp32": params.model.imgsz}
    for index, (name, entry) in enumerate(built.items()):
        if "model" in entry:
            irs[name] = work / "timed" / str(index) / model_name(params, "int8")
            ov.save_model(entry["model"], irs[name], compress_to_fp16=False)
            sizes[name] = tune.deploy_size(params, entry.get("settings", {}))
    speeds: dict[str, list[float]] = {}
    for _ in range(max(params.benchmark.repeats, 3)):
        tune.sized_round(params, irs, sizes, speeds, work)
    return speeds


def print_table(params: Params, root: Path, built: dict[str, dict], judged: dict[str, Candidate],
                speeds: dict[str, list[float]]) -> None:
    """A markdown table: per method its cost, its model's verdict, speed-up, and tune's model's speed against it."""
    level, speed_level = params.int8_eval.ci_level, params.benchmark.ci_level
    others = [name for name in built if name != TUNE and name in speeds]
    pair_level = 1 - (1 - speed_level) / max(1, len(others))  # Bonferroni: tune against each peer is one claim each
    print(f"\n{root.name}: {params.model.weights} at imgsz {params.model.imgsz}; {describe(cpu_info())}; "
          f"{params.benchmark.hint}, {len(speeds['fp32'])} interleaved rounds of {params.benchmark.seconds} s; "
          f"mAP50-95 drop limit {params.gates.max_map50_95_drop:g} ({params.gates.inconclusive} policy)")
    print(f"tune's choice: {built[TUNE]['settings'] or 'none'}\n")
    print(f"| method | wall s | val images predicted | FakeQuantize ops | mAP50-95 drop [{level:.0%}] | "
          f"accuracy gates | speed-up [{speed_level:.0%}] | tune's model vs it [{pair_level:.1%}] |")
    print("|---|---|---|---|---|---|---|---|")
    for name, entry in built.items():
        candidate = judged.get(name)
        drop = candidate.drops.get("map50_95") if candidate else None
        verdict = (candidate.status + (f" ({candidate.why})" if candidate.why else "")) if candidate else "-"
        speedup = ratio_text(ratio_interval(speeds[name], speeds["fp32"], speed_level)) if name in speeds else "-"
        versus = ratio_text(ratio_interval(speeds[TUNE], speeds[name], pair_level)) if name != TUNE and TUNE in speeds \
            and name in speeds else ""
        chose = f" ({entry['chose']})" if entry["chose"] else ""
        drop_text = f"{drop.point:.4f} [{drop.low:.4f}, {drop.high:.4f}]" if drop else "-"
        print(f"| {name}{chose} | {entry['seconds']:.0f} | {entry['images']} | {entry.get('fq', '-')} | {drop_text} | "
              f"{verdict} | {speedup} | {versus} |")


def ratio_text(ratio) -> str:
    """A speed ratio interval as '2.13x [1.92, 2.35]'."""
    return f"{ratio.point:.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]"


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"\nbenchmarks/tune.py: {time.perf_counter() - started:.0f} s in all")
