"""Which images calibrate the quantizer: a seeded subset of the calibration split, never the scored one unless allowed.

The quantize stage takes them once; `tune` once for every candidate config.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from qgate.dataset import Dataset, split_images
from qgate.errors import QgateError
from qgate.params import Params

log = logging.getLogger(__name__)


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


