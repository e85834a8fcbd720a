"""Which images calibrate the quantizer (a seeded subset of the calibration split, never the scored one unless
allowed) and how each becomes the model's input: as the task prepares it.

The quantize stage takes them once; `tune` once for every candidate config.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from qgate.dataset import Dataset, split_images
from qgate.errors import QgateError
from qgate.params import Params
from qgate.preprocess import image_tensor, letterboxed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """The calibration images and how each becomes the FP32 model's input: the task's `prepare` (letterbox for
    detection, centre crop for classification) at `imgsz`."""

    images: list[Path]
    imgsz: int
    prepare: Callable = letterboxed

    def tensor(self, path: Path) -> np.ndarray:
        """One calibration image as the input tensor; an unreadable one is named with the fix."""
        try:
            return image_tensor(path, self.imgsz, prepare=self.prepare)
        except QgateError as exc:
            raise QgateError(f"{path}: unreadable calibration image; remove it from the split") from exc

    @classmethod
    def of(cls, params: Params, dataset: Dataset, prepare: Callable = letterboxed) -> Calibration:
        """`calibration_images` of `dataset` at `model.imgsz`, prepared by the task's `prepare`."""
        return cls(calibration_images(params, dataset), params.model.imgsz, prepare)


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


