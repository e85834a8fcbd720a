"""pycocotools scoring (boxes, masks): the matching the evaluator's mAP and the bootstrap's resampled mAP start from."""

from __future__ import annotations

import contextlib
import io

import numpy as np


def coco_map(ground_truth: dict, detections: list[dict], iou_type: str = "bbox") -> tuple[float, float, list[dict]]:
    """pycocotools mAP50-95, mAP50 and per-class AP of `iou_type` (classes without ground truth get None)."""
    names = {c["id"]: c["name"] for c in ground_truth["categories"]}
    if not detections or not ground_truth["annotations"]:
        return 0.0, 0.0, [_class_row(i, n, None, None) for i, n in names.items()]
    evaluator = matched(ground_truth, detections, iou_type)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        evaluator.accumulate()
    precision = evaluator.eval["precision"]  # [iou thresholds, recall, class, area, max dets]
    map50_95, map50 = mean_valid(precision), mean_valid(precision[0])
    per_class = []
    for k, cat_id in enumerate(evaluator.params.catIds):
        curve = precision[:, :, k, 0, -1]
        valid = curve[curve > -1]
        ap50 = curve[0][curve[0] > -1]
        per_class.append(_class_row(cat_id, names[cat_id], float(valid.mean()) if valid.size else None,
                                    float(ap50.mean()) if ap50.size else None))
    return map50_95, map50, per_class


def matched(ground_truth: dict, detections: list[dict], iou_type: str = "bbox", sizes: bool = False):
    """pycocotools' COCOeval after `evaluate` (detections matched to ground truth per image and class).

    At 100 detections an image (20 for keypoints, COCO's rule): what summarize() reports as AP and AP50. The 'all'
    area range only unless `sizes`: then COCO's small/medium/large ranges too (pycocotools' defaults: keypoints
    have no small one), each matched on its own as pycocotools does, for stats[3:6].
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        gt = COCO()
        gt.dataset = ground_truth
        gt.createIndex()
        evaluator = COCOeval(gt, gt.loadRes(detections), iou_type)
        if not sizes:
            evaluator.params.areaRng, evaluator.params.areaRngLbl = [[0, 1e10]], ["all"]
        evaluator.params.maxDets = [20] if iou_type == "keypoints" else [100]  # COCO's keypoint rule: 20 a image
        if "kpt_oks_sigmas" in ground_truth:  # the pose's own keypoints (pycocotools defaults to COCO's 17)
            evaluator.params.kpt_oks_sigmas = np.array(ground_truth["kpt_oks_sigmas"])
        evaluator.evaluate()
    return evaluator


def area_entries(evaluator, area: str = "all") -> list[list]:
    """`matched`'s per-image results of each class in one area range (pycocotools' `evalImgs` is [class][area range]
    [image]); an entry is None where an image has neither a ground truth nor a detection of the class."""
    p = evaluator.params
    images, first = len(p.imgIds), p.areaRngLbl.index(area) * len(p.imgIds)
    step = len(p.areaRng) * images
    return [evaluator.evalImgs[k * step + first:k * step + first + images] for k in range(len(p.catIds))]


def counted_objects(entry: dict) -> int:
    """The ground truths of one per-image result that count: not crowd, inside its area range."""
    return int(np.count_nonzero(np.asarray(entry["gtIgnore"]) == 0))


def mean_valid(precision: np.ndarray) -> float:
    """pycocotools' summarize: the mean of the precision array where a class has ground truth (not -1)."""
    valid = precision[precision > -1]  # -1 marks classes without ground truth
    return float(valid.mean()) if valid.size else 0.0


def _class_row(cat_id: int, name: str, ap: float | None, ap50: float | None) -> dict:
    return {"class_id": int(cat_id) - 1, "class_name": name, "map50_95": ap, "map50": ap50}
