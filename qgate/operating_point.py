"""The point a detector ships at: precision, recall and F1 at the deployed confidence threshold, FP32 against INT8
with paired intervals, the score shift of the objects both find, and the INT8 threshold that restores recall.

mAP integrates over every threshold, so a score shift that keeps the ranking leaves it where it was while recall
at the shipped threshold collapses. pycocotools matches detections to ground truth greedily in score order
(`qgate.cocoeval.matched`): the detections above a threshold keep the matches they get among all of them, so one
`evaluate` gives P and R at any threshold, with the task's own overlap (box IoU, mask IoU, OKS) at 0.5, as
Ultralytics' P and R. Counts are summed over classes (micro): of every object in the split, the share found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qgate.cocoeval import area_entries, counted_objects
from qgate.intervals import Interval, interval

MATCH_IOU = 0  # index of IoU 0.5 in pycocotools' thresholds


@dataclass(frozen=True)
class Found:
    """One model's detections against the ground truth at IoU 0.5, in image order of the split."""

    image: np.ndarray  # (D,) image index of each detection (every one, not only pycocotools' first 100 an image)
    score: np.ndarray  # (D,)
    hit: np.ndarray  # (D,) bool: matched an object that counts
    counted: np.ndarray  # (D,) bool: a hit or a false detection (not one matched to an ignored, crowd object)
    objects: np.ndarray  # (images,) objects that count, per image
    object_scores: dict  # ground-truth id -> (image index, score of the detection that found it)

    @classmethod
    def of(cls, evaluator, images: int) -> Found:
        """From `qgate.cocoeval.matched`'s evaluator of one model (its 'all' area range)."""
        p = evaluator.params
        position = {image_id: i for i, image_id in enumerate(p.imgIds)}
        hits, ignored, object_scores = set(), set(), {}
        objects = np.zeros(images, dtype=np.int64)
        for entries in area_entries(evaluator):
            for entry in entries:
                if entry is None:
                    continue
                image = position[entry["image_id"]]
                objects[image] += counted_objects(entry)
                scores = dict(zip(entry["dtIds"], entry["dtScores"]))
                for dt_id, gt_id, skip in zip(entry["dtIds"], entry["dtMatches"][MATCH_IOU],
                                              entry["dtIgnore"][MATCH_IOU]):
                    (ignored if skip else hits if gt_id else set()).add(dt_id)
                for gt_id, dt_id, skip in zip(entry["gtIds"], entry["gtMatches"][MATCH_IOU], entry["gtIgnore"]):
                    if dt_id and not skip:
                        object_scores[gt_id] = (image, scores[int(dt_id)])
        detections = list(evaluator.cocoDt.anns.values())
        ids = np.array([d["id"] for d in detections], dtype=np.int64)
        return cls(image=np.array([position[d["image_id"]] for d in detections], dtype=np.int64),
                   score=np.array([d["score"] for d in detections], dtype=float),
                   hit=np.isin(ids, list(hits)), counted=~np.isin(ids, list(ignored)), objects=objects,
                   object_scores=object_scores)

    @classmethod
    def nothing(cls, images: int, objects: np.ndarray) -> Found:
        """A model that detected nothing: recall 0 against the objects there are."""
        empty = np.zeros(0)
        return cls(empty.astype(np.int64), empty, empty.astype(bool), empty.astype(bool), objects, {})

    def counts(self, conf: float, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """True detections, all counted detections and objects at `conf`, under each row of image `weights`."""
        above = self.score >= conf
        images = weights.shape[1]
        hits = np.bincount(self.image[above & self.hit], minlength=images)
        detections = np.bincount(self.image[above & self.counted], minlength=images)
        return weights @ hits, weights @ detections, weights @ self.objects

    def rates(self, conf: float, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Precision, recall and F1 at `conf` under each row of `weights` (precision 0 without detections)."""
        hits, detections, objects = (c.astype(float) for c in self.counts(conf, weights))
        precision = np.divide(hits, detections, out=np.zeros_like(hits), where=detections > 0)
        recall = np.divide(hits, objects, out=np.zeros_like(hits), where=objects > 0)
        total = precision + recall
        f1 = np.divide(2 * precision * recall, total, out=np.zeros_like(total), where=total > 0)
        return {"precision": precision, "recall": recall, "f1": f1}

    def threshold_for_recall(self, recall: float) -> float | None:
        """The highest threshold at which this model's recall reaches `recall`; None when no threshold does."""
        needed = math.ceil(recall * int(self.objects.sum()) - 1e-9)
        scores = np.sort(self.score[self.hit])[::-1]
        if needed <= 0:
            return float(scores[0]) if scores.size else None
        return float(scores[needed - 1]) if needed <= scores.size else None


RATES = ("precision", "recall", "f1")


def int8_conf(deploy) -> float:
    """The threshold INT8 is judged at (`deploy`: params' `deploy:` section): `deploy.int8_conf`, else the one FP32
    ships with."""
    return deploy.conf if deploy.int8_conf is None else deploy.int8_conf


@dataclass(frozen=True)
class AtThreshold:
    """FP32 at `conf` and INT8 at `int8_conf`: each rate of both, the drops, the score shift and the advice."""

    fp32: dict[str, Interval]
    int8: dict[str, Interval]
    drop: dict[str, Interval]
    score_shift: Interval | None  # median INT8 - FP32 score of the objects FP32 finds at conf and INT8 finds at all
    shifted_objects: int
    advised_int8_conf: float | None  # the highest INT8 threshold whose recall reaches FP32's at conf
    advised_int8: dict[str, float]  # INT8's rates at that threshold

    def fields(self, prefix: str = "") -> dict:
        """Flat metrics (`recall_at_conf`, `baseline_recall_at_conf`, `recall_at_conf_drop`, ... with intervals)."""
        out: dict = {}
        for rate in RATES:
            key = f"{prefix}{rate}_at_conf"
            out |= self.int8[rate].fields(key, 5) | self.fp32[rate].fields(f"baseline_{key}", 5)
            out |= self.drop[rate].fields(f"{key}_drop", 5)
        out |= (self.score_shift.fields(f"{prefix}score_shift", 5) if self.score_shift else
                {f"{prefix}score_shift": None})
        out[f"{prefix}score_shift_objects"] = self.shifted_objects
        out[f"{prefix}advised_int8_conf"] = self.advised_int8_conf
        out |= {f"{prefix}advised_int8_{rate}": value for rate, value in self.advised_int8.items()}
        return out


def at_threshold(fp32: Found, int8: Found, conf: float, int8_conf: float, weights: np.ndarray,
                 level: float) -> AtThreshold:
    """The operating point of both models under the same image `weights` (row 0: every image once), paired."""
    ref, cand = fp32.rates(conf, weights), int8.rates(int8_conf, weights)
    shift, pairs = _score_shift(fp32, int8, conf, weights, level)
    advised = int8.threshold_for_recall(float(ref["recall"][0]))
    advised_rates = ({rate: round(float(v[0]), 5) for rate, v in int8.rates(advised, weights[:1]).items()}
                     if advised is not None else {})
    return AtThreshold(
        fp32={rate: interval(float(ref[rate][0]), ref[rate][1:], level) for rate in RATES},
        int8={rate: interval(float(cand[rate][0]), cand[rate][1:], level) for rate in RATES},
        drop={rate: interval(float(ref[rate][0] - cand[rate][0]), ref[rate][1:] - cand[rate][1:], level)
              for rate in RATES},
        score_shift=shift, shifted_objects=pairs, advised_int8_conf=advised, advised_int8=advised_rates)


def _score_shift(fp32: Found, int8: Found, conf: float, weights: np.ndarray,
                 level: float) -> tuple[Interval | None, int]:
    """The median of INT8 - FP32 scores over the objects FP32 finds at `conf` that INT8 finds, with its interval."""
    pairs = [(image, int8.object_scores[gt][1] - score) for gt, (image, score) in fp32.object_scores.items()
             if score >= conf and gt in int8.object_scores]
    if not pairs:
        return None, 0
    image = np.array([p[0] for p in pairs], dtype=np.int64)
    shift = np.array([p[1] for p in pairs], dtype=float)
    order = np.argsort(shift, kind="mergesort")
    shift, image = shift[order], image[order]
    medians = _weighted_medians(shift, weights[:, image].astype(float))
    return interval(float(np.median(shift)), medians[1:], level), len(pairs)


def _weighted_medians(sorted_values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The median of `sorted_values`, each counted as often as its row of `weights` says: one per row.

    With every weight 1 it is NumPy's median (the mean of the two middle values of an even count).
    """
    cumulative = np.cumsum(weights, axis=1)
    total = cumulative[:, -1:]
    low = np.minimum((cumulative < total / 2).sum(axis=1), len(sorted_values) - 1)
    high = np.minimum((cumulative <= total / 2).sum(axis=1), len(sorted_values) - 1)
    return np.where(total[:, 0] > 0, (sorted_values[low] + sorted_values[high]) / 2, np.nan)
