"""mAP of oriented boxes as Ultralytics' OBB validator computes it, on the full val set and under the paired
bootstrap's image resamples.

What differs from COCO's (pycocotools) mAP of axis-aligned boxes, all Ultralytics' (8.4 `OBBValidator`,
`match_predictions`, `ap_per_class`, `compute_ap`):
- overlap is ProbIoU (`qgate.rotated_boxes`), not polygon IoU;
- matching: each image's detections, highest score first, take the unclaimed same-class object they overlap most,
  per IoU threshold; no crowd regions, no 100-detection cap beyond NMS's max_det, no object size ranges;
- AP: precision's envelope over recall, read at 101 recall points by linear interpolation and integrated with
  the trapezoid rule (COCO reads the envelope at the first detection reaching each point and averages);
- the mean runs over the classes that have objects in the images scored (a class predicted but absent is not
  scored); no objects at all scores 0.

A bootstrap resample is a weight per image (how often it was drawn): each detection is repeated as often as its
image, in score order, and every object counted that often, so every weight 1 gives the full-set value bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qgate.errors import QgateError
from qgate.intervals import scoring_weights
from qgate.rotated_boxes import probiou

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10).astype(np.float32)  # Ultralytics' iouv (float32 torch.linspace)
RECALL_POINTS = np.linspace(0, 1, 101)
RECALL_EPS = 1e-16


def image_hits(objects: np.ndarray, object_classes: np.ndarray, boxes: np.ndarray,
               classes: np.ndarray) -> np.ndarray:
    """(detections, thresholds) bool: which of one image's detections (xywhr, highest score first) find an object
    at each IoU threshold, by Ultralytics' greedy `match_predictions`."""
    hits = np.zeros((len(boxes), len(IOU_THRESHOLDS)), dtype=bool)
    if not len(boxes) or not len(objects):
        return hits
    overlap = probiou(objects, boxes) * (object_classes[:, None] == classes[None, :])
    claimed = np.zeros((len(objects), len(IOU_THRESHOLDS)), dtype=bool)
    columns = np.arange(len(IOU_THRESHOLDS))
    for j in np.flatnonzero((overlap >= IOU_THRESHOLDS.min()).any(0)):
        available = np.where(claimed, 0, overlap[:, j, None])
        best = available.argmax(0)
        hits[j] = available[best, columns] >= IOU_THRESHOLDS
        claimed[best, columns] |= hits[j]
    return hits


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """Ultralytics' `compute_ap`: the precision envelope, interpolated at 101 recall points, trapezoid-integrated."""
    points = np.concatenate(([0.0], recall, [recall[-1] if len(recall) else 1.0], [1.0]))
    envelope = np.flip(np.maximum.accumulate(np.flip(np.concatenate(([1.0], precision, [0.0], [0.0])))))
    return float(np.trapezoid(np.interp(RECALL_POINTS, points, envelope), RECALL_POINTS))


@dataclass(frozen=True)
class OrientedMatches:
    """One model's detections on a split, matched per image: what every (weighted) mAP of them reads."""

    hits: np.ndarray  # (D, thresholds) bool, detections in Ultralytics' score order (np.argsort(-score))
    classes: np.ndarray  # (D,) class id of each
    image: np.ndarray  # (D,) image index of each
    objects: np.ndarray  # (images, class ids) objects of each class per image
    category_ids: tuple[int, ...]  # the class ids of `objects`' columns

    @classmethod
    def of(cls, ground_truth: dict, detections: list[dict]) -> OrientedMatches:
        """Match `detections` (with `rbox`) to the ground truth's objects (with `rbox`), image by image."""
        position = {image["id"]: i for i, image in enumerate(ground_truth["images"])}
        category_ids = tuple(c["id"] for c in ground_truth["categories"])
        column = {c: k for k, c in enumerate(category_ids)}
        objects = np.zeros((len(position), len(category_ids)), dtype=np.int64)
        truth: dict[int, list[dict]] = {}
        for annotation in ground_truth["annotations"]:
            truth.setdefault(annotation["image_id"], []).append(annotation)
            objects[position[annotation["image_id"]], column[annotation["category_id"]]] += 1
        found: dict[int, list[dict]] = {}
        for detection in detections:
            found.setdefault(detection["image_id"], []).append(detection)
        hits, scores, classes, image = [], [], [], []
        for image_id, index in position.items():  # image order, each image's detections highest score first
            own = sorted(found.get(image_id, []), key=lambda d: -d["score"])
            if not own:
                continue
            boxes = np.array([d["rbox"] for d in own]).reshape(-1, 5)
            labels = np.array([d["category_id"] for d in own])
            known = truth.get(image_id, [])
            hits.append(image_hits(np.array([a["rbox"] for a in known]).reshape(-1, 5),
                                   np.array([a["category_id"] for a in known]), boxes, labels))
            scores.append(np.array([d["score"] for d in own]))
            classes.append(labels)
            image.append(np.full(len(own), index))
        if not hits:
            empty = np.zeros(0, dtype=np.int64)
            return cls(np.zeros((0, len(IOU_THRESHOLDS)), dtype=bool), empty, empty, objects, category_ids)
        order = np.argsort(-np.concatenate(scores))  # ap_per_class's sort (not stable, as there)
        return cls(np.concatenate(hits)[order], np.concatenate(classes)[order], np.concatenate(image)[order],
                   objects, category_ids)

    def class_ap(self, weights: np.ndarray) -> np.ndarray:
        """(classes, thresholds) AP of each class under one row of image weights; NaN for a class without objects
        in the images drawn (not scored)."""
        counts = weights @ self.objects
        ap = np.full((len(self.category_ids), len(IOU_THRESHOLDS)), np.nan)
        drawn = weights[self.image]
        for k, category_id in enumerate(self.category_ids):
            if counts[k] == 0:
                continue
            ap[k] = 0.0  # a class with objects and no detection scores 0
            own = np.flatnonzero((self.classes == category_id) & (drawn > 0))
            if not own.size:
                continue
            hits = self.hits[np.repeat(own, drawn[own])].astype(np.float64)
            true = hits.cumsum(0)
            false = (1 - hits).cumsum(0)
            recall, precision = true / (counts[k] + RECALL_EPS), true / (true + false)
            ap[k] = [average_precision(recall[:, t], precision[:, t]) for t in range(len(IOU_THRESHOLDS))]
        return ap

    def map(self, weights: np.ndarray, area: str = "all") -> tuple[np.ndarray, np.ndarray]:
        """mAP50-95 and mAP50 under each row of image `weights` (resamples, images): two (resamples,) arrays."""
        if area != "all":
            raise QgateError(f"oriented boxes are scored without object size ranges, so the '{area}' range has no "
                             "mAP; set gates.max_small_map50_95_drop to null")
        weights = np.atleast_2d(weights)
        map50_95, map50 = np.zeros(len(weights)), np.zeros(len(weights))
        for r, row in enumerate(weights):
            ap = self.class_ap(row)
            scored = ap[~np.isnan(ap[:, 0])]
            if len(scored):
                map50_95[r], map50[r] = scored.mean(), scored[:, 0].mean()
        return map50_95, map50


def oriented_map(ground_truth: dict, detections: list[dict]) -> tuple[float, float, list[dict]]:
    """mAP50-95 and mAP50 as Ultralytics' OBB validator reports them, and the same per class (None: a class without
    objects)."""
    matches = OrientedMatches.of(ground_truth, detections)
    ap = matches.class_ap(np.ones(len(ground_truth["images"]), dtype=np.int64))
    scored = ap[~np.isnan(ap[:, 0])]
    per_class = [{"class_id": c["id"] - 1, "class_name": c["name"],
                  "map50_95": None if np.isnan(row[0]) else float(row.mean()),
                  "map50": None if np.isnan(row[0]) else float(row[0])}
                 for c, row in zip(ground_truth["categories"], ap)]
    if not len(scored):
        return 0.0, 0.0, per_class
    return float(scored.mean()), float(scored[:, 0].mean()), per_class


class OrientedScorer:
    """mAP50-95 and mAP50 of any model's oriented detections on the same images under the same seeded resamples:
    two models' differences are paired (`qgate.intervals.PairedScorer` for pycocotools' mAP)."""

    def __init__(self, ground_truth: dict, samples: int, seed: int):
        self.ground_truth, self.samples = ground_truth, samples
        self.weights = scoring_weights(len(ground_truth["images"]), samples, seed)

    def scores(self, detections: list[dict], evaluator: OrientedMatches | None = None,
               area: str = "all") -> tuple[np.ndarray, np.ndarray]:
        """mAP50-95 and mAP50: index 0 on the full set, then one per resample (`evaluator`: these detections'
        `OrientedMatches` when the caller has them)."""
        return (evaluator or OrientedMatches.of(self.ground_truth, detections)).map(self.weights, area)
