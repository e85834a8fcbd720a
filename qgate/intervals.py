"""Confidence intervals: a paired bootstrap over val images for mAP, a t-interval over benchmark pairs for speed.

pycocotools' `evaluate` matches detections to ground truth per (image, class) once; its `accumulate` then
sorts each class's detections by score and integrates precision over recall. A bootstrap resample of the
images is a weight per image (how often it was drawn), so each resample needs only the accumulate step,
with every detection counted `weight` times: that runs on all resamples at once in NumPy, where running
pycocotools per resample costs seconds each (`benchmarks/bootstrap.py`). With every weight 1 the result is
pycocotools' own, bit for bit (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qgate.cocoeval import area_entries, counted_objects, matched, mean_valid

CHUNK_ELEMENTS = 4_000_000  # resamples x (IoU thresholds x (hits + recall thresholds) + detections): ~32 MB of float64
RESAMPLE_CHUNK = 50  # resamples whose precision arrays [IoU, recall, class] are held at once (~32 MB for 80 classes)


def resample_indices(images: int, samples: int, seed: int) -> np.ndarray:
    """`samples` bootstrap resamples of `images` image indices drawn with replacement, seeded: (samples, images)."""
    return np.random.default_rng(seed).integers(0, images, (samples, images))


def resample_weights(images: int, samples: int, seed: int) -> np.ndarray:
    """How often each image is drawn in each resample of `resample_indices`: (samples, images) integer counts."""
    picks = resample_indices(images, samples, seed)
    weights = np.zeros((samples, images), dtype=np.int64)
    np.add.at(weights, (np.repeat(np.arange(samples), images), picks.ravel()), 1)
    return weights


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap percentile interval at `level` (e.g. 0.95)."""

    point: float
    low: float
    high: float
    level: float

    @property
    def half_width(self) -> float:
        """Half the interval's width: differences smaller than this are inside the noise of the data."""
        return (self.high - self.low) / 2

    def fields(self, key: str, digits: int) -> dict:
        """{key, key_ci_low, key_ci_high} rounded to `digits`: how metrics files and tables write an interval."""
        return {key: round(self.point, digits), f"{key}_ci_low": round(self.low, digits),
                f"{key}_ci_high": round(self.high, digits)}

    def text(self, digits: int = 4) -> str:
        """'0.0073 [0.0005, 0.0160] (95%)'."""
        return f"{self.point:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] ({self.level:.0%})"


def interval(point: float, resampled: np.ndarray, level: float) -> Interval:
    """The percentile interval of `resampled` values at `level` around the `point` estimate.

    Widened to hold the point when the resamples all but miss it (a biased statistic on few images can put the
    point beyond a tail): the gates judge a point and its interval together, and the judge refuses a file whose
    point lies outside its own interval (qgate.consistency).
    """
    tail = (1 - level) / 2
    low, high = np.nanquantile(np.asarray(resampled, dtype=float), [tail, 1 - tail])
    return Interval(float(point), min(float(low), float(point)), max(float(high), float(point)), level)


def ratio_interval(numerators: list[float], denominators: list[float], level: float) -> Interval:
    """Geometric mean of paired ratios with a Student-t interval on their logs (few pairs: no bootstrap).

    Pairs measured back to back share the machine's state (another job, thermal limits), so their ratio
    is steadier than either number; with 3 pairs the interval is wide on purpose (t quantile 4.3 at 95%).
    """
    from scipy.stats import t

    logs = np.log(np.asarray(numerators, dtype=float) / np.asarray(denominators, dtype=float))
    mean = float(logs.mean())
    if logs.size < 2:
        return Interval(float(np.exp(mean)), float("-inf"), float("inf"), level)  # one pair: no spread known
    half = float(t.ppf(1 - (1 - level) / 2, logs.size - 1) * logs.std(ddof=1) / np.sqrt(logs.size))
    return Interval(float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half)), level)


@dataclass(frozen=True)
class _ClassMatches:
    """One class's detections over every image, in pycocotools' score order (trailing pure misses dropped)."""

    image: np.ndarray  # (D,) image index of each detection
    scored: np.ndarray  # (D,) int: 1 for a detection scored (a hit or a miss) at every IoU threshold
    # a detection ignored at some thresholds only (it matched a crowd region there): its columns, and 1 where
    # each threshold scores it (T, E); and how many of those columns precede each hit column (T, H)
    partly_scored: np.ndarray
    partly_scored_at: np.ndarray
    partly_scored_before: np.ndarray
    hit_columns: np.ndarray  # (T, H) the columns that hit at each threshold, padded to the most hits of any
    hit_real: np.ndarray  # (T, H) bool: a column of `hit_columns` that is a hit, not padding
    gt_counts: np.ndarray  # (images,) non-ignored ground truths of this class per image


class ImageMatches:
    """One model's detections matched to the ground truth per image (pycocotools `evaluate`), for weighted mAP."""

    def __init__(self, ground_truth: dict, detections: list[dict], iou_type: str = "bbox", evaluator=None,
                 area: str = "all"):
        """`evaluator`: `matched`'s of these detections when the caller has it (with `sizes`, for an `area` other
        than 'all': small, medium, large)."""
        self.images = len(ground_truth["images"])
        self.classes: list[_ClassMatches | None] = []
        if not detections or not ground_truth["annotations"]:
            self.rec_thresholds = np.linspace(0.0, 1.00, 101)
            self.iou_thresholds = 10
            self.empty = True
            return
        self.empty = False
        evaluator = evaluator or matched(ground_truth, detections, iou_type)  # the settings of cocoeval.coco_map
        p = evaluator.params
        self.rec_thresholds, self.iou_thresholds = p.recThrs, len(p.iouThrs)
        image_position = {image_id: i for i, image_id in enumerate(p.imgIds)}
        for entries in area_entries(evaluator, area):
            self.classes.append(_class_matches(entries, image_position, self.images, p.maxDets[-1]))

    def map(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """mAP50-95 and mAP50 under each row of image `weights` (resamples, images): two (resamples,) arrays."""
        weights = np.atleast_2d(weights)
        samples = len(weights)
        map50_95, map50 = np.zeros(samples), np.zeros(samples)
        if self.empty:
            return map50_95, map50
        for start in range(0, samples, RESAMPLE_CHUNK):
            block = weights[start:start + RESAMPLE_CHUNK]
            # pycocotools' precision array per resample is [IoU threshold, recall threshold, class]: held here
            # class-major, so that each class writes one contiguous block, and read back in pycocotools' order
            precision = np.full((len(block), len(self.classes), self.iou_thresholds, len(self.rec_thresholds)), -1.0)
            for k, matches in enumerate(self.classes):
                if matches is not None:
                    precision[:, k] = _class_precision(matches, block, self.rec_thresholds)
            for r in range(len(block)):  # pycocotools' summarize: the same masked mean, in the same order
                ordered = precision[r].transpose(1, 2, 0)
                map50_95[start + r], map50[start + r] = mean_valid(ordered), mean_valid(ordered[0])
        return map50_95, map50


def _class_matches(entries: list, image_position: dict, images: int, max_det: int) -> _ClassMatches | None:
    entries = [e for e in entries if e is not None]
    if not entries:
        return None  # no ground truth and no detection of this class anywhere: pycocotools skips it (AP -1)
    gt_counts = np.zeros(images, dtype=np.int64)
    for e in entries:
        gt_counts[image_position[e["image_id"]]] = counted_objects(e)
    scores = np.concatenate([e["dtScores"][:max_det] for e in entries])
    image = np.concatenate([np.full(len(e["dtScores"][:max_det]), image_position[e["image_id"]]) for e in entries])
    order = np.argsort(-scores, kind="mergesort")  # pycocotools' order, ties by image
    matched = np.concatenate([e["dtMatches"][:, :max_det] for e in entries], axis=1)[:, order]
    ignored = np.concatenate([e["dtIgnore"][:, :max_det] for e in entries], axis=1)[:, order]
    hits = np.logical_and(matched, np.logical_not(ignored))
    # detections after the last hit at every threshold only lower precision at the final recall, which the
    # envelope never reads: dropping them changes no AP and saves most of the work at conf 0.001
    last = np.flatnonzero(hits.any(0))
    keep = last[-1] + 1 if last.size else 0
    hits = hits[:, :keep]
    hit_counts = hits.sum(1)
    hit_real = np.arange(hit_counts.max(initial=0))[None, :] < hit_counts[:, None]
    hit_columns = np.zeros(hit_real.shape, dtype=np.int64)
    hit_columns[hit_real] = np.nonzero(hits)[1]  # row-major: each threshold's hit columns, in score order
    scored = np.logical_not(ignored[:, :keep]).astype(np.int64)
    always = scored.min(0)
    partly = np.flatnonzero((scored != always).any(0))
    return _ClassMatches(image=image[order][:keep].astype(np.int64), scored=always, partly_scored=partly,
                         partly_scored_at=(scored - always)[:, partly],
                         partly_scored_before=np.searchsorted(partly, hit_columns, side="right"),
                         hit_columns=hit_columns, hit_real=hit_real, gt_counts=gt_counts)


def _class_precision(matches: _ClassMatches, weights: np.ndarray, rec_thresholds: np.ndarray) -> np.ndarray:
    """pycocotools' interpolated precision [resample, IoU threshold, recall threshold] of one class (-1: no entry)."""
    samples, thresholds = len(weights), len(rec_thresholds)
    iou_thresholds, detections = len(matches.hit_columns), len(matches.image)
    out = np.zeros((samples, iou_thresholds, thresholds))
    ground_truths = weights @ matches.gt_counts
    out[ground_truths == 0] = -1.0  # pycocotools skips a class without ground truth in the images (AP -1)
    if detections == 0:
        return out
    row_elements = iou_thresholds * (matches.hit_columns.shape[1] + 1 + thresholds) + detections
    chunk = max(1, CHUNK_ELEMENTS // row_elements)
    for start in range(0, samples, chunk):
        rows = slice(start, start + chunk)
        counted = ground_truths[rows] > 0
        if counted.any():
            block = _interpolate(matches, weights[rows][counted], ground_truths[rows][counted], rec_thresholds)
            out[np.flatnonzero(counted) + start] = block
    return out


def _interpolate(matches: _ClassMatches, weights: np.ndarray, ground_truths: np.ndarray,
                 rec_thresholds: np.ndarray) -> np.ndarray:
    """The accumulate step for a block of resamples with ground truth: (block, T, recall thresholds).

    Only the hit columns of each IoU threshold are computed: between two hits precision can only fall, so the
    envelope there is the envelope at the earlier hit, and a recall threshold above 0 is first reached at a hit.
    The values are pycocotools' own (the same integer counts, the same float operations in the same order), on a
    fraction of the detections. Every threshold is computed at once on its hit columns padded to a common width
    and one column more: padding has recall inf (reached by no threshold) and precision 0 (it lowers no envelope
    and is what pycocotools reads for a threshold no column reaches).
    """
    counts = weights[:, matches.image].astype(np.float64)  # (block, D): each detection as often as its image was drawn
    columns, real = matches.hit_columns, matches.hit_real  # (T, H)
    tp = np.cumsum(counts[:, columns] * real, axis=2)  # (block, T, H)
    total = np.cumsum(counts * matches.scored, axis=1)[:, columns]  # scored so far, at every threshold...
    if matches.partly_scored.size:  # ...plus those scored at this threshold only (integer counts: exact in any order)
        partly = np.cumsum(counts[:, None, matches.partly_scored] * matches.partly_scored_at, axis=2)
        partly = np.concatenate([np.zeros(partly.shape[:2] + (1,)), partly], axis=2)
        total += np.take_along_axis(partly, matches.partly_scored_before[None], axis=2)
    fp = total - tp
    recall = np.full(tp.shape[:2] + (tp.shape[2] + 1,), np.inf)
    recall[..., :-1] = np.where(real, tp / ground_truths[:, None, None], np.inf)
    precision = np.zeros(recall.shape)
    precision[..., :-1] = np.where(real, tp / (fp + tp + np.spacing(1)), 0.0)
    envelope = np.maximum.accumulate(precision[..., ::-1], axis=2)[..., ::-1]
    return _first_reached(recall.reshape(-1, recall.shape[2]), envelope.reshape(-1, recall.shape[2]),
                          rec_thresholds).reshape(len(weights), columns.shape[0], len(rec_thresholds))


def _first_reached(recall: np.ndarray, envelope: np.ndarray, rec_thresholds: np.ndarray) -> np.ndarray:
    """pycocotools' read of the envelope at the first column whose recall reaches each recall threshold, for every
    row of (rows, columns) `recall` at once; every row ends in a column no threshold reaches, where `envelope` holds
    what pycocotools reads then. Recall is non-decreasing along a row, so each column is the first to reach the
    thresholds it reaches and its left neighbour does not: its envelope value, repeated that many times."""
    reached = np.searchsorted(rec_thresholds, recall, side="right")  # thresholds at or below each column's recall
    firsts = np.diff(reached, axis=1, prepend=0)
    return np.repeat(envelope.ravel(), firsts.ravel()).reshape(len(recall), len(rec_thresholds))


@dataclass(frozen=True)
class PairedDrop:
    """A family's main metric for FP32 and INT8, its absolute and relative drop and its second metric's drop
    (mAP50-95, and mAP50 beside it), each with a paired bootstrap interval over the same image resamples."""

    fp32: Interval
    int8: Interval
    drop: Interval
    drop_rel: Interval
    second_drop: Interval
    samples: int


def scoring_weights(images: int, samples: int, seed: int) -> np.ndarray:
    """Per-image weights of a paired scorer: row 0 counts every image once (the full-set estimate, what the plain
    metric gives), then one row per seeded resample."""
    return np.vstack([np.ones((1, images), dtype=np.int64), resample_weights(images, samples, seed)])


class PairedScorer:
    """mAP50-95 and mAP50 of any model's detections on the same images under the same seeded resamples.

    Differences of two models' resampled scores form a paired bootstrap: the image mix that makes one model
    look good or bad applies to both, so only their disagreement is left in the interval.
    """

    def __init__(self, ground_truth: dict, samples: int, seed: int, iou_type: str = "bbox"):
        self.ground_truth, self.iou_type = ground_truth, iou_type
        self.weights = scoring_weights(len(ground_truth["images"]), samples, seed)
        self.samples = samples

    def scores(self, detections: list[dict], evaluator=None, area: str = "all") -> tuple[np.ndarray, np.ndarray]:
        """mAP50-95 and mAP50: index 0 on the full set, then one per resample (of objects in `area`, from
        `evaluator` when given: `ImageMatches`)."""
        return ImageMatches(self.ground_truth, detections, self.iou_type, evaluator, area).map(self.weights)


def difference(a: np.ndarray, b: np.ndarray, level: float) -> Interval:
    """`a - b` of two `PairedScorer.scores` rows: the full-set difference and its paired interval."""
    return interval(float(a[0] - b[0]), a[1:] - b[1:], level)


def paired_drop(ground_truth: dict, reference: list[dict], candidate: list[dict], samples: int, level: float,
                seed: int, points: tuple[float, float, float, float] | None = None,
                iou_type: str = "bbox", evaluators: tuple = (None, None), area: str = "all") -> PairedDrop:
    """Paired bootstrap of the mAP drop from `reference` to `candidate` detections (same resampled images).

    `points` (FP32 mAP50-95, INT8 mAP50-95, FP32 mAP50, INT8 mAP50) are the full-set estimates; when None they
    are computed here with every weight 1. `evaluators`: both lists' `matched` when the caller has them (with
    `sizes`, to score the objects of one `area` range).
    """
    scorer = PairedScorer(ground_truth, samples, seed, iou_type)
    return paired_scores(scorer.scores(reference, evaluators[0], area), scorer.scores(candidate, evaluators[1], area),
                         level, samples, points)


def paired_scores(reference: tuple[np.ndarray, np.ndarray], candidate: tuple[np.ndarray, np.ndarray], level: float,
                  samples: int, points: tuple[float, float, float, float] | None = None) -> PairedDrop:
    """The paired drop from two models' (main, second) scores under the same resamples (index 0: the full set;
    any task's scorer); `points` (FP32 main, INT8 main, FP32 second, INT8 second) replace the full-set ones."""
    (ref_main, ref_second), (cand_main, cand_second) = reference, candidate
    ref_point, cand_point, ref_second_point, cand_second_point = points or (ref_main[0], cand_main[0],
                                                                             ref_second[0], cand_second[0])
    return PairedDrop(
        fp32=interval(ref_point, ref_main[1:], level),
        int8=interval(cand_point, cand_main[1:], level),
        drop=interval(ref_point - cand_point, ref_main[1:] - cand_main[1:], level),
        drop_rel=interval((ref_point - cand_point) / (ref_point or 1.0),
                          (ref_main[1:] - cand_main[1:]) / np.where(ref_main[1:] > 0, ref_main[1:], 1.0), level),
        second_drop=interval(ref_second_point - cand_second_point, ref_second[1:] - cand_second[1:], level),
        samples=samples)
