"""FP32 IR + calibration split -> NNCF INT8 IR, a per-op precision table and quantize metrics."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import openvino as ov

from qgate.cli import run_stage
from qgate.io import atomic_dir, write_csv, write_json
from qgate.params import Params
from qgate.artifacts import (INT8_IR_NAME, export_record, fake_quantize_count, fp32_ir, int8_ir_sha256, model_dataset,
                             op_inventory)
from qgate.precision import (DECODE_RULE, OUTPUT_LAYER_RULE, PRECISION_COLUMNS, SCOPE_RULE, precision_table,
                             scope_matches)
from qgate.quantization import calibration_images, overlap, quantize_model, rule_scope

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Quantize the FP32 IR with the `quantize:` settings; write the INT8 IR, precision table and metrics."""
    cfg = params.quantize
    for output in (cfg.metrics, cfg.precision_table, cfg.record):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    dataset = model_dataset(params, record)
    calibration = calibration_images(params, dataset)
    model = ov.Core().read_model(fp32_ir(params))
    log.info("[1/3] quantize: matching the ignored scope")
    rules = rule_scope(model, params)
    matches = rules | scope_matches(model, cfg.ignored_scope, fp32_ir(params))
    log.info("[2/3] quantize: NNCF %s preset on %d calibration images, %d head ops kept float by rule", cfg.preset,
             len(calibration), len(rules))
    start = time.perf_counter()
    quantized = quantize_model(model, calibration, params, list(rules))
    seconds = time.perf_counter() - start
    rows = precision_table(quantized, matches)
    log.info("[3/3] quantize: writing %s", cfg.out_dir)
    sizes = _save(quantized, Path(cfg.out_dir))
    write_csv(cfg.precision_table, rows, PRECISION_COLUMNS)
    metrics = {
        "fake_quantize_count": fake_quantize_count(quantized),
        "ops_int8": sum(row["precision"] == "int8" for row in rows),
        "ops_float": sum(row["precision"] == "float" for row in rows),
        "ops_ignored_by_scope": sum(row["why"].startswith(SCOPE_RULE) for row in rows),
        "ops_float_by_decode_rule": sum(row["why"] == DECODE_RULE for row in rows),
        "ops_float_by_output_layer_rule": sum(row["why"] == OUTPUT_LAYER_RULE for row in rows),
        "calibration_images": len(calibration),
        "calibration_overlaps_val": int(overlap(params, dataset, calibration) > 0),
        "quantize_seconds": round(seconds, 2),
        "int8_ir_size_mb": sizes,
        "preset": cfg.preset,
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_ir_sha256(params),
    }
    write_json(cfg.record, int8_record(quantized, record, metrics["int8_ir_bin_sha256"]))
    write_json(cfg.metrics, metrics)
    return metrics


def int8_record(quantized: ov.Model, record: dict, int8_sha256: str) -> dict:
    """The INT8 IR's op inventory beside the FP32 one's: which FP32 ops the quantized graph lost, if any."""
    inventory = op_inventory(quantized)
    present = set(inventory["ir_op_names"])
    return {
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_sha256,
        "fp32_ops_missing": [name for name in record["ir_op_names"] if name not in present],
        **inventory,
    }


def _save(model: ov.Model, out_dir: Path) -> float:
    """Save atomically (whole folder renamed into place); return the weights file size in MB."""
    with atomic_dir(out_dir) as staging:
        ov.save_model(model, staging / INT8_IR_NAME, compress_to_fp16=False)
    return round((out_dir / INT8_IR_NAME).with_suffix(".bin").stat().st_size / 2**20, 3)


if __name__ == "__main__":
    run_stage(main, __doc__)
