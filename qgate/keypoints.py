"""Keypoints of a pose head: scaled to the original image, and compared by OKS the way COCO (and Ultralytics) do.

OKS of a predicted pose against a reference pose: the mean over the reference's labelled keypoints of
exp(-d^2 / (2 * area * (2 * sigma)^2)), `area` the reference's object area (COCO) or box area x 0.53
(Ultralytics, for labels without segment areas), `sigma` per keypoint.
"""

from __future__ import annotations

import numpy as np

# COCO's 17 person-keypoint sigmas (pycocotools' and Ultralytics' OKS_SIGMA)
COCO_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87,
                        0.89, 0.89]) / 10.0
BOX_AREA_SHARE = 0.53  # Ultralytics' object area of a box-labelled pose: box area x 0.53
VISIBLE_SCORE = 0.5  # a predicted keypoint counts as visible (a reference for OKS) above this score


def sigmas(kpt_shape: tuple[int, int]) -> np.ndarray:
    """COCO's sigmas for 17-keypoint COCO pose with visibility, else equal ones summing to 1 (Ultralytics' rule)."""
    count = kpt_shape[0]
    return COCO_SIGMAS if tuple(kpt_shape) == (17, 3) else np.full(count, 1.0 / count)


def to_original(keypoints: np.ndarray, letterbox) -> np.ndarray:
    """Keypoints [n, k, d] in input pixels -> the original image's pixels (padding removed, clipped)."""
    (h0, w0), (h, w), (left, top) = letterbox.hw0, letterbox.hw, letterbox.pad
    scaled = keypoints.copy()
    scaled[..., 0] = ((scaled[..., 0] - left) / (w / w0)).clip(0, w0)
    scaled[..., 1] = ((scaled[..., 1] - top) / (h / h0)).clip(0, h0)
    return scaled


def with_scores(keypoints: np.ndarray) -> np.ndarray:
    """[n, k, d] -> [n, k, 3]: x, y and the keypoint's score; a head without scores counts every keypoint seen."""
    if keypoints.shape[-1] == 3:
        return keypoints
    return np.concatenate([keypoints, np.ones((*keypoints.shape[:2], 1), keypoints.dtype)], axis=-1)


def coco_triplets(keypoints: np.ndarray) -> list[list[float]]:
    """[n, k, d] -> COCO's flat [x, y, v, ...] per pose; v is the keypoint's score (`with_scores`)."""
    triplets = with_scores(keypoints)
    flat = np.stack([triplets[..., 0].round(3), triplets[..., 1].round(3), triplets[..., 2].round(5)], axis=-1)
    return [pose.ravel().tolist() for pose in flat]


def paired_oks(reference: np.ndarray, candidate: np.ndarray, areas: np.ndarray, kpt_sigmas: np.ndarray) -> np.ndarray:
    """OKS of candidate pose i against reference pose i ([n, k, 3] each: x, y, visibility or score).

    The reference's keypoints above `VISIBLE_SCORE` (labelled ones: v > 0 is above it for v in 1, 2) count;
    a reference with none counts as agreeing (1): there is nothing to disagree on.
    """
    visible = reference[..., 2] > VISIBLE_SCORE
    squared = ((reference[..., :2] - candidate[..., :2]) ** 2).sum(-1)
    e = squared / ((2 * kpt_sigmas) ** 2 * 2 * (areas[:, None] + np.spacing(1)))
    counted = visible.sum(1)
    return np.where(counted > 0, (np.exp(-e) * visible).sum(1) / np.maximum(counted, 1), 1.0)


def pairwise_oks(reference: list[dict], candidate: list[dict], kpt_sigmas: np.ndarray) -> np.ndarray:
    """OKS [n, m] of every candidate COCO pose against every reference one, the reference's box x 0.53 as area."""
    if not reference or not candidate:
        return np.zeros((len(reference), len(candidate)))
    ref = np.array([d["keypoints"] for d in reference]).reshape(len(reference), -1, 3)
    cand = np.array([d["keypoints"] for d in candidate]).reshape(len(candidate), -1, 3)
    areas = np.array([d["bbox"][2] * d["bbox"][3] * BOX_AREA_SHARE for d in reference])
    return np.stack([paired_oks(ref, np.repeat(cand[j:j + 1], len(ref), 0), areas, kpt_sigmas)
                     for j in range(len(cand))], axis=1)
