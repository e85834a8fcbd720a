"""FP32 IR + calibration split -> NNCF INT8 IR, a per-op precision table and quantize metrics."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import openvino as ov

from qgate.cli import run_stage
from qgate.dataset import Dataset, split_images
from qgate.errors import QgateError
from qgate.evaluator import image_tensor
from qgate.heads import decode_ops, output_layers
from qgate.io import atomic_dir, write_csv, write_json
from qgate.params import Params
from qgate.artifacts import INT8_IR_NAME, export_record, fp32_ir, int8_ir_sha256, model_dataset, op_inventory
from qgate.precision import (DECODE_RULE, OUTPUT_LAYER_RULE, PRECISION_COLUMNS, SCOPE_RULE, precision_table,
                             scope_matches)

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
    quantized = _quantize(model, calibration, params, list(rules))
    seconds = time.perf_counter() - start
    rows = precision_table(quantized, matches)
    log.info("[3/3] quantize: writing %s", cfg.out_dir)
    sizes = _save(quantized, Path(cfg.out_dir))
    write_csv(cfg.precision_table, rows, PRECISION_COLUMNS)
    metrics = {
        "fake_quantize_count": sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ops()),
        "ops_int8": sum(row["precision"] == "int8" for row in rows),
        "ops_float": sum(row["precision"] == "float" for row in rows),
        "ops_ignored_by_scope": sum(row["why"].startswith(SCOPE_RULE) for row in rows),
        "ops_float_by_decode_rule": sum(row["why"] == DECODE_RULE for row in rows),
        "ops_float_by_output_layer_rule": sum(row["why"] == OUTPUT_LAYER_RULE for row in rows),
        "calibration_images": len(calibration),
        "calibration_overlaps_val": int(_overlap(params, dataset, calibration) > 0),
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


def rule_scope(model: ov.Model, params: Params) -> dict[str, str]:
    """Op name -> the automatic rule that keeps it float: the head decode (`quantize.keep_decode_float`) and the
    head's output layers (`quantize.keep_output_layers_float`), both found from the graph."""
    cfg = params.quantize
    return ({name: DECODE_RULE for name in decode_ops(model) if cfg.keep_decode_float}
            | {name: OUTPUT_LAYER_RULE for name in output_layers(model) if cfg.keep_output_layers_float})


def calibration_images(params: Params, dataset: Dataset) -> list[Path]:
    """Seeded subset of the calibration split; refuses val images unless the params allow them."""
    cfg = params.quantize
    images = split_images(dataset, cfg.calibration_split)
    overlap = _overlap(params, dataset, images)
    if overlap and not cfg.allow_val_calibration:
        raise QgateError(f"{dataset.yaml_path}: {overlap} of {len(images)} '{cfg.calibration_split}' images are "
                         f"also in '{params.baseline.split}'; calibrate on another split, or set "
                         "quantize.allow_val_calibration: true (the report will say so)")
    if overlap:
        log.warning("calibrating on %d images that are also evaluated (allow_val_calibration)", overlap)
    if cfg.subset_size > len(images):
        log.warning("quantize.subset_size %d > %d images in '%s': using all of them",
                    cfg.subset_size, len(images), cfg.calibration_split)
    order = np.random.default_rng(cfg.seed).permutation(len(images))[: cfg.subset_size]
    return [images[i] for i in sorted(order)]


def _overlap(params: Params, dataset: Dataset, images: list[Path]) -> int:
    evaluated = {p.resolve() for p in split_images(dataset, params.baseline.split)}
    return sum(p.resolve() in evaluated for p in images)


def _quantize(model: ov.Model, images: list[Path], params: Params, by_rule: list[str]) -> ov.Model:
    import nncf

    cfg = params.quantize
    imgsz = params.model.imgsz

    def transform(path: Path) -> np.ndarray:
        try:
            return image_tensor(path, imgsz)
        except QgateError as exc:
            raise QgateError(f"{path}: unreadable calibration image; remove it from the split") from exc

    scope = cfg.ignored_scope
    ignored = nncf.IgnoredScope(
        names=list(dict.fromkeys([*by_rule, *scope.names])), patterns=list(scope.patterns), types=list(scope.types),
        subgraphs=[nncf.Subgraph(inputs=list(s.inputs), outputs=list(s.outputs)) for s in scope.subgraphs])
    return nncf.quantize(
        model, nncf.Dataset(images, transform), preset=nncf.QuantizationPreset(cfg.preset),
        model_type=None if cfg.model_type == "none" else nncf.ModelType(cfg.model_type),
        subset_size=len(images), fast_bias_correction=cfg.fast_bias_correction, ignored_scope=ignored)


def _save(model: ov.Model, out_dir: Path) -> float:
    """Save atomically (whole folder renamed into place); return the weights file size in MB."""
    with atomic_dir(out_dir) as staging:
        ov.save_model(model, staging / INT8_IR_NAME, compress_to_fp16=False)
    return round((out_dir / INT8_IR_NAME).with_suffix(".bin").stat().st_size / 2**20, 3)


if __name__ == "__main__":
    run_stage(main, __doc__)
