"""How well sensitivity rankings predict each quantizer group's own mAP effect, on the naive INT8 demo.

Truth: every group put back in float alone, as a compiled mixed-precision model scored on the whole val
split (one evaluation per group). Rankings compared: the one `sensitivity` computes (compiled models,
`sensitivity.images` val images spread evenly, the `sensitivity.rank_quantile` of the detection error
removed over resamples of those images), the same by the total over the images (qgate's ranking
before), the total by squared output error (before that), the total on the worst bad cases, and those
bad cases with FakeQuantize emulated in float (one model, a boolean input per group; qgate's earlier
method, here with the detection error).
Also prints the INT8 drop compiled and emulated.

    python benchmarks/ranking.py          # the demo, after `dvc repro baseline` (about 5 minutes)
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

import openvino as ov  # noqa: E402
import openvino.opset13 as opset  # noqa: E402

from benchmarks.autofix import naive_params  # noqa: E402
from benchmarks.peers import benchmark_case  # noqa: E402
from qgate.dataset import split_images  # noqa: E402
from qgate.evaluator import evaluate  # noqa: E402
from qgate.preprocess import image_tensor  # noqa: E402
from qgate.heads import RawHead  # noqa: E402
from qgate.tasks import Detect  # noqa: E402
from qgate.io import read_json  # noqa: E402
from qgate.runtimes.openvino import OpenVINO  # noqa: E402
from qgate.runtimes.openvino.quantizer_groups import quantizer_groups, revert  # noqa: E402
from qgate.artifacts import export_record, fp32_model, int8_model, model_dataset  # noqa: E402
from qgate.pipeline import evaluate_model  # noqa: E402
from stages import baseline, int8_eval, quantize, sensitivity  # noqa: E402

SWITCH = "qgate_float_groups"
HEAD = RawHead()  # the demo's YOLOv8n exports the raw layout
TASK = Detect(HEAD)


def emulated(int8: ov.Model, groups, switchable: bool = True) -> ov.Model:
    """`int8` with FakeQuantize emulated in float: each group's quantizers sit behind a Select on a runtime value
    (a boolean input per group, or an always-false test on the image), which keeps the CPU plugin from folding
    it and fusing FakeQuantize into int8 kernels."""
    model = int8.clone()
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    image = model.get_parameters()[0]
    switch = opset.parameter([len(groups)], ov.Type.boolean, name=SWITCH) if switchable else None
    never = None if switchable else opset.less(opset.reduce_min(image, opset.constant(np.arange(4))),
                                               opset.constant(np.float32(-1e30)))
    for index, group in enumerate(groups):
        condition = (opset.gather(switch, opset.constant(np.int64(index)), opset.constant(np.int64(0)))
                     if switch is not None else never)
        for name in group.quantizers:
            fq = ops[name]
            targets = list(fq.output(0).get_target_inputs())
            chosen = opset.select(condition, fq.input_value(0), fq.output(0)).output(0)
            for target in targets:
                target.replace_source_output(chosen)
    parameters = [*model.get_parameters(), *([switch] if switch is not None else [])]
    return ov.Model(model.get_results(), parameters, model.get_friendly_name())


def emulated_scores(params, fp32, int8, groups, images) -> np.ndarray:
    """Share of the emulated INT8 detection error removed per group (summed over images), as `sensitivity` scores."""
    config = {"INFERENCE_PRECISION_HINT": params.baseline.inference_precision}
    reference = ov.Core().compile_model(fp32, "CPU", config).create_infer_request()
    request = ov.Core().compile_model(emulated(int8, groups), "CPU", config).create_infer_request()
    n = len(groups)
    errors, base = np.zeros(n), 0.0
    for path in images:
        x = image_tensor(path, params.model.imgsz)
        f = reference.infer({0: x})[0][0].copy()
        q = request.infer({0: x, SWITCH: np.zeros(n, bool)})[0][0].copy()
        mask = HEAD.confident(f, params.sensitivity.conf)
        base += HEAD.detection_error(q, f, mask)
        for i in range(n):
            errors[i] += HEAD.detection_error(request.infer({0: x, SWITCH: np.arange(n) == i})[0][0], f, mask)
    return 1 - errors / max(base, 1e-30)  # no error at all (FP32 confident nowhere): every share 1


def compiled_scores(params, fp32, int8, groups, images, error=None) -> dict:
    return sensitivity.score_groups(params, fp32, int8, groups, images, TASK, error)


def squared_error(out: tuple, reference: tuple, mask: np.ndarray) -> float:
    """Mean squared difference of two head outputs on the masked anchors: qgate's score before the detection error."""
    return float(np.mean((out[0][:, mask] - reference[0][:, mask]) ** 2)) if mask.any() else 0.0


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def main() -> None:
    """Naive INT8 demo; each group's own mAP gain; where three rankings put the groups that gain most."""
    with benchmark_case(__doc__.splitlines()[0]) as (params, work):
        params = naive_params(params)
        baseline.main(params)
        quantize.main(params)
        int8_eval.main(params)
        record = export_record(params)
        core = ov.Core()
        fp32, int8 = core.read_model(fp32_model(params)), core.read_model(int8_model(params))
        groups = quantizer_groups(int8)
        int8_map = read_json(params.int8_eval.metrics)["map50_95"]
        fp32_map = read_json(params.baseline.metrics)["map50_95"]
        dataset = model_dataset(params, record)
        val = split_images(dataset, params.baseline.split)
        gains = np.array([evaluate_model(params, revert(int8, fp32, groups, {i}), record).value("map50_95")
                          - int8_map for i in range(len(groups))])
        by_name = {p.name: p for p in val}
        with open(params.int8_eval.bad_cases) as handle:
            bad = [by_name[r["file_name"]] for r in csv.DictReader(handle) if float(r["disagreement"]) > 0][:8]
        spread = sensitivity.ranking_images(params, record)
        scores = compiled_scores(params, fp32, int8, groups, spread)
        quantile = params.sensitivity.rank_quantile
        rankings = {
            f"compiled, {len(spread)} val images spread, q{quantile:g} (qgate)":
                sensitivity.error_removed_low(scores, quantile),
            "  the same, total over the images (before)": sensitivity.error_removed(scores),
            "  the same total, squared output error (earlier)": sensitivity.error_removed(
                compiled_scores(params, fp32, int8, groups, spread, squared_error)),
            f"compiled, {len(bad)} worst bad cases, total": sensitivity.error_removed(
                compiled_scores(params, fp32, int8, groups, bad)),
            f"emulated, {len(bad)} worst bad cases, total (earlier)": emulated_scores(params, fp32, int8, groups, bad),
        }
        top = np.argsort(-gains)[:3]
        print(f"\nnaive INT8 demo (performance preset, no scope): FP32 mAP50-95 {fp32_map:.4f}, {len(groups)} groups")
        print(f"INT8 drop compiled {fp32_map - int8_map:.4f}; emulated in float "
              f"{fp32_map - emulated_map(params, int8, groups, dataset, val):.4f} (FakeQuantize in float)")
        print("groups that gain most alone: " + "; ".join(f"{groups[g].ops[0]} +{gains[g]:.4f}" for g in top))
        print(f"{'ranking':<52}{'ranks of those 3':>18}{'spearman vs gain':>18}")
        for name, score in rankings.items():
            order = list(np.argsort(-score, kind="stable"))
            ranks = ", ".join(str(order.index(g) + 1) for g in top)
            print(f"{name:<52}{ranks:>18}{spearman(score, gains):>18.2f}")


def emulated_map(params, int8, groups, dataset, val) -> float:
    """mAP50-95 of the INT8 model with every FakeQuantize emulated in float."""
    compiled = ov.Core().compile_model(emulated(int8, groups, switchable=False), "CPU",
                                       {"INFERENCE_PRECISION_HINT": params.baseline.inference_precision})
    return evaluate(OpenVINO(), compiled, val, dataset.names, params.model.imgsz).value("map50_95")


if __name__ == "__main__":
    main()
