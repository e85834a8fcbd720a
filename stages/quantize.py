"""FP32 model + calibration split -> the runtime's INT8 model, a per-op precision table and quantize metrics."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from qgate.cli import run_stage
from qgate.deploy import quantizer_in_force
from qgate.io import atomic_dir, write_csv, write_json
from qgate.params import Params
from qgate.artifacts import export_record, fp32_model, int8_weights_sha256, model_dataset, model_name, weights_file
from qgate.calibration import Calibration, overlap
from qgate.precision import DECODE_RULE, OUTPUT_LAYER_RULE, PRECISION_COLUMNS, SCOPE_RULE, rule_scope
from qgate.runtimes import Runtime, runtime_for
from qgate.tasks import task_for

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Quantize the FP32 model with the `quantize:` settings; write the INT8 model, precision table and metrics."""
    cfg = params.quantize
    for output in (cfg.metrics, cfg.precision_table, cfg.record):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    dataset = model_dataset(params, record)
    calibration = Calibration.of(params, dataset, task_for(record).prepare)
    runtime = runtime_for(params)
    quantizer = quantizer_in_force(runtime.name, cfg.quantizer)
    model = runtime.read(fp32_model(params))
    log.info("[1/3] quantize: matching the ignored scope")
    rules = rule_scope(runtime, model, params)
    matches = rules | runtime.scope_matches(model, cfg.ignored_scope, fp32_model(params))
    log.info("[2/3] quantize: the %s quantizer for %s on %d calibration images, %d head ops kept float by rule",
             quantizer, runtime.name, len(calibration.images), len(rules))
    start = time.perf_counter()
    quantized = runtime.quantize(model, calibration, params, list(rules))
    seconds = time.perf_counter() - start
    rows = runtime.precision_table(quantized, matches)
    log.info("[3/3] quantize: writing %s", cfg.out_dir)
    sizes = _save(runtime, quantized, Path(cfg.out_dir) / model_name(params, "int8"))
    write_csv(cfg.precision_table, rows, PRECISION_COLUMNS)
    metrics = {
        "quantizer_count": runtime.quantizer_count(quantized),
        "ops_int8": sum(row["precision"] == "int8" for row in rows),
        "ops_float": sum(row["precision"] == "float" for row in rows),
        "ops_ignored_by_scope": sum(row["why"].startswith(SCOPE_RULE) for row in rows),
        "ops_float_by_decode_rule": sum(row["why"] == DECODE_RULE for row in rows),
        "ops_float_by_output_layer_rule": sum(row["why"] == OUTPUT_LAYER_RULE for row in rows),
        "calibration_images": len(calibration.images),
        "calibration_overlaps_val": int(overlap(params, dataset, calibration.images) > 0),
        "quantize_seconds": round(seconds, 2),
        "int8_ir_size_mb": sizes,
        "preset": cfg.preset,
        "quantizer": quantizer,
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_weights_sha256(params),
    }
    write_json(cfg.record, int8_record(runtime, quantized, record, metrics["int8_ir_bin_sha256"]))
    write_json(cfg.metrics, metrics)
    return metrics


def int8_record(runtime: Runtime, quantized, record: dict, int8_sha256: str) -> dict:
    """The INT8 model's op inventory beside the FP32 one's: which FP32 ops the quantized graph lost, if any."""
    inventory = runtime.op_inventory(quantized)
    present = set(inventory["ir_op_names"])
    return {
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_sha256,
        "fp32_ops_missing": [name for name in record["ir_op_names"] if name not in present],
        **inventory,
    }


def _save(runtime: Runtime, model, path: Path) -> float:
    """Save atomically (whole folder renamed into place); return the weights file size in MB."""
    with atomic_dir(path.parent) as staging:
        runtime.save(model, staging / path.name)
    return round(weights_file(path).stat().st_size / 2**20, 3)


if __name__ == "__main__":
    run_stage(main, __doc__)
