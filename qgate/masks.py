"""Instance masks of a segment head: prototypes x coefficients -> binary masks -> COCO RLE, as Ultralytics builds them.

Ultralytics' COCO export of a segment model (`SegmentationValidator` with `save_json`, 8.4) upsamples each
mask's logits bilinearly from the prototype grid to the input size, keeps logits > 0 inside the detection's
box (in input pixels), cuts the letterbox padding away and resizes that to the original image bilinearly,
truncating to uint8 (a pixel stays only where the interpolated value is 1). The same steps here, in OpenCV.
"""

from __future__ import annotations

import math

import cv2
import numpy as np


def instance_masks(coefficients: np.ndarray, protos: np.ndarray, boxes: np.ndarray, imgsz: int,
                   letterbox=None):
    """Yield one uint8 mask per detection: the original image's size given its `letterbox`, else the input's.

    `coefficients` [n, c], `protos` [c, h, w], `boxes` [n, 4] xyxy in input pixels. One mask at a time: a
    stack of 300 at the original resolution would take hundreds of MB.
    """
    logits = coefficients.astype(np.float32) @ protos.reshape(len(protos), -1).astype(np.float32)
    grid = protos.shape[1:]
    for row, box in zip(logits, boxes):
        mask = cv2.resize(row.reshape(grid), (imgsz, imgsz), interpolation=cv2.INTER_LINEAR) > 0
        yield _to_original(_crop(mask, box), letterbox) if letterbox else _crop(mask, box).astype(np.uint8)


def grid_masks(coefficients: np.ndarray, protos: np.ndarray, boxes: np.ndarray, imgsz: int) -> np.ndarray:
    """Binary masks [n, h, w] on the prototype grid, each cropped to its box (xyxy, input pixels, scaled down):
    cheap enough to compare every confident detection of two models (Ultralytics' `process_mask`)."""
    grid = protos.shape[1:]
    logits = coefficients.astype(np.float32) @ protos.reshape(len(protos), -1).astype(np.float32)
    masks = logits.reshape(-1, *grid) > 0
    scaled = boxes * (grid[1] / imgsz)
    return np.stack([_crop(m, box) for m, box in zip(masks, scaled)]) if len(masks) else masks


def paired_mask_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of masks a[i] and b[i] ([n, h, w] each); 1 where both are empty (nothing to disagree on)."""
    inter = np.logical_and(a, b).sum((1, 2))
    union = np.logical_or(a, b).sum((1, 2))
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def _crop(mask: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Zero every pixel outside the box: column i stays when x1 <= i < x2 (Ultralytics' `crop_mask`)."""
    x1, y1, x2, y2 = (min(max(math.ceil(v), 0), size) for v, size in zip(box, mask.shape[::-1] * 2))
    cropped = np.zeros_like(mask)
    cropped[y1:y2, x1:x2] = mask[y1:y2, x1:x2]
    return cropped


def _to_original(mask: np.ndarray, letterbox) -> np.ndarray:
    """Cut the padding, resize to the original (h, w) bilinearly and truncate, as Ultralytics' `scale_masks`."""
    (h0, w0), (h, w), (left, top) = letterbox.hw0, letterbox.hw, letterbox.pad
    content = mask[top:top + h, left:left + w]
    if (h, w) == (h0, w0):
        return content.astype(np.uint8)
    return np.floor(cv2.resize(content.astype(np.float32), (w0, h0), interpolation=cv2.INTER_LINEAR)).astype(np.uint8)


def rle(mask: np.ndarray) -> dict:
    """COCO run-length encoding of a binary mask, its counts as text (JSON-ready)."""
    from pycocotools import mask as coco_mask

    encoded = coco_mask.encode(np.asfortranarray(mask))
    return {"size": encoded["size"], "counts": encoded["counts"].decode()}


def mask_iou(reference: list[dict], candidate: list[dict]) -> np.ndarray:
    """Pairwise IoU of two lists of RLE masks [n, m] (pycocotools, no crowd)."""
    from pycocotools import mask as coco_mask

    if not reference or not candidate:
        return np.zeros((len(reference), len(candidate)))
    encoded = [[{"size": m["size"], "counts": m["counts"].encode()} for m in masks]
               for masks in (reference, candidate)]
    return np.asarray(coco_mask.iou(encoded[0], encoded[1], [0] * len(candidate)), dtype=np.float64).reshape(
        len(reference), len(candidate))
