"""Oriented boxes as Ultralytics handles them: (cx, cy, w, h, angle in radians) from four corners, their
probabilistic IoU, and the Fast-NMS its OBB validator runs.

Probabilistic IoU (ProbIoU, arXiv 2106.06072) treats a box as a 2-D Gaussian with the box's covariance and scores
two boxes by their Hellinger distance: 1 - sqrt(1 - exp(-Bhattacharyya distance)). It is Ultralytics' overlap for
oriented boxes everywhere (NMS, matching, the loss), not the polygon IoU of DOTA's devkit: two identical boxes score
0.99955, not 1, and it changes by an isotropic scale only through its epsilons. Computed in float32 as Ultralytics
does.
"""

from __future__ import annotations

import cv2
import numpy as np

EPS = np.float32(1e-7)  # batch_probiou's eps, in its three places
MAX_DISTANCE = np.float32(100.0)  # the Bhattacharyya distance's clamp
NMS_BLOCK = 128  # boxes whose overlaps with every higher-scoring box are computed at once (30000 x 128 at most)


def corners_to_xywhr(corners: np.ndarray) -> np.ndarray:
    """(N, 4, 2) corners -> (N, 5) xywhr, as Ultralytics' `xyxyxyxy2xywhr`: OpenCV's smallest rotated rectangle of
    the float32 points, w the longer side, the angle in [-pi/4, 3pi/4)."""
    boxes = []
    for points in np.asarray(corners, dtype=np.float32).reshape(len(corners), -1, 2):
        (cx, cy), (w, h), degrees = cv2.minAreaRect(points)
        theta = degrees / 180 * np.pi
        if w < h:
            w, h, theta = h, w, theta + np.pi / 2
        while theta >= 3 * np.pi / 4:
            theta -= np.pi
        while theta < -np.pi / 4:
            theta += np.pi
        boxes.append([cx, cy, w, h, theta])
    return np.asarray(boxes, dtype=np.float64).reshape(-1, 5)


def xywhr_to_corners(boxes: np.ndarray) -> np.ndarray:
    """(N, 5) xywhr -> (N, 4, 2) corners (the box's own order: half-width, then half-height steps)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 5)
    cos, sin = np.cos(boxes[:, 4]), np.sin(boxes[:, 4])
    half_w = np.stack([cos, sin], 1) * boxes[:, 2:3] / 2
    half_h = np.stack([-sin, cos], 1) * boxes[:, 3:4] / 2
    centre = boxes[:, :2]
    return np.stack([centre + half_w + half_h, centre + half_w - half_h, centre - half_w - half_h,
                     centre - half_w + half_h], axis=1)


def _covariance(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Gaussian covariance [[a, c], [c, b]] of each box (w^2/12 and h^2/12 turned by the angle)."""
    w2, h2 = boxes[:, 2] ** 2 / 12, boxes[:, 3] ** 2 / 12
    cos, sin = np.cos(boxes[:, 4]), np.sin(boxes[:, 4])
    return w2 * cos ** 2 + h2 * sin ** 2, w2 * sin ** 2 + h2 * cos ** 2, (w2 - h2) * cos * sin


def _probiou(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """ProbIoU of `first` and `second` xywhr boxes broadcast against each other (float32)."""
    x1, y1, x2, y2 = first[..., 0], first[..., 1], second[..., 0], second[..., 1]
    a1, b1, c1 = _covariance(first.reshape(-1, 5))
    a2, b2, c2 = _covariance(second.reshape(-1, 5))
    a1, b1, c1 = (v.reshape(first.shape[:-1]) for v in (a1, b1, c1))
    a2, b2, c2 = (v.reshape(second.shape[:-1]) for v in (a2, b2, c2))
    joint = (a1 + a2) * (b1 + b2) - (c1 + c2) ** 2
    t1 = ((a1 + a2) * (y1 - y2) ** 2 + (b1 + b2) * (x1 - x2) ** 2) / (joint + EPS) * np.float32(0.25)
    t2 = ((c1 + c2) * (x2 - x1) * (y1 - y2)) / (joint + EPS) * np.float32(0.5)
    own = np.sqrt(np.clip(a1 * b1 - c1 ** 2, 0, None) * np.clip(a2 * b2 - c2 ** 2, 0, None))
    t3 = np.log(joint / (4 * own + EPS) + EPS) * np.float32(0.5)
    distance = np.clip(t1 + t2 + t3, EPS, MAX_DISTANCE)
    return 1 - np.sqrt(1 - np.exp(-distance) + EPS)


def probiou(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """(N, M) ProbIoU of every xywhr box of `first` with every one of `second` (Ultralytics' `batch_probiou`)."""
    first = np.asarray(first, dtype=np.float32).reshape(-1, 5)
    second = np.asarray(second, dtype=np.float32).reshape(-1, 5)
    return _probiou(first[:, None, :], second[None, :, :])


def paired_probiou(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """ProbIoU of box i of `first` with box i of `second`, row by row."""
    return _probiou(np.asarray(first, dtype=np.float32).reshape(-1, 5),
                    np.asarray(second, dtype=np.float32).reshape(-1, 5))


def fast_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float) -> np.ndarray:
    """Indices of the boxes Ultralytics' OBB NMS keeps, highest score first.

    Fast-NMS (`TorchNMS.fast_nms`): a box goes when any higher-scoring box of its class overlaps it by more than
    `iou`, even one that went itself (greedy NMS would keep it). Ultralytics separates classes by shifting centres
    7680 px apart, which leaves other classes' overlaps at ProbIoU <= 0; here each class is its own block.
    """
    order = np.argsort(-scores, kind="stable")
    dropped = np.zeros(len(scores), dtype=bool)  # by box index
    for cls in np.unique(classes):
        own = order[classes[order] == cls]  # this class's boxes, highest score first
        for start in range(1, len(own), NMS_BLOCK):  # a block of columns against every box above it
            columns = own[start:start + NMS_BLOCK]
            rows = start + len(columns)
            overlaps = probiou(boxes[own[:rows]], boxes[columns])
            above = np.arange(rows)[:, None] < (start + np.arange(len(columns)))[None, :]
            dropped[columns] = ((overlaps > iou) & above).any(0)
    return order[~dropped[order]]
