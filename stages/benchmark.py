"""FP32 and INT8 models -> the runtime's timed runs (OpenVINO: benchmark_app) in interleaved pairs: medians, speed-up
interval, spread, sizes."""

from __future__ import annotations

import logging
import shutil
import statistics
import time
from pathlib import Path

from qgate.cli import run_stage
from qgate.cpu import cpu_info
from qgate.errors import QgateError
from qgate.intervals import Interval, ratio_interval
from qgate.io import sha256_file, write_json
from qgate.params import BenchmarkParams, Params
from qgate.artifacts import export_record, fixed_model, fp32_model, int8_model, int8_weights_sha256, require_int8_model, weights_file
from qgate.runtimes import runtime_for

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Time the models in interleaved rounds; write medians, the speed-up interval, spread, sizes."""
    cfg = params.benchmark
    Path(cfg.metrics).unlink(missing_ok=True)
    record = export_record(params)
    require_int8_model(params)
    runtime = runtime_for(params)
    devices = runtime.devices()
    if cfg.device not in devices:
        raise QgateError(f"params.yaml: benchmark.device '{cfg.device}' is not available here; "
                         f"use one of {', '.join(devices)}")
    precision = params.baseline.inference_precision
    runs = {"fp32": (fp32_model(params), precision), "int8": (int8_model(params), precision)}
    if cfg.bf16 and runtime.bf16_supported(cfg.device):
        runs["bf16"] = (fp32_model(params), "bf16")
    if fixed_needed(params):
        runs["fixed"] = (fixed_model(params), precision)
    shutil.rmtree(cfg.report_dir, ignore_errors=True)
    results = measure(runs, cfg, params)
    metrics = _summarize(results, runs, cfg, record, params)
    write_json(cfg.metrics, metrics)
    return metrics


def measure(runs: dict, cfg: BenchmarkParams, params: Params) -> dict[str, list[dict]]:
    """`repeats` interleaved rounds of every run, then FP32/INT8 pairs while the gate's limit is inside the interval.

    Interleaved so slow drift on a shared VM hits every model alike. More pairs are measured while
    `gates.min_speedup` lies inside the speed-up's interval (with `gates.confidence` set), or while the interval
    is wider than `benchmark.max_spread` of the ratio either way (two busy cores: one pair far off widens a
    three-pair interval to 1.7-3.0x), until neither holds or `max_seconds` is spent: the stage does not judge,
    it measures until the gate can.
    """
    results: dict[str, list[dict]] = {name: [] for name in runs}
    start = time.perf_counter()
    for repeat in range(cfg.repeats):
        for name in runs:
            results[name].append(_run(name, runs, cfg, params, repeat))
    while reason := _more_pairs_needed(results, cfg, params):
        pair_seconds = (time.perf_counter() - start) / sum(len(r) for r in results.values()) * 2
        if time.perf_counter() - start + pair_seconds > cfg.max_seconds:
            log.info("benchmark: %s after %d pairs; benchmark.max_seconds %g s spent", reason,
                     len(results["int8"]), cfg.max_seconds)
            break
        for name in ("fp32", "int8"):
            results[name].append(_run(name, runs, cfg, params, len(results[name])))
    return results


def _run(name: str, runs: dict, cfg: BenchmarkParams, params: Params, repeat: int) -> dict:
    ir, precision = runs[name]
    log.info("[pair %d] benchmark: %s (%s, %s, %d s)", repeat + 1, name, precision, cfg.hint, cfg.seconds)
    return runtime_for(params).timed_run(ir, precision, cfg, Path(cfg.report_dir) / f"{name}_{repeat}",
                                         params.model.imgsz)


def _more_pairs_needed(results: dict[str, list[dict]], cfg: BenchmarkParams, params: Params) -> str:
    """Why the pairs so far are not enough ('' when they are): the gate's limit inside the speed-up interval, or
    an interval wider than benchmark.max_spread of the ratio."""
    limit, ratio = params.gates.min_speedup, speedup_interval(results, cfg.ci_level)
    if params.gates.confidence is not None and limit is not None and ratio.low < limit <= ratio.high:
        return "the speed-up interval still holds gates.min_speedup"
    if (ratio.high - ratio.low) / 2 > cfg.max_spread * ratio.point:
        return f"the speed-up interval is still wider than benchmark.max_spread {cfg.max_spread:g} of the ratio"
    return ""


def speedup_interval(results: dict[str, list[dict]], level: float) -> Interval:
    """INT8/FP32 throughput ratio over the interleaved pairs, with its interval."""
    return ratio_interval([s["fps"] for s in results["int8"]], [s["fps"] for s in results["fp32"]], level)


def fixed_needed(params: Params) -> bool:
    """Whether autofix wrote a model other than the plain INT8 one (then it is benchmarked too).

    Told by the weights, not by autofix's metrics: a file with timings would re-run this stage for nothing.
    """
    fixed = weights_file(fixed_model(params))
    return fixed.is_file() and sha256_file(fixed) != int8_weights_sha256(params)


def _summarize(results: dict, runs: dict, cfg: BenchmarkParams, record: dict, params: Params) -> dict:
    metrics: dict = {}
    for name, samples in results.items():
        fps = [s["fps"] for s in samples]
        metrics[f"{name}_latency_ms"] = round(statistics.median(s["latency_ms"] for s in samples), 3)
        metrics[f"{name}_fps"] = round(statistics.median(fps), 2)
        metrics[f"{name}_fps_spread_rel"] = round((max(fps) - min(fps)) / statistics.median(fps), 4)
        metrics[f"{name}_precision"] = _measured(runs[name], cfg.device, params)
    ratio = speedup_interval(results, cfg.ci_level)
    metrics.update({"speedup_fps": round(ratio.point, 3), "speedup_fps_ci_low": round(ratio.low, 3),
                    "speedup_fps_ci_high": round(ratio.high, 3), "ci_level": cfg.ci_level,
                    "pairs": len(results["int8"])})
    metrics["speedup_latency"] = round(metrics["fp32_latency_ms"] / metrics["int8_latency_ms"], 3)
    if "bf16" in results:
        metrics["int8_vs_bf16_fps"] = round(metrics["int8_fps"] / metrics["bf16_fps"], 3)
    if "fixed" in results:
        metrics["fixed_speedup_fps"] = round(metrics["fixed_fps"] / metrics["fp32_fps"], 3)
        metrics["fixed_size_mb"] = round(weights_file(fixed_model(params)).stat().st_size / 2**20, 3)
    fp32_mb = weights_file(fp32_model(params)).stat().st_size / 2**20
    int8_mb = weights_file(int8_model(params)).stat().st_size / 2**20
    metrics.update({
        "bf16_supported": int("bf16" in results), "fixed_benchmarked": int("fixed" in results),
        "fp32_size_mb": round(fp32_mb, 3), "int8_size_mb": round(int8_mb, 3),
        "compression_ratio": round(fp32_mb / int8_mb, 3),
        "hint": cfg.hint, "seconds": cfg.seconds, "batch": cfg.batch,
        "device": cfg.device, **cpu_info(),  # the INT8/FP32 ratio is the CPU's as much as the model's
        "model_sha256": record["model_sha256"], "int8_ir_bin_sha256": int8_weights_sha256(params),
    })
    return metrics


def _measured(run: tuple[Path, str], device: str, params: Params) -> str:
    path, precision = run
    runtime = runtime_for(params)
    return runtime.measured_precision(runtime.compile(runtime.read(path), precision, hint="LATENCY",
                                                      uint8_input=False, device=device))


if __name__ == "__main__":
    run_stage(main, __doc__)
