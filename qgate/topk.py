"""Top-k accuracy of a classifier: on every image, per class, and under the paired bootstrap's image resamples.

A classification is one prediction per image (`classification`): the top class, its probability and the classes
ranked highest first. Top-1 and top-5 are Ultralytics' (`ClassifyMetrics`): the share of images whose true class
is the first, or among the first min(5, classes), of the ranking. They are means over images, so a bootstrap
resample (a weight per image, `qgate.intervals.scoring_weights`) is a weighted mean: every resample at once.
"""

from __future__ import annotations

import numpy as np

from qgate.errors import QgateError
from qgate.intervals import PairedDrop, paired_scores, scoring_weights

TOP_K = 5  # top-5 as Ultralytics and every ImageNet table report it (all the classes when a model has fewer)


def classification(probabilities: np.ndarray, image_id: int) -> dict:
    """One image's prediction from its class probabilities: COCO-style ids (class + 1), the top one first."""
    ranked = np.argsort(-np.asarray(probabilities, dtype=np.float64), kind="stable")[:TOP_K]
    return {"image_id": image_id, "category_id": int(ranked[0]) + 1, "score": float(probabilities[ranked[0]]),
            "ranked": [int(c) + 1 for c in ranked]}


def hits(ground_truth: dict, predictions: list[dict]) -> np.ndarray:
    """(images, 2) of 0/1 in the ground truth's image order: the true class is the top one; among the top k.
    An image without a prediction is a miss."""
    truth = {a["image_id"]: a["category_id"] for a in ground_truth["annotations"]}
    predicted = {p["image_id"]: p["ranked"] for p in predictions}
    found = np.zeros((len(ground_truth["images"]), 2))
    for row, image in enumerate(ground_truth["images"]):
        ranked = predicted.get(image["id"], [])
        found[row] = ranked[:1] == [truth[image["id"]]], truth[image["id"]] in ranked
    return found


def top_k(ground_truth: dict, predictions: list[dict]) -> tuple[tuple[float, float], list[dict]]:
    """Top-1 and top-5 accuracy, and the same per true class (None: a class without images)."""
    found = hits(ground_truth, predictions)
    classes = np.array([a["category_id"] for a in ground_truth["annotations"]])
    per_class = []
    for category in ground_truth["categories"]:
        own = found[classes == category["id"]]
        per_class.append({"class_id": category["id"] - 1, "class_name": category["name"],
                          "images": len(own), "top1": float(own[:, 0].mean()) if len(own) else None,
                          "top5": float(own[:, 1].mean()) if len(own) else None})
    top1, top5 = found.mean(0) if len(found) else (0.0, 0.0)
    return (float(top1), float(top5)), per_class


class TopkScorer:
    """Top-1 and top-5 of any model's predictions on the same images under the same seeded resamples: two models'
    differences are paired (`qgate.intervals.PairedScorer` for mAP)."""

    def __init__(self, ground_truth: dict, samples: int, seed: int):
        self.ground_truth, self.samples = ground_truth, samples
        self.weights = scoring_weights(len(ground_truth["images"]), samples, seed)

    def scores(self, predictions: list[dict], evaluator=None, area: str = "all") -> tuple[np.ndarray, np.ndarray]:
        """Top-1 and top-5: index 0 on the full set, then one per resample (`evaluator` is unused: nothing to
        match; `area` must be 'all': an image has no object size)."""
        if area != "all":
            raise QgateError(f"a classifier has no object sizes to score the '{area}' range of; set "
                             "gates.max_small_map50_95_drop to null")
        found = hits(self.ground_truth, predictions)
        totals = np.maximum(self.weights.sum(1), 1)
        return self.weights @ found[:, 0] / totals, self.weights @ found[:, 1] / totals


def paired_topk_drop(ground_truth: dict, reference: list[dict], candidate: list[dict], samples: int, level: float,
                     seed: int, points: tuple[float, float, float, float] | None = None,
                     area: str = "all") -> PairedDrop:
    """Paired bootstrap of the top-1 (and top-5) drop from `reference` to `candidate` predictions."""
    scorer = TopkScorer(ground_truth, samples, seed)
    return paired_scores(scorer.scores(reference, area=area), scorer.scores(candidate, area=area), level, samples,
                         points)
