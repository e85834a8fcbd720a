"""Per-image agreement between two prediction sets (FP32 vs INT8): the 'bad cases' ranking, and the box match."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

BAD_CASE_COLUMNS = ["rank", "image_id", "file_name", "disagreement", "fp32_detections", "int8_detections",
                    "matched", "mean_matched_iou"]


def _by_image(detections: list[dict], conf: float) -> dict[int, list[dict]]:
    grouped: dict[int, list[dict]] = defaultdict(list)
    for d in detections:
        if d["score"] >= conf:
            grouped[d["image_id"]].append(d)
    return grouped


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of COCO xywh boxes a [n, 4] and b [m, 4]."""
    a_xyxy = np.concatenate([a[:, :2], a[:, :2] + a[:, 2:]], axis=1)
    b_xyxy = np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)
    lt = np.maximum(a_xyxy[:, None, :2], b_xyxy[None, :, :2])
    rb = np.minimum(a_xyxy[:, None, 2:], b_xyxy[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    union = a[:, 2:].prod(1)[:, None] + b[:, 2:].prod(1)[None, :] - inter
    return inter / np.maximum(union, 1e-9)


def box_overlap(reference: list[dict], candidate: list[dict]) -> np.ndarray:
    """Pairwise IoU of two lists of COCO detections' boxes."""
    return _iou(np.array([d["bbox"] for d in reference]), np.array([d["bbox"] for d in candidate]))


def match(reference: list[dict], candidate: list[dict], iou_threshold: float, overlap=box_overlap) -> list[float]:
    """Greedy same-class matching, highest reference score first; return the overlap of each matched pair.

    `overlap` gives the pairwise agreement of two lists (box IoU; a task passes mask IoU or keypoint OKS).
    """
    if not reference or not candidate:
        return []
    reference = sorted(reference, key=lambda d: -d["score"])
    ious = overlap(reference, candidate)
    same_class = np.array([[r["category_id"] == c["category_id"] for c in candidate] for r in reference])
    ious = np.where(same_class, ious, 0.0)
    used, matched = set(), []
    for i in range(len(reference)):
        order = [j for j in np.argsort(-ious[i]) if j not in used and ious[i, j] >= iou_threshold]
        if order:
            used.add(order[0])
            matched.append(float(ious[i, order[0]]))
    return matched


def bad_cases(fp32: list[dict], int8: list[dict], images: list[dict], conf: float, iou: float,
              matcher=match) -> list[dict]:
    """Rank images by disagreement = 1 - (sum of matched IoUs) / max(#FP32, #INT8) confident detections.

    `matcher` is the task's one-to-one match (`qgate.tasks`): boxes by default, masks or keypoints by theirs.
    """
    fp32_by, int8_by = _by_image(fp32, conf), _by_image(int8, conf)
    rows = []
    for image in images:
        ref, cand = fp32_by.get(image["id"], []), int8_by.get(image["id"], [])
        ious = matcher(ref, cand, iou)
        total = max(len(ref), len(cand))
        rows.append({"image_id": image["id"], "file_name": image["file_name"],
                     "disagreement": round(1 - sum(ious) / total, 5) if total else 0.0,
                     "fp32_detections": len(ref), "int8_detections": len(cand), "matched": len(ious),
                     "mean_matched_iou": round(float(np.mean(ious)), 5) if ious else ""})
    rows.sort(key=lambda r: (-r["disagreement"], r["image_id"]))
    return [{"rank": rank, **row} for rank, row in enumerate(rows, start=1)]
