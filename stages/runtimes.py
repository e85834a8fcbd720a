"""Which runtime, on this CPU: the same .pt judged on every runtime qgate knows (export, baseline, quantize with the
runtime's own quantizer, int8_eval), then every FP32 and INT8 model timed in the same interleaved rounds."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from pathlib import Path

import yaml

from qgate.artifacts import fp32_model, int8_model
from qgate.cli import run_stage
from qgate.cpu import cpu_info, describe
from qgate.deploy import RUNTIMES
from qgate.intervals import Interval, ratio_interval
from qgate.io import read_json, write_csv, write_json, write_text
from qgate.params import Params, as_dict, load_params
from qgate.racing import fastest
from qgate.runtime_choice import COLUMNS, markdown
from qgate.runtimes import runtime_named
from qgate.verdicts import decide
from stages import baseline, export, int8_eval, quantize

log = logging.getLogger(__name__)

STAGES = (export, baseline, quantize, int8_eval)


def main(params: Params) -> dict:
    """Judge `model.weights` on each runtime in a workspace of its own; write the side-by-side table and metrics."""
    out = params.deploy
    for output in (out.runtimes_metrics, out.runtimes_csv, out.runtimes_table):
        Path(output).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="qgate-runtimes-") as tmp:
        judged = {name: _judge_on(params, name, Path(tmp) / name) for name in RUNTIMES}
        speeds = _interleaved_speeds(params, judged)
    rows = _rows(params, judged, speeds)
    chosen = _fastest_passing(params, rows, speeds)
    metrics = {"runtimes": len(rows), "fastest_passing": chosen, **cpu_info(),
               "model_sha256": next(iter(judged.values()))["record"]["model_sha256"],
               **{f"{r['runtime']}_{key}": r[key] for r in rows for key in COLUMNS[3:] if isinstance(r[key], float)}}
    write_csv(out.runtimes_csv, rows, COLUMNS)
    write_text(out.runtimes_table, markdown(rows, chosen, describe(metrics)))
    write_json(out.runtimes_metrics, metrics)
    return metrics


def _judge_on(params: Params, runtime: str, workspace: Path) -> dict:
    """The stages up to int8_eval on `runtime` with its own quantizer, in its workspace."""
    workspace.mkdir(parents=True)
    values = as_dict(params)
    for key in ("weights", "dataset", "data_dir"):  # the workspace is elsewhere: paths from the project root
        values["model"][key] = str(Path(values["model"][key]).resolve())
    values["deploy"]["runtime"] = runtime
    values["quantize"]["quantizer"] = "default"
    (workspace / "params.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    with contextlib.chdir(workspace):  # the stages write to their fixed paths, here inside the workspace
        on_it = load_params("params.yaml")
        for stage in STAGES:
            log.info("runtimes: %s on %s", stage.__name__, runtime)
            stage.main(on_it)
    return {"workspace": workspace, "baseline": read_json(workspace / params.baseline.metrics),
            "int8": read_json(workspace / params.int8_eval.metrics),
            "record": read_json(workspace / params.export.record),
            "quantizer": read_json(workspace / params.quantize.metrics)["quantizer"]}


def _interleaved_speeds(params: Params, judged: dict) -> dict[str, list[float]]:
    """`benchmark.repeats` rounds; in each, every runtime's FP32 and INT8 model once (its own timed run)."""
    cfg = params.benchmark
    models = {}
    for name in judged:
        on_it = dataclasses.replace(params, deploy=dataclasses.replace(params.deploy, runtime=name))
        models |= {f"{name}_fp32": (name, judged[name]["workspace"] / fp32_model(on_it)),
                   f"{name}_int8": (name, judged[name]["workspace"] / int8_model(on_it))}
    speeds: dict[str, list[float]] = {key: [] for key in models}
    for round_index in range(max(cfg.repeats, 3)):
        for key, (name, path) in models.items():
            log.info("[round %d] runtimes: %s (%s, %d s)", round_index + 1, key, cfg.hint, cfg.seconds)
            run = runtime_named(name).timed_run(path, params.baseline.inference_precision, cfg,
                                                judged[name]["workspace"] / "timed" / f"{key}_{round_index}",
                                                params.model.imgsz)
            speeds[key].append(run["fps"] if cfg.hint == "throughput" else 1000.0 / run["latency_ms"])
    return speeds


def _rows(params: Params, judged: dict, speeds: dict[str, list[float]]) -> list[dict]:
    gates, level = params.gates, params.benchmark.ci_level
    reference = judged[next(iter(judged))]["baseline"]["map50_95"]
    best = max(judged, key=lambda n: sorted(speeds[f"{n}_int8"])[len(speeds[f"{n}_int8"]) // 2])
    rows = []
    for name, result in judged.items():
        int8, fp32_map = result["int8"], result["baseline"]["map50_95"]
        accuracy = decide("<=", int8["map50_95_drop"], int8["map50_95_drop_ci_low"], int8["map50_95_drop_ci_high"],
                          gates.max_map50_95_drop, gates.confidence, gates.inconclusive)
        speedup = ratio_interval(speeds[f"{name}_int8"], speeds[f"{name}_fp32"], level)
        speed = decide(">=", speedup.point, speedup.low, speedup.high, gates.min_speedup, gates.confidence,
                       gates.inconclusive)
        over = ratio_interval(speeds[f"{name}_int8"], speeds[f"{best}_int8"], level)
        rows.append({"runtime": name, "version": result["record"].get("runtime_version", ""),
                     "quantizer": result["quantizer"], "fp32_map50_95": fp32_map,
                     "fp32_differs_by": round(fp32_map - reference, 5), "int8_map50_95_drop": int8["map50_95_drop"],
                     "drop_ci_low": int8["map50_95_drop_ci_low"], "drop_ci_high": int8["map50_95_drop_ci_high"],
                     "accuracy": accuracy[0],
                     "fp32_fps": _median(speeds[f"{name}_fp32"]), "int8_fps": _median(speeds[f"{name}_int8"]),
                     **_fields(speedup, "speedup"), "speed": speed[0],
                     **_fields(over, "int8_fps_over_fastest", "over_fastest"),
                     "passes": int(accuracy[1] and speed[1])})
    return rows


def _fastest_passing(params: Params, rows: list[dict], speeds: dict[str, list[float]]) -> str:
    """The passing runtime no other passing one beats beyond noise (paired rounds); '' when none passes."""
    passing = [r["runtime"] for r in rows if r["passes"]]
    if not passing:
        return ""
    int8 = {name: speeds[f"{name}_int8"] for name in passing}
    return fastest(passing, int8, int8[passing[0]], params.benchmark.ci_level).chosen


def _fields(value: Interval, key: str, bounds: str | None = None) -> dict:
    bounds = bounds or key
    return {key: round(value.point, 3), f"{bounds}_ci_low": round(value.low, 3),
            f"{bounds}_ci_high": round(value.high, 3)}


def _median(values: list[float]) -> float:
    return round(sorted(values)[len(values) // 2], 2)


if __name__ == "__main__":
    run_stage(main, __doc__)
