"""What a model's outputs mean, per Ultralytics task (detect, segment, pose, obb, classify): how an image becomes
its input, which outputs it reads, decode, ground truth, scoring with paired resampling, match.

Stages and gates ask the task the export record names (`task_for`), never `if task == ...`: everything
that knows whether a prediction is a box, a mask, a set of keypoints or a class lives in one class per task.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qgate.cocoeval import coco_map, matched
from qgate.compare import match
from qgate import keypoints
from qgate.class_folders import class_ground_truth, class_of, load_class_folders
from qgate.dataset import (Dataset, coco_ground_truth, coco_keypoint_truth, coco_segment_truth, kpt_oks_sigmas,
                           label_path, load_dataset, read_keypoints, read_labels, read_oriented, read_segments)
from qgate.errors import QgateError
from qgate.heads import HEADS, OrientedHead, Postprocess, RawHead, output_layout
from qgate.intervals import PairedDrop, PairedScorer, paired_drop, paired_scores
from qgate.masks import grid_masks, instance_masks, mask_iou, paired_mask_iou, rle
from qgate.preprocess import Letterbox, center_cropped, letterboxed
from qgate.rotated_boxes import corners_to_xywhr, probiou, xywhr_to_corners
from qgate.rotated_map import OrientedMatches, OrientedScorer, oriented_map
from qgate.task_metrics import TASK_METRICS, Scored, TaskMetrics
from qgate.topk import TopkScorer, classification, paired_topk_drop, top_k


class Task:
    """What every task shares: the export record's view of it. A task reads `outputs` of the model's outputs, from
    the first; `headed` ones read them through a detection head layout (`qgate.heads`) the record names."""

    name: str
    metrics: TaskMetrics  # what it is scored and judged on
    outputs = 1
    headed = False

    @classmethod
    def from_record(cls, record: dict, head_class=None) -> Task:
        """The task as the export record describes it: by default nothing in the record changes how it reads."""
        return cls()

    @classmethod
    def export_fields(cls, output_shapes: list[list[int]], checkpoint, dataset_yaml: Path) -> dict:
        """What the export record keeps about this task's outputs (from the exported model's output shapes, the
        Ultralytics checkpoint and the dataset yaml it is judged on), beyond the class names every record keeps."""
        return {}

    @classmethod
    def extra_columns(cls, fields: dict) -> int:
        """Values the head adds per detection after the class scores, given `export_fields`: none by default."""
        return 0

    @classmethod
    def head_layout(cls, shapes: list[list[int]], num_classes: int, where: str, fields: dict) -> str:
        """The export record's `head_layout`: how the model's first output reads, from its static shape; an error
        naming `where` for a shape the task cannot read."""
        raise NotImplementedError

    @classmethod
    def dataset(cls, path: str | Path) -> Dataset:
        """The dataset `model.dataset` names, in the layout the task is judged on: an Ultralytics dataset yaml (a
        folder is refused in one line: a folder of class folders is a classifier's)."""
        if Path(path).is_dir():
            raise QgateError(f"{path}: is a folder; a {cls.name} model is judged on an Ultralytics dataset yaml "
                             "(names, path, val): set model.dataset to that yaml (a folder of class folders is a "
                             "classification dataset)")
        return load_dataset(path)


class Detect(Task):
    """Boxes: output 0 in one of the detection head layouts (`qgate.heads`), scored by pycocotools `bbox`."""

    name = "detect"
    metrics = TASK_METRICS["detect"]
    headed = True

    def __init__(self, head=RawHead()):
        self.head = head

    @classmethod
    def from_record(cls, record: dict, head_class=None) -> Detect:
        """The task with the head layout class the export record names."""
        return cls(head_class())

    @classmethod
    def head_layout(cls, shapes: list[list[int]], num_classes: int, where: str, fields: dict) -> str:
        """`raw` or `end2end` (`qgate.heads.output_layout`), with the values the task adds per detection."""
        return output_layout(shapes[0], num_classes, where, cls.extra_columns(fields))

    def prepare(self, image: np.ndarray, imgsz: int) -> tuple[np.ndarray, Letterbox]:
        """The model's uint8 BGR input from the original image (letterboxed) and the geometry `predictions` undoes."""
        return letterboxed(image, imgsz)

    def predictions(self, outputs: tuple, settings: Postprocess, image_id: int,
                    letterbox: Letterbox | None = None) -> list[dict]:
        """COCO-format detections of one image: in original pixels given its `letterbox`, else input pixels."""
        rows = self.head.detections(outputs[0], settings)
        return to_coco(scale_to_original(rows, letterbox) if letterbox else rows, image_id)

    def confident(self, outputs: tuple, conf: float) -> np.ndarray:
        """The anchors or rows whose detections the sensitivity error compares."""
        return self.head.confident(outputs[0], conf)

    def detection_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """The error of `candidate` against `reference` on the reference's confident anchors or rows (sensitivity)."""
        return self.box_error(candidate, reference, mask)

    def _counterparts(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> tuple:
        """The reference's confident boxes and extra values that have a same-class counterpart in `candidate`,
        the counterparts' extra values, and how many have none."""
        boxes, ref, cand = self.head.paired_extras(candidate[0], reference[0], mask)
        found = ~np.isnan(cand).any(1)
        return boxes[found], ref[found], cand[found], int((~found).sum())

    def box_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """The boxes' and scores' share of `detection_error`, whatever else a task adds: what the drift gate's
        limit (`gates.max_detection_error`) was calibrated on."""
        return self.head.detection_error(candidate[0], reference[0], mask)

    def match(self, reference: list[dict], candidate: list[dict], iou: float) -> list[float]:
        """Greedy same-class one-to-one matching by box IoU; the IoU of each matched pair."""
        return match(reference, candidate, iou)

    def ground_truth(self, images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
        """COCO instances of `images` (ids 0..n-1) from their YOLO label files."""
        return coco_ground_truth(images, shapes, names)

    def score(self, ground_truth: dict, detections: list[dict]) -> tuple[dict[str, float], list[dict]]:
        """Every scored family's `main` and `second` metric (pycocotools' own numbers) by key, boxes first, and the
        same per class, side by side (None: a class without instances)."""
        metrics: dict[str, float] = {}
        per_class: list[dict] = []
        for family in self.metrics.scored:
            main, second, classes = coco_map(ground_truth, detections, family.iou_type)
            metrics |= {family.main.key: main, family.second.key: second}
            rows = [{"class_id": row["class_id"], "class_name": row["class_name"], family.main.key: row["map50_95"],
                     family.second.key: row["map50"]} for row in classes]
            per_class = [row | more for row, more in zip(per_class, rows)] if per_class else rows
        return metrics, per_class

    def matched(self, family: Scored, ground_truth: dict, detections: list[dict], sizes: bool = False):
        """pycocotools' per-image matching of `detections` in one family (COCO's size ranges too with `sizes`); None
        for a model that found nothing or images without objects."""
        if not detections or not ground_truth["annotations"]:
            return None
        return matched(ground_truth, detections, family.iou_type, sizes)

    def scorer(self, family: Scored, ground_truth: dict, samples: int, seed: int) -> PairedScorer:
        """One family's `main` and `second` of any model's detections on these images under the same seeded
        resamples: differences of two models' scores are paired."""
        return PairedScorer(ground_truth, samples, seed, family.iou_type)

    def paired(self, family: Scored, ground_truth: dict, reference: list[dict], candidate: list[dict], samples: int,
               level: float, seed: int, points: tuple[float, float, float, float] | None = None,
               matches: tuple = (None, None), area: str = "all") -> PairedDrop:
        """The drop of one family's `main` and `second` from `reference` to `candidate`, each with a paired
        bootstrap interval; on the objects of one COCO `area` range given both lists' `matched(sizes=True)`."""
        return paired_drop(ground_truth, reference, candidate, samples, level, seed, points, family.iou_type, matches,
                           area)

    def labels(self, image: Path, names: tuple[str, ...]) -> list:
        """The instances of one image's YOLO label file, validated: a bad line raises, naming it and the fix."""
        return list(read_labels(label_path(image), len(names)))


class Segment(Detect):
    """Boxes and instance masks: output 0 carries each anchor's mask coefficients, output 1 the prototypes.

    Masks are scored by pycocotools `segm` at the original resolution, from Ultralytics' own mask steps
    (`qgate.masks`); the accuracy gate judges mask mAP50-95, the box metrics are measured beside it.
    """

    name = "segment"
    metrics = TASK_METRICS["segment"]
    outputs = 2

    def __init__(self, head, imgsz: int):
        self.head, self.imgsz = head, imgsz

    @classmethod
    def from_record(cls, record: dict, head_class) -> Segment:
        """The task with the record's head layout, carrying its mask coefficients, at the record's input size."""
        return cls(head_class(cls.extra_columns(record)), record["imgsz"])

    @classmethod
    def export_fields(cls, output_shapes: list[list[int]], checkpoint, dataset_yaml: Path) -> dict:
        """The prototypes' count and grid, from output 1 [1, c, h, w]."""
        _, count, *grid = output_shapes[1]
        return {"mask_coefficients": count, "mask_grid": grid}

    @classmethod
    def extra_columns(cls, fields: dict) -> int:
        """One mask coefficient per prototype."""
        return fields["mask_coefficients"]

    def predictions(self, outputs: tuple, settings: Postprocess, image_id: int,
                    letterbox: Letterbox | None = None) -> list[dict]:
        """COCO detections with an RLE `segmentation` each: original pixels given `letterbox`, else input pixels."""
        rows = self.head.detections(outputs[0], settings)
        detections = to_coco(scale_to_original(rows, letterbox) if letterbox else rows, image_id)
        masks = instance_masks(rows[:, 6:], outputs[1], rows[:, :4], self.imgsz, letterbox)
        for detection, mask in zip(detections, masks):
            detection["segmentation"] = rle(mask)
        return detections

    def detection_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """The head's box and score error plus, per confident reference detection, 1 - IoU of the two masks
        (on the prototype grid, cropped to the reference box): a group that breaks masks but not boxes shows.

        A reference detection without a same-class counterpart in `candidate` costs the whole mask (1).
        """
        boxes, ref_coefficients, cand_coefficients, missing = self._counterparts(candidate, reference, mask)
        ref_masks = grid_masks(ref_coefficients, reference[1], boxes, self.imgsz)
        cand_masks = grid_masks(cand_coefficients, candidate[1], boxes, self.imgsz)
        return (self.box_error(candidate, reference, mask) + float(np.sum(1 - paired_mask_iou(ref_masks, cand_masks)))
                + missing)

    def match(self, reference: list[dict], candidate: list[dict], iou: float) -> list[float]:
        """Greedy same-class one-to-one matching by mask IoU: a group that breaks masks but not boxes shows."""
        return match(reference, candidate, iou, mask_iou_of)

    def ground_truth(self, images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
        """COCO instances with polygons from the YOLO segment label files."""
        return coco_segment_truth(images, shapes, names)

    def labels(self, image: Path, names: tuple[str, ...]) -> list:
        """The (class, polygon) instances of one image's YOLO segment label file, validated."""
        return read_segments(label_path(image), len(names))


def mask_iou_of(reference: list[dict], candidate: list[dict]) -> np.ndarray:
    """Pairwise mask IoU of two lists of COCO predictions with RLE segmentations."""
    return mask_iou([d["segmentation"] for d in reference], [d["segmentation"] for d in candidate])


class Pose(Detect):
    """Boxes and keypoints: output 0 carries each anchor's keypoints after the class scores, already decoded
    to input pixels (x, y and a visibility score per keypoint when `kpt_shape` has 3 values).

    Keypoints are scored by pycocotools `keypoints` (OKS; the dataset yaml's `kpt_oks_sigmas` when it sets them,
    else COCO's sigmas for 17-keypoint COCO pose and equal ones otherwise, as Ultralytics does), the object area
    being the box's x 0.53 (Ultralytics' rule for box labels).
    """

    name = "pose"
    metrics = TASK_METRICS["pose"]

    def __init__(self, head, kpt_shape: tuple[int, int], kpt_oks_sigmas: list[float] | None = None):
        self.head, self.kpt_shape = head, tuple(kpt_shape)
        self.sigmas = np.array(kpt_oks_sigmas) if kpt_oks_sigmas else keypoints.sigmas(self.kpt_shape)

    @classmethod
    def from_record(cls, record: dict, head_class) -> Pose:
        """The task with the record's head layout, carrying its keypoints, its `kpt_shape` and the dataset's own
        sigmas when the record has them."""
        return cls(head_class(cls.extra_columns(record)), record["kpt_shape"], record.get("kpt_oks_sigmas"))

    @classmethod
    def export_fields(cls, output_shapes: list[list[int]], checkpoint, dataset_yaml: Path) -> dict:
        """The keypoint shape [count, 2 or 3], from the checkpoint (the graph gives only their product), and the
        dataset yaml's `kpt_oks_sigmas` when it sets them."""
        kpt_shape = [int(v) for v in checkpoint.model.kpt_shape]
        sigmas = kpt_oks_sigmas(dataset_yaml, kpt_shape[0])
        return {"kpt_shape": kpt_shape} | ({"kpt_oks_sigmas": sigmas} if sigmas else {})

    @classmethod
    def extra_columns(cls, fields: dict) -> int:
        """x, y (and a visibility score) per keypoint."""
        return int(np.prod(fields["kpt_shape"]))

    def _poses(self, rows: np.ndarray) -> np.ndarray:
        return rows[:, 6:].reshape(len(rows), *self.kpt_shape)

    def predictions(self, outputs: tuple, settings: Postprocess, image_id: int,
                    letterbox: Letterbox | None = None) -> list[dict]:
        """COCO detections with `keypoints` (x, y, score triplets): original pixels given `letterbox`."""
        rows = self.head.detections(outputs[0], settings)
        poses = self._poses(rows)
        detections = to_coco(scale_to_original(rows, letterbox) if letterbox else rows, image_id)
        for detection, pose in zip(detections, keypoints.coco_triplets(
                keypoints.to_original(poses, letterbox) if letterbox else poses)):
            detection["keypoints"] = pose
        return detections

    def detection_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """The head's box and score error plus, per confident reference detection, 1 - OKS of the candidate's
        pose against the reference's (its keypoints scoring above 0.5); a missing counterpart costs 1."""
        boxes, ref_points, cand_points, missing = self._counterparts(candidate, reference, mask)
        ref, cand = (keypoints.with_scores(points.reshape(len(points), *self.kpt_shape))
                     for points in (ref_points, cand_points))
        areas = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1) * keypoints.BOX_AREA_SHARE
        oks = keypoints.paired_oks(ref, cand, areas, self.sigmas)
        return self.box_error(candidate, reference, mask) + float(np.sum(1 - oks)) + missing

    def match(self, reference: list[dict], candidate: list[dict], iou: float) -> list[float]:
        """Greedy same-class one-to-one matching by OKS: a group that moves keypoints but not boxes shows."""
        return match(reference, candidate, iou, lambda ref, cand: keypoints.pairwise_oks(ref, cand, self.sigmas))

    def ground_truth(self, images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
        """COCO keypoint instances from the YOLO pose label files, with the sigmas OKS scores them by."""
        return coco_keypoint_truth(images, shapes, names, self.kpt_shape, self.sigmas, keypoints.BOX_AREA_SHARE)

    def labels(self, image: Path, names: tuple[str, ...]) -> list:
        """The (class, box, keypoints) instances of one image's YOLO pose label file, validated against
        `kpt_shape`."""
        return read_keypoints(label_path(image), len(names), self.kpt_shape)


class Oriented(Task):
    """Oriented boxes: output 0 carries each anchor's box (cx, cy, w, h), class scores and its angle last (`raw`
    layout [1, 4+nc+1, anchors]); rotated NMS and scoring as Ultralytics' OBB validator (`qgate.rotated_map`).

    Not a detection with an extra column: its overlap is ProbIoU, its NMS Fast-NMS, its mAP Ultralytics' own (no
    pycocotools), so it shares Detect's input geometry only.
    """

    name = "obb"
    metrics = TASK_METRICS["obb"]
    headed = True

    def __init__(self, head: OrientedHead = OrientedHead()):
        self.head = head

    @classmethod
    def from_record(cls, record: dict, head_class=None) -> Oriented:
        """The task with an OBB head: only the raw layout exports here (`head_layout`)."""
        if record.get("head_layout") != "raw":
            raise QgateError(f"export record names head layout {record.get('head_layout')!r} for an OBB model, "
                             "which is read in the raw layout only; re-run `dvc repro export`")
        return cls()

    @classmethod
    def head_layout(cls, shapes: list[list[int]], num_classes: int, where: str, fields: dict) -> str:
        """`raw`: [1, 4+nc+1, anchors], the angle after the class scores; an end-to-end export is refused."""
        shape = [int(d) for d in shapes[0]]
        if len(shape) == 3 and shape[1] == 4 + num_classes + 1:
            return "raw"
        raise QgateError(f"{where}: output shape {shape} is not an OBB head's [1, 4+{num_classes}+1, anchors]; "
                         "qgate judges OBB models exported with NMS still to run: set export.end2end: false")

    def prepare(self, image: np.ndarray, imgsz: int) -> tuple[np.ndarray, Letterbox]:
        """The model's uint8 BGR input from the original image (letterboxed, as a detector's)."""
        return letterboxed(image, imgsz)

    def predictions(self, outputs: tuple, settings: Postprocess, image_id: int,
                    letterbox: Letterbox | None = None) -> list[dict]:
        """Detections with an `rbox` (cx, cy, w, h, radians), its corners (`poly`) and enclosing `bbox`: original
        pixels given `letterbox` (centre and size per axis, as Ultralytics' `scale_boxes(xywh=True)`)."""
        rows = self.head.detections(outputs[0], settings)
        boxes = np.concatenate([rows[:, :4], rows[:, 6:7]], axis=1).astype(np.float64)
        if letterbox:
            (h0, w0), (h, w), (left, top) = letterbox.hw0, letterbox.hw, letterbox.pad
            boxes[:, [0, 2]] = (boxes[:, [0, 2]] - [left, 0]) / (w / w0)
            boxes[:, [1, 3]] = (boxes[:, [1, 3]] - [top, 0]) / (h / h0)
        corners = xywhr_to_corners(boxes)
        low, high = corners.min(1), corners.max(1)
        return [{"image_id": image_id, "category_id": int(c) + 1,
                 "rbox": [*(round(float(v), 3) for v in box[:4]), round(float(box[4]), 5)],
                 "poly": [round(float(v), 2) for v in poly.ravel()],
                 "bbox": [round(float(v), 3) for v in (*lo, *(hi - lo))], "score": round(float(s), 5)}
                for box, poly, lo, hi, s, c in zip(boxes, corners, low, high, rows[:, 4], rows[:, 5])]

    def confident(self, outputs: tuple, conf: float) -> np.ndarray:
        """The anchors whose detections the sensitivity error compares."""
        return self.head.confident(outputs[0], conf)

    def detection_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """1 - ProbIoU of the two oriented boxes plus the squared score change, on the reference's confident
        anchors."""
        return self.head.detection_error(candidate[0], reference[0], mask)

    def box_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """The drift gate's share of `detection_error`: all of it."""
        return self.detection_error(candidate, reference, mask)

    def match(self, reference: list[dict], candidate: list[dict], iou: float) -> list[float]:
        """Greedy same-class one-to-one matching by ProbIoU: a turned box shows, which its axis-aligned box hides."""
        return match(reference, candidate, iou, rotated_iou_of)

    def ground_truth(self, images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
        """Each image's oriented boxes in original pixels: `rbox` from the label's corners by OpenCV's smallest
        rotated rectangle, as Ultralytics reads them."""
        gt_images, annotations = [], []
        for image_id, (image, (height, width)) in enumerate(zip(images, shapes)):
            gt_images.append({"id": image_id, "file_name": image.name, "height": height, "width": width})
            for cls, corners in read_oriented(label_path(image), len(names)):
                box = corners_to_xywhr((corners * [width, height])[None])[0]
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": cls + 1,
                                    "rbox": box.tolist()})
        return {"images": gt_images, "annotations": annotations,
                "categories": [{"id": i + 1, "name": name} for i, name in enumerate(names)]}

    def score(self, ground_truth: dict, detections: list[dict]) -> tuple[dict[str, float], list[dict]]:
        """mAP50-95 and mAP50 as Ultralytics' OBB validator reports them, and the same per class."""
        map50_95, map50, per_class = oriented_map(ground_truth, detections)
        family = self.metrics.primary
        rows = [{"class_id": row["class_id"], "class_name": row["class_name"], family.main.key: row["map50_95"],
                 family.second.key: row["map50"]} for row in per_class]
        return {family.main.key: map50_95, family.second.key: map50}, rows

    def matched(self, family: Scored, ground_truth: dict, detections: list[dict], sizes: bool = False):
        """The detections matched per image (`OrientedMatches`), which every resample's mAP reads."""
        return OrientedMatches.of(ground_truth, detections)

    def scorer(self, family: Scored, ground_truth: dict, samples: int, seed: int) -> OrientedScorer:
        """mAP50-95 and mAP50 of any model's detections on these images under the same seeded resamples."""
        return OrientedScorer(ground_truth, samples, seed)

    def paired(self, family: Scored, ground_truth: dict, reference: list[dict], candidate: list[dict], samples: int,
               level: float, seed: int, points: tuple[float, float, float, float] | None = None,
               matches: tuple = (None, None), area: str = "all") -> PairedDrop:
        """The mAP drop from `reference` to `candidate`, each with a paired bootstrap interval."""
        scorer = OrientedScorer(ground_truth, samples, seed)
        return paired_scores(scorer.scores(reference, matches[0], area), scorer.scores(candidate, matches[1], area),
                             level, samples, points)

    def labels(self, image: Path, names: tuple[str, ...]) -> list:
        """The (class, corners) instances of one image's oriented-box label file, validated."""
        return read_oriented(label_path(image), len(names))


def rotated_iou_of(reference: list[dict], candidate: list[dict]) -> np.ndarray:
    """Pairwise ProbIoU of two lists of oriented detections."""
    return probiou(np.array([d["rbox"] for d in reference]), np.array([d["rbox"] for d in candidate]))


class Classify(Task):
    """Class probabilities: output 0 is the softmax over classes (Ultralytics' Classify head as exported), one
    prediction per centre-cropped image, scored by top-1 and top-5 accuracy (`qgate.topk`).

    Not a kind of detection (as Ultralytics' ClassificationValidator is not): no boxes, no threshold, no NMS.
    """

    name = "classify"
    metrics = TASK_METRICS["classify"]

    @classmethod
    def head_layout(cls, shapes: list[list[int]], num_classes: int, where: str, fields: dict) -> str:
        """`probabilities`: one row of `num_classes` values, as Ultralytics exports its Classify head (softmax)."""
        if [int(d) for d in shapes[0]] != [1, num_classes]:
            raise QgateError(f"{where}: output shape {list(shapes[0])} is not [1, {num_classes}] class probabilities; "
                             "qgate judges Ultralytics classifiers as exported (one softmax output)")
        return "probabilities"

    @classmethod
    def dataset(cls, path: str | Path) -> Dataset:
        """A folder of split folders of class folders (Ultralytics' classification layout); a file is refused in
        one line (a dataset yaml of boxes is a detector's)."""
        if Path(path).is_file():
            raise QgateError(f"{path}: is a file; a classify model is judged on a folder of class folders "
                             "(<folder>/val/<class>/<image>, Ultralytics' layout), not a dataset yaml: set "
                             "model.dataset to that folder")
        return load_class_folders(path)

    def prepare(self, image: np.ndarray, imgsz: int) -> tuple[np.ndarray, None]:
        """The model's uint8 BGR input from the original image: short side to imgsz, centre crop (Ultralytics')."""
        return center_cropped(image, imgsz)

    def predictions(self, outputs: tuple, settings: Postprocess, image_id: int, geometry=None) -> list[dict]:
        """The image's one classification, top class first (`qgate.topk.classification`); no threshold applies,
        as none does to Ultralytics' top-1."""
        return [classification(np.asarray(outputs[0]).reshape(-1), image_id)]

    def confident(self, outputs: tuple, conf: float) -> np.ndarray:
        """The reference's top class (a mask over the classes): what the sensitivity error compares, whatever its
        probability; one prediction per image, as a detector's mask counts its confident detections."""
        probabilities = np.asarray(outputs[0]).reshape(-1)
        return np.arange(probabilities.size) == np.argmax(probabilities)

    def detection_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """How far the probability of the reference's top class (`mask`, from `confident`) moved."""
        reference_probabilities = np.asarray(reference[0], dtype=np.float64).reshape(-1)
        candidate_probabilities = np.asarray(candidate[0], dtype=np.float64).reshape(-1)
        return float(np.abs(reference_probabilities[mask] - candidate_probabilities[mask]).mean())

    def box_error(self, candidate: tuple, reference: tuple, mask: np.ndarray) -> float:
        """The drift gate's share of `detection_error`: all of it (a classifier has nothing else)."""
        return self.detection_error(candidate, reference, mask)

    def match(self, reference: list[dict], candidate: list[dict], iou: float) -> list[float]:
        """[1.0] when both predictions name the same class, else none: a bad case is an image whose class changed."""
        same = reference and candidate and reference[0]["category_id"] == candidate[0]["category_id"]
        return [1.0] if same else []

    def ground_truth(self, images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
        """Each image's class (its folder) as a COCO-style annotation."""
        return class_ground_truth(images, shapes, names)

    def score(self, ground_truth: dict, predictions: list[dict]) -> tuple[dict[str, float], list[dict]]:
        """Top-1 and top-5 accuracy by key, and the same per true class (None: a class without images)."""
        (top1, top5), per_class = top_k(ground_truth, predictions)
        family = self.metrics.primary
        return {family.main.key: top1, family.second.key: top5}, per_class

    def matched(self, family: Scored, ground_truth: dict, predictions: list[dict], sizes: bool = False):
        """None: a classification has no objects to match to ground truth (top-k reads it directly)."""
        return None

    def scorer(self, family: Scored, ground_truth: dict, samples: int, seed: int) -> TopkScorer:
        """Top-1 and top-5 of any model's predictions on these images under the same seeded resamples."""
        return TopkScorer(ground_truth, samples, seed)

    def paired(self, family: Scored, ground_truth: dict, reference: list[dict], candidate: list[dict], samples: int,
               level: float, seed: int, points: tuple[float, float, float, float] | None = None,
               matches: tuple = (None, None), area: str = "all") -> PairedDrop:
        """The top-1 (and top-5) drop from `reference` to `candidate`, each with a paired bootstrap interval."""
        return paired_topk_drop(ground_truth, reference, candidate, samples, level, seed, points, area)

    def labels(self, image: Path, names: tuple[str, ...]) -> list:
        """The image's class id (its folder among `names`): a clear error naming an image outside them."""
        return [class_of(image, names)]


TASKS = {task.name: task for task in (Detect, Segment, Pose, Oriented, Classify)}


def task_for(record: dict) -> Task:
    """The task (with its head layout) the export record names; an error for a record written before tasks were."""
    name, layout = record.get("task"), record.get("head_layout")
    if name not in TASKS:
        raise QgateError(f"export record names no known task ({name!r}); re-run `dvc repro export`")
    if TASKS[name].headed and layout not in HEADS:
        raise QgateError(f"export record names no known head layout ({layout!r}); re-run `dvc repro export`")
    return TASKS[name].from_record(record, HEADS.get(layout))


def scale_to_original(rows: np.ndarray, letterbox: Letterbox) -> np.ndarray:
    """Undo letterbox padding and resize, then clip to the original image."""
    (h0, w0), (h, w), (left, top) = letterbox.hw0, letterbox.hw, letterbox.pad
    boxes = rows[:, :4].copy()
    boxes[:, [0, 2]] = (boxes[:, [0, 2]] - left) / (w / w0)
    boxes[:, [1, 3]] = (boxes[:, [1, 3]] - top) / (h / h0)
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, w0)
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, h0)
    return np.concatenate([boxes, rows[:, 4:]], axis=1)


def to_coco(rows: np.ndarray, image_id: int) -> list[dict]:
    """Rows (x1, y1, x2, y2, score, class) -> COCO detections; category id = class + 1."""
    # whole columns to Python floats at once (per-element numpy scalars cost seconds a robustness run); the
    # widths are taken in the rows' own dtype, as they were element by element, so every value stays the same
    columns = zip(*(column.tolist() for column in (rows[:, 0], rows[:, 1], rows[:, 2] - rows[:, 0],
                                                   rows[:, 3] - rows[:, 1], rows[:, 4], rows[:, 5])))
    return [{"image_id": image_id, "category_id": int(c) + 1,
             "bbox": [round(x, 3), round(y, 3), round(w, 3), round(h, 3)], "score": round(s, 5)}
            for x, y, w, h, s, c in columns]
