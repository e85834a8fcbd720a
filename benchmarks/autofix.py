"""qgate's sensitivity + autofix against NNCF's quantize_with_accuracy_control, side by side.

Same FP32 model, calibration images, val split and max drop (`autofix.target_drop`), starting from a
deliberately naive quantization (performance preset, empty ignored scope) so that both have work to do.
Prints wall time, full evaluations (of the whole val split), ops kept float, final mAP50-95 drop and
INT8 throughput (benchmark_app, the `benchmark:` settings, interleaved); then qgate's autofix steps
and the rank qgate's sensitivity gave each op NNCF put back in float. qgate's row is the whole path
from the FP32 IR: quantize, INT8 evaluation, sensitivity, autofix; the "pasted" row re-quantizes with
the ignored scope autofix prints, as a user would (not timed: it is the next pipeline run).

    python benchmarks/autofix.py                                    # the demo (after `dvc repro baseline`)
    python benchmarks/autofix.py --reference ../shared/reference    # official yolov8n + COCO128 at 640
"""

from __future__ import annotations

import csv
import dataclasses
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

import openvino as ov  # noqa: E402

from benchmarks.peers import benchmark_case, median_fps  # noqa: E402
from benchmarks.workspace import inside  # noqa: E402
from qgate.dataset import load_dataset, split_images  # noqa: E402
from qgate.evaluator import evaluate  # noqa: E402
from qgate.preprocess import image_tensor  # noqa: E402
from qgate.runtimes.openvino.inference import compile_model  # noqa: E402
from qgate.runtimes.openvino import OpenVINO  # noqa: E402
from qgate.io import read_json  # noqa: E402
from qgate.params import IgnoredScopeParams, Params, SubgraphParams  # noqa: E402
from qgate.artifacts import fixed_model, fp32_model, int8_model  # noqa: E402
from qgate.runtimes.openvino.ops import precision_table  # noqa: E402
from qgate.calibration import calibration_images  # noqa: E402
from stages import autofix, baseline, int8_eval, quantize, sensitivity  # noqa: E402

NAIVE_SCOPE = IgnoredScopeParams(names=(), patterns=(), types=(), subgraphs=())


def naive_params(params: Params, scope: IgnoredScopeParams = NAIVE_SCOPE) -> Params:
    """`params` with the naive quantize config (performance preset, no decode rule) and `scope` ignored."""
    q = dataclasses.replace(params.quantize, preset="performance", keep_decode_float=False, ignored_scope=scope)
    return dataclasses.replace(params, quantize=q)


def run_qgate(params: Params) -> dict:
    start = time.perf_counter()
    baseline.main(params)  # NNCF evaluates the FP32 model too: both pay for it
    quantize.main(params)
    int8_eval.main(params)
    sensitivity.main(params)
    fix = autofix.main(params)
    return {"seconds": time.perf_counter() - start, "evaluations": 2 + fix["evaluations"], "ir": fixed_model(params),
            "plain_ir": int8_model(params), "scope": yaml.safe_load(Path(params.autofix.scope).read_text())}


def run_pasted(params: Params, work: Path, scope: dict) -> Path:
    """Re-quantize with the scope autofix printed, as a user pasting it into params.yaml would."""
    s = scope["ignored_scope"]
    pasted = IgnoredScopeParams(names=tuple(s["names"]), patterns=tuple(s["patterns"]), types=tuple(s["types"]),
                                subgraphs=tuple(SubgraphParams(tuple(g["inputs"]), tuple(g["outputs"]))
                                                for g in s["subgraphs"]))
    pasted_params = naive_params(params, pasted)
    with inside(work / "pasted", exported=work):  # its own outputs, the same FP32 IR
        quantize.main(pasted_params)
        return (work / "pasted" / int8_model(pasted_params)).resolve()


def run_accuracy_control(params: Params, work: Path) -> dict:
    import nncf

    dataset = load_dataset(params.model.dataset)
    calibration = calibration_images(params, dataset)
    val = split_images(dataset, params.baseline.split)
    calls = {"full": 0, "partial": 0}

    def transform(path: Path):
        return image_tensor(path, params.model.imgsz)

    def validate(compiled, items) -> tuple[float, None]:
        items = list(items)
        calls["full" if len(items) == len(val) else "partial"] += 1
        return evaluate(OpenVINO(), compiled, items, dataset.names, params.model.imgsz).value("map50_95"), None

    start = time.perf_counter()
    model = nncf.quantize_with_accuracy_control(
        ov.Core().read_model(fp32_model(params)), nncf.Dataset(calibration, transform), nncf.Dataset(val), validate,
        max_drop=params.autofix.target_drop, preset=nncf.QuantizationPreset.PERFORMANCE,
        subset_size=len(calibration))
    seconds = time.perf_counter() - start
    ov.save_model(model, work / "nncf_ac.xml", compress_to_fp16=False)
    return {"seconds": seconds, "evaluations": calls["full"], "partial": calls["partial"], "ir": work / "nncf_ac.xml"}


def float_ops(ir: Path) -> int:
    """Weighted or activation-quantizable ops that run in float."""
    return len(float_names(ir))


def float_names(ir: Path) -> list[str]:
    return [row["name"] for row in precision_table(ov.Core().read_model(ir), {}) if row["precision"] == "float"]


def print_search(params: Params, naive: Path, nncf_ir: Path) -> None:
    """qgate's autofix steps, and where the ops NNCF put back in float sit in qgate's sensitivity ranking."""
    print(f"\nqgate autofix steps ({params.autofix.steps}):\n" + Path(params.autofix.steps).read_text())
    with open(params.sensitivity.csv) as handle:
        rank = {name: row["rank"] for row in csv.DictReader(handle) for name in row["ignored_names"].split(";")}
    reverted = [name for name in float_names(nncf_ir) if name not in set(float_names(naive))]
    print("NNCF's reverted ops, ranked by qgate: " + "; ".join(f"{n} {rank.get(n, '-')}" for n in reverted))


def drop(ir: Path, params: Params, fp32_map: float) -> float:
    dataset = load_dataset(params.model.dataset)
    result = evaluate(OpenVINO(), compile_model(ir, params.baseline.inference_precision),
                      split_images(dataset, params.baseline.split), dataset.names, params.model.imgsz)
    return fp32_map - result.value("map50_95")


def main() -> None:
    """Run both fixers from the same naive INT8 starting point; print the side-by-side table."""
    with benchmark_case(__doc__.splitlines()[0]) as (params, work):
        params = naive_params(params)
        ours = run_qgate(params)
        fp32_map = read_json(params.baseline.metrics)["map50_95"]
        nncf_ac = run_accuracy_control(params, work)
        pasted = run_pasted(params, work, ours["scope"])
        rows = [("naive INT8 (performance, no scope)", ours["plain_ir"], None, None),
                ("qgate sensitivity + autofix", ours["ir"], ours["seconds"], ours["evaluations"]),
                ("  its scope pasted, re-quantized", pasted, None, None),
                ("nncf accuracy control", nncf_ac["ir"], nncf_ac["seconds"], nncf_ac["evaluations"])]
        drops = [drop(ir, params, fp32_map) for _, ir, _, _ in rows]
        fps = median_fps([fp32_model(params)] + [ir for _, ir, _, _ in rows], params, work)
        print(f"\n{params.model.weights} at imgsz {params.model.imgsz}; FP32 mAP50-95 {fp32_map:.4f}; max drop "
              f"{params.autofix.target_drop}; FPS: benchmark_app {params.benchmark.hint}, "
              f"{params.benchmark.seconds} s, "
              f"median of {params.benchmark.repeats} interleaved runs (FP32 {fps[0]:.1f}); NNCF also ran "
              f"{nncf_ac['partial']} evaluations on subsets")
        print(f"{'model':<36}{'wall s':>8}{'full evals':>11}{'ops float':>10}{'drop':>9}{'FPS':>8}{'vs FP32':>9}")
        for (name, ir, seconds, evaluations), value, speed in zip(rows, drops, fps[1:]):
            wall = f"{seconds:.1f}" if seconds is not None else "-"
            evals = str(evaluations) if evaluations is not None else "-"
            print(f"{name:<36}{wall:>8}{evals:>11}{float_ops(ir):>10}{value:>9.4f}{speed:>8.1f}{speed / fps[0]:>8.2f}x")
        fix = read_json(params.autofix.metrics)
        print(f"\nqgate / NNCF wall time: {ours['seconds'] / nncf_ac['seconds']:.2f}")
        print(f"qgate's final drop {fix['fixed_map50_95_drop']:.4f}, {fix['ci_level']:.0%} paired interval "
              f"[{fix['fixed_map50_95_drop_ci_low']:.4f}, {fix['fixed_map50_95_drop_ci_high']:.4f}]; target "
              f"{params.autofix.target_drop} judged "
              + ("on the interval (gates.confidence " f"{params.gates.confidence}, inconclusive: "
                 f"{params.gates.inconclusive})" if params.gates.confidence is not None else "on the point"))
        print_search(params, ours["plain_ir"], nncf_ac["ir"])


if __name__ == "__main__":
    main()
