"""What differs between Ultralytics detection heads, in one place: output layouts and the box decode kept in float.

Every family ultralytics 8.4 exports (v3u, v5u, v6, v8, v9, v10, 11, 12, 26, their P2/P6 variants) ends in
one of two output layouts, told apart by shape at export and recorded in the export record:

- `raw` [1, 4+nc+extra, anchors]: boxes xywh in input pixels, sigmoided class scores, NMS still to run;
- `end2end` [1, K, 6+extra]: rows (x1, y1, x2, y2, score, class) of an NMS-free head (v10/26 exported with
  `export.end2end: true`), already top-K, no NMS.

`extra` are the values a task's head adds per detection (a segment head's mask coefficients); they travel
with each detection row, after the class column, and take no part in NMS or the detection error. An OBB head's
extra value, its angle, does (`OrientedHead`: rotated NMS and ProbIoU, `qgate.rotated_boxes`).

The head decode (DFL, anchors, strides, the class sigmoid, top-K, a pose head's keypoint decode) is found from
the graph, not from a family's node names: it is every op an output depends on without passing through a
learned layer. The learned layers where that walk stops are the head's output layers (each branch's last
convolution; a segment head's mask coefficients and the prototypes' last convolution).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from qgate.errors import QgateError
from qgate.rotated_boxes import fast_nms, paired_probiou

CLASS_OFFSET = 7680  # Ultralytics' max_wh: separates classes so one NMS pass is class-aware
MAX_NMS_CANDIDATES = 30000
END2END_COLUMNS = 6


@dataclass(frozen=True)
class Postprocess:
    """Detection thresholds; the defaults are Ultralytics' validation settings."""

    conf: float = 0.001
    iou: float = 0.7
    max_det: int = 300


class RawHead:
    """[4+nc+extra, anchors] per image: xywh boxes and class scores per anchor; NMS turns it into detections."""

    layout = "raw"

    def __init__(self, extra: int = 0):
        self.extra = extra

    def _scores(self, output: np.ndarray) -> np.ndarray:
        return output[4:len(output) - self.extra]

    def detections(self, output: np.ndarray, settings: Postprocess) -> np.ndarray:
        """Rows (x1, y1, x2, y2, score, class, extra...) after class-aware NMS, multi-label like Ultralytics'."""
        scores = self._scores(output)
        anchors, classes = np.nonzero(scores.T > settings.conf)
        if anchors.size == 0:
            return np.zeros((0, 6 + self.extra), dtype=np.float32)
        confidences = scores[classes, anchors]
        if confidences.size > MAX_NMS_CANDIDATES:
            top = np.argsort(-confidences, kind="stable")[:MAX_NMS_CANDIDATES]
            anchors, classes, confidences = anchors[top], classes[top], confidences[top]
        xyxy = _xywh_to_xyxy(output[:4, anchors].T)
        shifted = xyxy + (classes * CLASS_OFFSET)[:, None]
        keep = cv2.dnn.NMSBoxes(_corner_size(shifted), confidences.astype(np.float32), settings.conf, settings.iou)
        keep = np.asarray(keep, dtype=np.int64).reshape(-1)[: settings.max_det]
        extra = output[len(output) - self.extra:, anchors[keep]].T
        return np.concatenate([xyxy[keep], confidences[keep, None], classes[keep, None], extra],
                              axis=1).astype(np.float32)

    def confident(self, output: np.ndarray, conf: float) -> np.ndarray:
        """Anchors where some class scores at least `conf` (the ones that become detections)."""
        return self._scores(output).max(0) >= conf

    def detection_error(self, out: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> float:
        """Sum over the reference's confident anchors: 1 - IoU of the two boxes, plus the squared change of the
        reference's best class score.

        Overlap, not squared pixels: mAP50-95 judges boxes by IoU, and squared pixels let the large
        objects' boxes outweigh the rest (on the COCO reference that hid the box decode groups NNCF's
        accuracy control needs in float). The score change is squared so that a class-only fault
        still shows while every group's small score jitter does not drown the box error.
        """
        ref, cand = reference[:, mask], out[:, mask]
        columns = np.arange(ref.shape[1])
        best = self._scores(ref).argmax(0)
        score_change = ref[4 + best, columns] - cand[4 + best, columns]
        return float(np.sum(1 - _paired_iou(_xywh_to_xyxy(ref[:4].T), _xywh_to_xyxy(cand[:4].T))
                            + score_change ** 2))

    def paired_extras(self, out: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
        """The reference's confident boxes (xyxy) with their extra values and those of the same anchor in `out`."""
        extras = slice(len(reference) - self.extra, None)
        return (_xywh_to_xyxy(reference[:4, mask].T), reference[extras, mask].T, out[extras, mask].T)


class End2EndHead:
    """[K, 6+extra] per image: rows (x1, y1, x2, y2, score, class, extra...), top-K of an NMS-free head; no NMS."""

    layout = "end2end"

    def __init__(self, extra: int = 0):
        self.extra = extra

    def detections(self, output: np.ndarray, settings: Postprocess) -> np.ndarray:
        """The rows scoring above `conf`, in the head's (top-K) order, at most `max_det`: Ultralytics' validator."""
        return output[output[:, 4] > settings.conf][: settings.max_det].astype(np.float32)

    def confident(self, output: np.ndarray, conf: float) -> np.ndarray:
        """Rows scoring at least `conf`."""
        return output[:, 4] >= conf

    def detection_error(self, out: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> float:
        """Sum over the reference's confident rows: 1 - IoU with the best-overlapping same-class row of `out`,
        plus the squared score change.

        Row k of two models is not the same object (top-K reorders), so rows are matched by overlap; a
        reference detection with no same-class counterpart costs 1 + its score squared.
        """
        ref = reference[mask]
        error = 0.0
        for box, score, cls in zip(ref[:, :4], ref[:, 4], ref[:, 5]):
            same = out[out[:, 5] == cls]
            if not len(same):
                error += 1 + score ** 2
                continue
            ious = _paired_iou(np.repeat(box[None], len(same), 0), same[:, :4])
            best = int(ious.argmax())
            error += 1 - ious[best] + (score - same[best, 4]) ** 2
        return float(error)

    def paired_extras(self, out: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
        """The reference's confident rows' boxes and extra values, and those of their best-overlapping same-class
        row in `out` (NaN where `out` has none)."""
        ref = reference[mask]
        counterpart = np.full((len(ref), self.extra), np.nan, dtype=np.float64)
        for k, (box, cls) in enumerate(zip(ref[:, :4], ref[:, 5])):
            same = out[out[:, 5] == cls]
            if len(same):
                counterpart[k] = same[int(_paired_iou(np.repeat(box[None], len(same), 0), same[:, :4]).argmax()), 6:]
        return ref[:, :4], ref[:, 6:], counterpart


class OrientedHead:
    """[4+nc+1, anchors] per image: an OBB head's boxes (cx, cy, w, h in input pixels), sigmoided class scores and
    the angle in radians last; Ultralytics' rotated NMS turns it into detections."""

    layout = "raw"

    def _scores(self, output: np.ndarray) -> np.ndarray:
        return output[4:-1]

    def _boxes(self, output: np.ndarray) -> np.ndarray:
        """(anchors, 5) xywhr of every anchor."""
        return np.concatenate([output[:4], output[-1:]]).T

    def detections(self, output: np.ndarray, settings: Postprocess) -> np.ndarray:
        """Rows (cx, cy, w, h, score, class, angle) as Ultralytics' OBB validator keeps them: every class scoring
        above `conf` (multi-label), at most 30000 by score, class-aware Fast-NMS by ProbIoU, `max_det`."""
        scores = self._scores(output)
        anchors, classes = np.nonzero(scores.T > settings.conf)
        confidences = scores[classes, anchors]
        top = np.argsort(-confidences, kind="stable")[:MAX_NMS_CANDIDATES]
        anchors, classes, confidences = anchors[top], classes[top], confidences[top]
        boxes = self._boxes(output)[anchors]
        keep = fast_nms(boxes, confidences, classes, settings.iou)[: settings.max_det]
        return np.concatenate([boxes[keep, :4], confidences[keep, None], classes[keep, None], boxes[keep, 4:]],
                              axis=1).astype(np.float32)

    def confident(self, output: np.ndarray, conf: float) -> np.ndarray:
        """Anchors where some class scores at least `conf`."""
        return self._scores(output).max(0) >= conf

    def detection_error(self, out: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> float:
        """Sum over the reference's confident anchors: 1 - ProbIoU of the two oriented boxes, plus the squared change
        of the reference's best class score (as `RawHead.detection_error`, with the angle in the overlap)."""
        columns = np.arange(int(mask.sum()))
        reference_scores = self._scores(reference[:, mask])
        best = reference_scores.argmax(0)
        score_change = reference_scores[best, columns] - self._scores(out[:, mask])[best, columns]
        overlap = paired_probiou(self._boxes(reference)[mask], self._boxes(out)[mask])
        return float(np.sum(1 - overlap + score_change ** 2))


HEADS = {head.layout: head for head in (RawHead, End2EndHead)}


def output_layout(shape: list[int], num_classes: int, where: str, extra: int = 0) -> str:
    """`raw` or `end2end` from the first output's static shape; an error for any other layout."""
    if len(shape) == 3 and shape[1] == 4 + num_classes + extra:
        return "raw"
    if len(shape) == 3 and shape[2] == END2END_COLUMNS + extra:
        return "end2end"
    plus = f"+{extra}" if extra else ""
    raise QgateError(f"{where}: output shape {shape} is neither [1, 4+{num_classes}{plus}, anchors] nor "
                     f"[1, K, 6{plus}]; qgate judges Ultralytics YOLO heads only")


def _xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    return np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], axis=1)


def _corner_size(xyxy: np.ndarray) -> np.ndarray:
    return np.concatenate([xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]], axis=1).astype(np.float64)


def _paired_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of corner boxes a[i] and b[i], row by row."""
    lo, hi = np.maximum(a[:, :2], b[:, :2]), np.minimum(a[:, 2:], b[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    areas = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), 1) + np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), 1)
    return inter / np.maximum(areas - inter, 1e-9)
