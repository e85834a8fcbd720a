"""OpenVINO IR + image list -> detections (Ultralytics-identical pre/post-processing) -> pycocotools mAP."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import openvino as ov
from tqdm import tqdm

from qgate.dataset import coco_ground_truth
from qgate.errors import QgateError
from qgate.heads import Postprocess, RawHead

log = logging.getLogger(__name__)

PAD_VALUE = 114


@dataclass
class Evaluation:
    """mAP summary, per-class AP and the COCO-format detections of one evaluation run."""

    map50_95: float
    map50: float
    images: int
    instances: int
    seconds: float
    per_class: list[dict] = field(default_factory=list)
    detections: list[dict] = field(default_factory=list)
    ground_truth: dict = field(default_factory=dict)

    @property
    def images_per_second(self) -> float:
        """Throughput of the whole loop: read, preprocess, infer, decode."""
        return self.images / self.seconds if self.seconds else 0.0


def compile_model(model: str | Path | ov.Model, precision: str, hint: str = "THROUGHPUT",
                  device: str = "CPU") -> ov.CompiledModel:
    """Compile for letterboxed uint8 BGR HWC input, with an explicit inference precision.

    The u8 -> float, BGR -> RGB, HWC -> CHW and /255 steps run inside the graph: in NumPy they cost as
    much as reading the JPEG. The precision is explicit because OpenVINO picks BF16 on CPUs that have it.
    """
    core = ov.Core()
    model = core.read_model(str(model)) if isinstance(model, (str, Path)) else model.clone()
    ppp = ov.preprocess.PrePostProcessor(model)
    ppp.input().tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_color_format(
        ov.preprocess.ColorFormat.BGR)
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    ppp.input().preprocess().convert_element_type(ov.Type.f32).convert_color(
        ov.preprocess.ColorFormat.RGB).scale(255.0)
    config = {"PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": precision}
    compiled = core.compile_model(ppp.build(), device, config)
    if measured_precision(compiled) != precision:
        log.warning("%s cannot run %s on this CPU; it runs %s: reports show the precision measured",
                    device, precision, measured_precision(compiled))
    return compiled


def measured_precision(compiled: ov.CompiledModel) -> str:
    """The precision the plugin actually runs float layers in (a request it cannot honour falls back)."""
    return compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def load_image(path: Path, imgsz: int) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
    """Read BGR and resize the long side to imgsz like Ultralytics' dataset; return (image, hw0, hw)."""
    image = cv2.imread(str(path))
    if image is None:
        raise QgateError(f"{path}: unreadable image; replace it or remove it from the split")
    h0, w0 = image.shape[:2]
    ratio = imgsz / max(h0, w0)
    if ratio != 1:
        size = (min(math.ceil(w0 * ratio), imgsz), min(math.ceil(h0 * ratio), imgsz))
        image = cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
    return image, (h0, w0), image.shape[:2]


def letterbox(image: np.ndarray, imgsz: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Pad (never upscale) to imgsz x imgsz, centred; return the uint8 BGR image and (left, top)."""
    h, w = image.shape[:2]
    ratio = min(imgsz / h, imgsz / w, 1.0)
    new_w, new_h = max(round(w * ratio), 1), max(round(h * ratio), 1)
    if (new_w, new_h) != (w, h):
        image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    dw, dh = (imgsz - new_w) / 2, (imgsz - new_h) / 2
    top, bottom, left, right = round(dh - 0.1), round(dh + 0.1), round(dw - 0.1), round(dw + 0.1)
    image = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(PAD_VALUE,) * 3)
    return image, (left, top)


def to_tensor(image: np.ndarray) -> np.ndarray:
    """Letterboxed uint8 BGR HWC -> the float32 RGB NCHW tensor in [0, 1] that the plain IR takes."""
    return np.ascontiguousarray(image[:, :, ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 255.0)


def image_tensor(path: Path, imgsz: int) -> np.ndarray:
    """Read, resize and letterbox one image into the float tensor the plain IR takes (calibration, capture)."""
    return to_tensor(letterbox(load_image(path, imgsz)[0], imgsz)[0])


def scale_to_original(rows: np.ndarray, hw0: tuple[int, int], hw: tuple[int, int], pad: tuple[int, int]) -> np.ndarray:
    """Undo letterbox padding and resize, then clip to the original image."""
    boxes = rows[:, :4].copy()
    boxes[:, [0, 2]] = (boxes[:, [0, 2]] - pad[0]) / (hw[1] / hw0[1])
    boxes[:, [1, 3]] = (boxes[:, [1, 3]] - pad[1]) / (hw[0] / hw0[0])
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, hw0[1])
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, hw0[0])
    return np.concatenate([boxes, rows[:, 4:]], axis=1)


def to_coco(rows: np.ndarray, image_id: int) -> list[dict]:
    """Rows (x1, y1, x2, y2, score, class) -> COCO detections; category id = class + 1."""
    return [{"image_id": image_id, "category_id": int(c) + 1,
             "bbox": [round(float(x1), 3), round(float(y1), 3), round(float(x2 - x1), 3), round(float(y2 - y1), 3)],
             "score": round(float(s), 5)} for x1, y1, x2, y2, s, c in rows]


def predict(compiled: ov.CompiledModel, images: list[Path], imgsz: int, settings: Postprocess,
            head=RawHead()) -> tuple[list[list[dict]], list[tuple[int, int]]]:
    """Run every image through the compiled model; return per-image COCO detections and original (h, w).

    `head` (`qgate.heads`) turns the model's output into detections.
    """
    detections: list[list[dict]] = [[] for _ in images]
    shapes: list[tuple[int, int]] = [(0, 0)] * len(images)
    takes_uint8 = compiled.input(0).get_element_type() == ov.Type.u8  # compile_model's in-graph preprocessing

    def prepare(index: int) -> tuple[dict, tuple]:
        image, hw0, hw = load_image(images[index], imgsz)
        padded, pad = letterbox(image, imgsz)
        shapes[index] = hw0
        return {0: padded[None] if takes_uint8 else to_tensor(padded)}, (index, hw0, hw, pad)

    def consume(output: np.ndarray, context: tuple) -> None:
        index, hw0, hw, pad = context
        rows = head.detections(output[0], settings)
        detections[index] = to_coco(scale_to_original(rows, hw0, hw, pad), index)

    indices = tqdm(range(len(images)), desc="evaluate", unit="img", leave=False, disable=None)
    infer_pipelined(compiled, indices, prepare, consume)
    return detections, shapes


def infer_pipelined(compiled: ov.CompiledModel, items, prepare, consume) -> None:
    """Infer every item asynchronously on the plugin's optimal number of requests, in order.

    `prepare(item)` -> (inputs, context) runs while earlier requests infer; `consume(output, context)` gets each
    request's first output (valid only during the call) once it is done. No Python callback runs on
    OpenVINO's threads: with AsyncInferQueue callbacks, destroying the compiled model could deadlock (its
    stream threads waited for the GIL the main thread held while joining them; seen in the family tests).
    """
    requests = [compiled.create_infer_request()
                for _ in range(max(2, compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))]
    contexts: list = [None] * len(requests)
    started = 0
    for item in items:
        slot = started % len(requests)
        if contexts[slot] is not None:
            requests[slot].wait()
            consume(requests[slot].get_output_tensor(0).data, contexts[slot])
        inputs, contexts[slot] = prepare(item)
        requests[slot].start_async(inputs)
        started += 1
    for offset in range(len(requests)):  # the rest, oldest first
        slot = (started + offset) % len(requests)
        if contexts[slot] is not None:
            requests[slot].wait()
            consume(requests[slot].get_output_tensor(0).data, contexts[slot])


def evaluate(compiled: ov.CompiledModel, images: list[Path], names: tuple[str, ...], imgsz: int,
             settings: Postprocess = Postprocess(), head=RawHead()) -> Evaluation:
    """Predict on `images` and score against their YOLO labels with pycocotools COCOeval."""
    start = time.perf_counter()
    per_image, shapes = predict(compiled, images, imgsz, settings, head)
    seconds = time.perf_counter() - start
    ground_truth = coco_ground_truth(images, shapes, names)
    detections = [d for image_detections in per_image for d in image_detections]
    map50_95, map50, per_class = coco_map(ground_truth, detections)
    return Evaluation(map50_95=map50_95, map50=map50, images=len(images),
                      instances=len(ground_truth["annotations"]), seconds=seconds, per_class=per_class,
                      detections=detections, ground_truth=ground_truth)


def coco_map(ground_truth: dict, detections: list[dict]) -> tuple[float, float, list[dict]]:
    """pycocotools bbox mAP50-95, mAP50 and per-class AP (classes without ground truth get None)."""
    names = {c["id"]: c["name"] for c in ground_truth["categories"]}
    if not detections or not ground_truth["annotations"]:
        return 0.0, 0.0, [_class_row(i, n, None, None) for i, n in names.items()]
    evaluator = matched(ground_truth, detections)
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


def matched(ground_truth: dict, detections: list[dict]):
    """pycocotools' COCOeval after `evaluate` (detections matched to ground truth per image and class).

    Only the 'all' area range at 100 detections: what summarize() reports as AP and AP50; the
    small/medium/large and 1/10-detection breakdowns would cost 10x the time.
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        gt = COCO()
        gt.dataset = ground_truth
        gt.createIndex()
        evaluator = COCOeval(gt, gt.loadRes(detections), "bbox")
        evaluator.params.areaRng, evaluator.params.areaRngLbl = [[0, 1e10]], ["all"]
        evaluator.params.maxDets = [100]
        evaluator.evaluate()
    return evaluator


def mean_valid(precision: np.ndarray) -> float:
    """pycocotools' summarize: the mean of the precision array where a class has ground truth (not -1)."""
    valid = precision[precision > -1]  # -1 marks classes without ground truth
    return float(valid.mean()) if valid.size else 0.0


def _class_row(cat_id: int, name: str, ap: float | None, ap50: float | None) -> dict:
    return {"class_id": int(cat_id) - 1, "class_name": name, "map50_95": ap, "map50": ap50}
