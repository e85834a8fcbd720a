"""FP32 + INT8 models on N images -> per-layer divergence table, first divergent layer, clip/round split, advice."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np
from tqdm import tqdm

from qgate.cli import run_stage
from qgate.dataset import split_images
from qgate.divergence import CLIP_GROWTH, NETWORK_INPUT, DetectionError, LayerStats, sqnr_db
from qgate.divergence_table import divergent, layer_rows
from qgate.preprocess import image_tensor
from qgate.io import write_csv, write_json, write_text
from qgate.params import Params
from qgate.artifacts import export_record, fp32_model, int8_weights_sha256, model_dataset, require_int8_model
from qgate.runtimes import Runtime, runtime_for
from qgate.shifts import Shift
from qgate.tasks import task_for

log = logging.getLogger(__name__)

COLUMNS = ["index", "name", "port", "type", "sqnr_db", "local_drop_db", "divergent", "worst_input", "inherits_error",
           "cosine",
           "mse", "l1", "max_abs_err", "fp32_min", "fp32_max", "fp32_mean", "int8_min", "int8_max", "int8_mean",
           "nan_inf", "inputs_quantized", "weights_int8", "introduces_error", "error_from", "input_quantizer",
           "clip_fraction", "clip_error_share", "round_error_share", "inputs", "advice"]


def main(params: Params) -> dict:
    """Capture every layer of both models on the chosen images, streaming; write the table, plot data and metrics."""
    cfg = params.divergence
    for output in (cfg.metrics, cfg.csv, cfg.table, cfg.plot, cfg.shifts_csv, cfg.histograms):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    int8_path = require_int8_model(params)
    runtime = runtime_for(params)
    fp32, int8 = runtime.read(fp32_model(params)), runtime.read(int8_path)
    keys = runtime.match_layers(fp32, int8, str(fp32_model(params)), str(int8_path))
    images = choose_images(params, record)
    shifts = shifted_views(params)
    log.info("[1/2] divergence: %d layers, %d images, clean and under %d shifts", len(keys), len(images), len(shifts))
    compiled = _compiled(params, runtime, fp32, int8, keys)
    capture = _Capture(params, runtime, compiled, keys, fp32, int8, task_for(record))
    positions = _positions(params, record)
    rows, output_stats, instrumentation, detections, quantizers = capture.run([(path, None, 0) for path in images],
                                                                              histograms=True)
    log.info("[2/2] divergence: ranking layers")
    broken = _mark_divergent(rows, cfg)
    first = broken[0] if broken else None
    shifted = [_under_shift(capture, cfg, shift, images, positions, rows) for shift in shifts]
    below_floor = sum(r["sqnr_db"] < cfg.sqnr_floor_db for r in rows)
    metrics = {
        "detection_error": round(detections.mean, 5),
        "detections_compared": detections.count,
        "output_sqnr_db": output_stats.row()["sqnr_db"],
        "min_layer_sqnr_db": min(r["sqnr_db"] for r in rows),
        "first_divergent_layer": first["name"] if first else "",
        "first_divergent_local_drop_db": first["local_drop_db"] if first else 0.0,
        "divergent_layers": len(broken),
        "layers_below_sqnr_floor": below_floor,
        "layers_below_sqnr_floor_frac": round(below_floor / len(rows), 4) if rows else 0.0,
        "nan_inf_layers": sum(r["nan_inf"] > 0 for r in rows),
        "instrumentation_sqnr_db": round(instrumentation, 3),
        "layers": len(rows),
        "images": len(images),
        **{f"{row['shift']}_{key}": row[key] for row in shifted for key in SHIFT_FIELDS},
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_weights_sha256(params),
    }
    write_csv(cfg.csv, rows, COLUMNS)
    write_csv(cfg.shifts_csv, shifted, SHIFT_COLUMNS)
    write_csv(cfg.plot, [{"index": r["index"], "sqnr_db": r["sqnr_db"]} for r in rows], ["index", "sqnr_db"])
    write_text(cfg.table, markdown_table(rows, broken, cfg.top_k, metrics))
    histograms = {q.name: {**q.histogram.record(), "consumers": q.consumers} for q in quantizers.values()
                  if q.count}
    write_text(cfg.histograms, json.dumps(histograms, separators=(",", ":")))  # long count arrays: one line
    write_json(cfg.metrics, metrics)
    return metrics


def choose_images(params: Params, record: dict) -> list[Path]:
    """The worst bad cases from int8_eval, then a seeded random sample of the rest, `divergence.images` in all."""
    cfg = params.divergence
    images = split_images(model_dataset(params, record), params.baseline.split)
    if cfg.images > len(images):
        log.warning("divergence.images %d > %d images in '%s': using all of them", cfg.images, len(images),
                    params.baseline.split)
    count = min(cfg.images, len(images))
    by_name = {p.name: p for p in images}
    chosen = []
    if Path(params.int8_eval.bad_cases).is_file():
        with open(params.int8_eval.bad_cases) as handle:
            worst = [row["file_name"] for row in csv.DictReader(handle)][: min(cfg.bad_cases, count)]
        chosen = [by_name[name] for name in worst if name in by_name]
    rest = [p for p in images if p not in chosen]
    order = np.random.default_rng(cfg.seed).permutation(len(rest))[: count - len(chosen)]
    return chosen + [rest[i] for i in sorted(order)]


def shifted_views(params: Params) -> list[Shift]:
    """Each shift of `robustness.shifts` at its most severe listed severity: where a range breaks, if anywhere."""
    cfg = params.robustness
    return [Shift(name, max(cfg.severities), cfg.seed) for name in cfg.shifts]


def _positions(params: Params, record: dict) -> dict[Path, int]:
    """Each image's index in its split: a shift's randomness is seeded by it, as robustness's evaluation is."""
    return {path: index for index, path in enumerate(split_images(model_dataset(params, record),
                                                                  params.baseline.split))}


def _mark_divergent(rows: list[dict], cfg) -> list[dict]:
    broken = divergent(rows, cfg.local_drop_db, cfg.divergent_sqnr_db)
    for row in rows:
        row["divergent"] = int(row in broken)
    return broken


def _under_shift(capture: "_Capture", cfg, shift: Shift, images: list[Path], positions: dict[Path, int],
                 clean: list[dict]) -> dict:
    """The same images under `shift`: the first divergent layer there; else the layer whose inputs clip the most
    more than on the clean images (`CLIP_GROWTH` of its values at least: ranges calibrated on clean images, too
    narrow for the shifted ones); else the layer that lost most SQNR against the clean images. Its SQNR and clip
    fraction both ways, and the table's advice."""
    rows = capture.run([(path, shift, positions[path]) for path in images])[0]
    broken = _mark_divergent(rows, cfg)
    before = {(r["name"], r["port"]): r for r in clean}
    lost = lambda r: before[(r["name"], r["port"])]["sqnr_db"] - r["sqnr_db"]  # noqa: E731
    grown = lambda r: _clipped(r) - _clipped(before[(r["name"], r["port"])])  # noqa: E731
    introducing = [r for r in rows if r["introduces_error"]]
    clipping = max(introducing, key=grown, default=None)
    layer = (broken[0] if broken else clipping if clipping and grown(clipping) >= CLIP_GROWTH
             else max(introducing, key=lost, default=None))
    if layer is None:
        return {"shift": shift.name, "severity": shift.severity, "layer": "", "divergent": 0}
    clean_row = before[(layer["name"], layer["port"])]
    return {"shift": shift.name, "severity": shift.severity, "layer": layer["name"], "divergent": int(bool(broken)),
            "sqnr_db": layer["sqnr_db"], "clean_sqnr_db": clean_row["sqnr_db"],
            "clip_fraction": layer["clip_fraction"], "clean_clip_fraction": clean_row["clip_fraction"],
            "advice": layer["advice"]}


def _clipped(row: dict) -> float:
    """A row's clip fraction; 0 for a layer without an activation quantizer on its inputs."""
    return float(row["clip_fraction"] or 0)


SHIFT_COLUMNS = ["shift", "severity", "layer", "divergent", "sqnr_db", "clean_sqnr_db", "clip_fraction",
                 "clean_clip_fraction", "advice"]
SHIFT_FIELDS = ("layer", "divergent")  # in divergence.json as '<shift>_layer': what the shift gate's hint names


def _compiled(params: Params, runtime: Runtime, fp32, int8, keys: list) -> tuple:
    """FP32 and INT8 with every matched layer tapped, and the plain INT8: compiled once for every pass."""
    precision = params.baseline.inference_precision
    return tuple(runtime.compile(m, precision, hint="LATENCY", uint8_input=False)
                 for m in (runtime.instrument(fp32, keys), runtime.instrument(int8, keys), int8))


class _Capture:
    """Every tapped layer of both models over a list of images: the divergence table's rows and the output facts."""

    def __init__(self, params: Params, runtime: Runtime, compiled: tuple, keys: list, fp32, int8, task):
        self.params, self.runtime, self.compiled, self.keys, self.task = params, runtime, compiled, keys, task
        self.producers, self.facts, self.int8 = runtime.producers(fp32), runtime.layer_facts(int8), int8
        self.outputs = len(runtime.output_shapes(fp32))

    def run(self, views: list[tuple[Path, Shift | None, int]], histograms: bool = False) -> tuple[
            list[dict], LayerStats, float, DetectionError, dict]:
        """(rows, output SQNR stats, instrumentation SQNR, detection error, activation quantizers) over (image,
        shift, split index); each quantizer with the histogram of its inputs when `histograms`."""
        params, runtime, keys, task = self.params, self.runtime, self.keys, self.task
        stats = {key: LayerStats() for key in keys}
        position = {key: self.outputs + i for i, key in enumerate(keys)}
        quantizers = runtime.activation_quantizers(self.int8)
        for quantizer in quantizers.values() if histograms else ():
            quantizer.keep_histogram()
        output_stats, instrumentation_sq = LayerStats(), [0.0, 0.0]
        detections = DetectionError(task, params.int8_eval.bad_case_conf)
        for path, shift, index in tqdm(views, desc="divergence", unit="img", leave=False, disable=None):
            tensor = image_tensor(path, params.model.imgsz, shift, index, task.prepare)
            ref, test, plain = (runtime.infer(compiled, tensor) for compiled in self.compiled)
            for key in keys:
                stats[key].update(ref[position[key]], test[position[key]])
            for key, quantizer in quantizers.items():
                if key in position:
                    quantizer.update(ref[position[key]], test[position[key]])
                elif key == NETWORK_INPUT:  # the image itself: its range clips bright pixels, for one
                    quantizer.update(tensor, tensor)
            output_stats.update(ref[0], plain[0])
            detections.update(tuple(r[0] for r in ref[:task.outputs]), tuple(p[0] for p in plain[:task.outputs]))
            difference = test[0].astype(np.float64) - plain[0]
            instrumentation_sq[0] += float((plain[0].astype(np.float64) ** 2).sum())
            instrumentation_sq[1] += float((difference ** 2).sum())
        rows = layer_rows(self.producers, self.facts, keys, stats, quantizers, params.divergence.concat_range_ratio)
        return rows, output_stats, sqnr_db(*instrumentation_sq), detections, quantizers


def markdown_table(rows: list[dict], broken: list[dict], top_k: int, metrics: dict) -> str:
    """The top-k layers by local SQNR drop as a Markdown table, under a line naming the divergent layers."""
    names = ", ".join(f"`{r['name']}` ({r['sqnr_db']:.1f} dB)" for r in broken[:5])
    lines = [f"Output SQNR {metrics['output_sqnr_db']:.1f} dB over {metrics['images']} images; "
             + (f"{len(broken)} divergent layers, in graph order: {names}" if broken else
                "no divergent layer (none loses the local-drop threshold and ends below the divergent SQNR)"),
             "", "Top layers by local SQNR drop (error introduced at the layer, not carried in):", "",
             "| # | layer | type | SQNR dB | local drop dB | divergent | clipped | advice |",
             "|---|---|---|---|---|---|---|---|"]
    ranked = sorted((r for r in rows if r["inherits_error"]), key=lambda r: -r["local_drop_db"])
    for row in ranked[:top_k]:
        clipped = f"{row['clip_fraction']:.2%}" if row["clip_fraction"] != "" else ""
        lines.append(f"| {row['index']} | `{row['name']}` | {row['type']} | {row['sqnr_db']:.1f} | "
                     f"{row['local_drop_db']:.1f} | {'yes' if row['divergent'] else ''} | {clipped} | "
                     f"{row['advice']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_stage(main, __doc__)
