"""FP32 and INT8 scored on shifted copies of the val images: INT8's drop under each shift, paired, with intervals."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from qgate.artifacts import export_record, fp32_model, int8_weights_sha256, require_int8_model
from qgate.cli import run_stage
from qgate.executors import open_executor
from qgate.deployment_checks import worst_shift_drop
from qgate.io import write_csv, write_json
from qgate.params import Params
from qgate.pipeline import evaluate_models, val_images
from qgate.runtimes import runtime_for
from qgate.shifts import Shift
from qgate.task_metrics import Scored, shift_key
from qgate.tasks import Detect, task_for

log = logging.getLogger(__name__)

CSV_COLUMNS = ["shift", "severity", "metric", "fp32", "int8", "drop", "drop_ci_low", "drop_ci_high"]


def main(params: Params) -> dict:
    """Evaluate both models once per shift and severity; write each drop and each shift's worst one."""
    cfg = params.robustness
    for output in (cfg.metrics, cfg.csv):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    task = task_for(record)
    val = val_images(params, record)
    shifts = [Shift(name, severity, cfg.seed) for name in cfg.shifts for severity in cfg.severities]
    metrics: dict = {"shifts": list(cfg.shifts), "severities": list(cfg.severities), "seed": cfg.seed,
                     "images": len(val[0]), "ci_level": params.int8_eval.ci_level,
                     "bootstrap_samples": cfg.bootstrap_samples}
    start = time.perf_counter()
    evaluated: dict[Shift, tuple] = {}
    with open_executor(params.compute) as executor:
        models = _compiled(params, executor, (fp32_model(params), require_int8_model(params)))
        for index, shift in enumerate(shifts, 1):
            log.info("[%d/%d] robustness: %s at severity %d", index, len(shifts), shift.name, shift.severity)
            evaluated[shift] = tuple(evaluate_models(params, models, record, executor, val, shift))
    metrics["inference_precision"] = next(iter(evaluated.values()))[0].precision if evaluated else ""
    rows = []
    for family in task.metrics.scored:
        for name in cfg.shifts:
            fields, family_rows = _shift_drops(params, task, family, name, evaluated)
            metrics |= fields
            rows += family_rows
    log.info("robustness: %d shifted evaluations of both models took %.1f s", len(shifts), time.perf_counter() - start)
    metrics |= {"model_sha256": record["model_sha256"], "ir_bin_sha256": record["ir_bin_sha256"],
                "int8_ir_bin_sha256": int8_weights_sha256(params)}
    write_csv(cfg.csv, rows, CSV_COLUMNS)
    write_json(cfg.metrics, metrics)
    return metrics


def _compiled(params: Params, executor, paths: tuple[Path, ...]) -> tuple:
    """Each model compiled once for every shift when this process predicts; remote workers compile their own."""
    if executor.remote:
        return paths
    runtime = runtime_for(params)
    return tuple(runtime.compile(runtime.read(path), params.baseline.inference_precision) for path in paths)


def _shift_drops(params: Params, task: Detect, family: Scored, name: str, evaluated: dict) -> tuple[dict, list[dict]]:
    """One shift's values and drops at each severity, and the judged one: the severity with the largest drop, with
    its paired bootstrap interval (`qgate.deployment_checks.worst_shift_drop`). The other severities are point
    values for the report's plot: intervals are what costs (12 s a model on the demo under noise at severity 3, at
    1000 resamples)."""
    worst, paired, points = worst_shift_drop(params, task, family, {s: pair for s, pair in evaluated.items()
                                                                    if s.name == name})
    key = shift_key(family, worst.label)
    fields = (paired.int8.fields(key, 5) | paired.fp32.fields(f"baseline_{key}", 5)
              | paired.drop.fields(f"{key}_drop", 5)
              | paired.drop.fields(f"{shift_key(family, name)}_drop", 5)
              | {f"{shift_key(family, name)}_drop_severity": worst.severity})
    rows = []
    for shift, (fp32_value, int8_value) in points.items():
        judged = shift == worst
        if not judged:
            key = shift_key(family, shift.label)
            fields |= {key: round(int8_value, 5), f"baseline_{key}": round(fp32_value, 5),
                       f"{key}_drop": round(fp32_value - int8_value, 5)}
        drop = paired.drop
        rows.append({"shift": shift.name, "severity": shift.severity, "metric": family.main.key,
                     "fp32": round(fp32_value, 5), "int8": round(int8_value, 5),
                     "drop": round(fp32_value - int8_value, 5), "drop_ci_low": round(drop.low, 5) if judged else "",
                     "drop_ci_high": round(drop.high, 5) if judged else ""})
    return fields, rows


if __name__ == "__main__":
    run_stage(main, __doc__)
