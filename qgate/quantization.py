"""NNCF quantization with the `quantize:` params: the float rules, the calibration images, the NNCF call.

The quantize stage runs it once; `tune` runs it per candidate config.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import openvino as ov

from qgate.dataset import Dataset, split_images
from qgate.errors import QgateError
from qgate.evaluator import image_tensor
from qgate.heads import decode_ops, output_layers
from qgate.params import Params, QuantizeParams
from qgate.precision import DECODE_RULE, OUTPUT_LAYER_RULE

log = logging.getLogger(__name__)


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
    shared = overlap(params, dataset, images)
    if shared and not cfg.allow_val_calibration:
        raise QgateError(f"{dataset.yaml_path}: {shared} of {len(images)} '{cfg.calibration_split}' images are "
                         f"also in '{params.baseline.split}'; calibrate on another split, or set "
                         "quantize.allow_val_calibration: true (the report will say so)")
    if shared:
        log.warning("calibrating on %d images that are also evaluated (allow_val_calibration)", shared)
    if cfg.subset_size > len(images):
        log.warning("quantize.subset_size %d > %d images in '%s': using all of them",
                    cfg.subset_size, len(images), cfg.calibration_split)
    order = np.random.default_rng(cfg.seed).permutation(len(images))[: cfg.subset_size]
    return [images[i] for i in sorted(order)]


def overlap(params: Params, dataset: Dataset, images: list[Path]) -> int:
    """How many of `images` are also in the split every model is scored on."""
    evaluated = {p.resolve() for p in split_images(dataset, params.baseline.split)}
    return sum(p.resolve() in evaluated for p in images)


def quantize_model(model: ov.Model, images: list[Path], params: Params, by_rule: list[str]) -> ov.Model:
    """NNCF post-training quantization with the `quantize:` settings, `by_rule` ops and the ignored scope float."""
    import nncf

    return nncf.quantize(model, calibration_dataset(images, params.model.imgsz), subset_size=len(images),
                         advanced_parameters=advanced_parameters(params.quantize),
                         **nncf_settings(params, by_rule))


def calibration_dataset(images: list[Path], imgsz: int):
    """The calibration images as an NNCF dataset of input tensors."""
    import nncf

    def transform(path: Path) -> np.ndarray:
        try:
            return image_tensor(path, imgsz)
        except QgateError as exc:
            raise QgateError(f"{path}: unreadable calibration image; remove it from the split") from exc

    return nncf.Dataset(images, transform)


def nncf_settings(params: Params, by_rule: list[str]) -> dict:
    """The NNCF arguments `quantize:` sets that `nncf.quantize` and its accuracy-control variant share."""
    import nncf

    cfg = params.quantize
    scope = cfg.ignored_scope
    ignored = nncf.IgnoredScope(
        names=list(dict.fromkeys([*by_rule, *scope.names])), patterns=list(scope.patterns), types=list(scope.types),
        subgraphs=[nncf.Subgraph(inputs=list(s.inputs), outputs=list(s.outputs)) for s in scope.subgraphs])
    return {"preset": nncf.QuantizationPreset(cfg.preset),
            "model_type": None if cfg.model_type == "none" else nncf.ModelType(cfg.model_type),
            "fast_bias_correction": cfg.fast_bias_correction, "ignored_scope": ignored}


def advanced_parameters(cfg: QuantizeParams):
    """NNCF's advanced parameters: SmoothQuant's MatMul alpha (`quantize.smooth_quant_alpha`; NNCF applies it with
    model_type transformer only) and the activations' range estimator (`quantize.range_estimator`) when not NNCF's."""
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    estimator = {} if cfg.range_estimator == "default" else {
        "activations_range_estimator_params": getattr(RangeEstimatorParametersSet, cfg.range_estimator.upper())}
    return AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(
        matmul=cfg.smooth_quant_alpha), **estimator)
