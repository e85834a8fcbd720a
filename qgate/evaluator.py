"""A model on its runtime + image list -> detections (Ultralytics-identical pre/post-processing) -> the task's metrics.

Prediction is a job (`qgate.compute`): shards of images in, detections out, run by whichever executor.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from tqdm import tqdm

from qgate.compute import Job, LocalExecutor
from qgate.errors import QgateError
from qgate.heads import Postprocess
from qgate.tasks import Detect, Letterbox

PAD_VALUE = 114


@dataclass
class Evaluation:
    """The task's metrics, per class, and the COCO-format detections of one evaluation run."""

    metrics: dict[str, float]  # every scored family's main and second metric, by key (`map50_95`, `mask_map50`)
    images: int
    instances: int
    seconds: float
    per_class: list[dict] = field(default_factory=list)
    detections: list[dict] = field(default_factory=list)
    ground_truth: dict = field(default_factory=dict)
    precision: str = ""  # the precision the workers ran (comma-separated if they differed)

    def value(self, key: str) -> float:
        """A metric by its key (`map50_95`, `mask_map50_95`); KeyError names a key the task does not score."""
        return self.metrics[key]

    @property
    def images_per_second(self) -> float:
        """Throughput of the whole loop: read, preprocess, infer, decode."""
        return self.images / self.seconds if self.seconds else 0.0


def load_image(source: Path | EncodedImage, imgsz: int, shift=None,
               index: int = 0) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
    """Decode BGR and resize the long side to imgsz like Ultralytics' dataset; return (image, hw0, hw).

    Decoded from the file's bytes, as Ultralytics' `imread` does, so a path and its bytes give the same pixels.
    A `shift` (`qgate.shifts.Shift`) changes the decoded image, the `index`-th of its split, before the resize.
    """
    name, data = (source.name, source.data) if isinstance(source, EncodedImage) else (source, _read_bytes(source))
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise QgateError(f"{name}: unreadable image; replace it or remove it from the split")
    if shift is not None:
        image = shift(image, index)
    h0, w0 = image.shape[:2]
    ratio = imgsz / max(h0, w0)
    if ratio != 1:
        size = (min(math.ceil(w0 * ratio), imgsz), min(math.ceil(h0 * ratio), imgsz))
        image = cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
    return image, (h0, w0), image.shape[:2]


def _read_bytes(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise QgateError(f"{path}: cannot read the image ({exc.strerror}); fix it or remove it from the split") \
            from None


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


def image_tensor(source: Path | EncodedImage, imgsz: int, shift=None, index: int = 0) -> np.ndarray:
    """Read, resize and letterbox one image into the float tensor the plain IR takes (calibration, capture);
    shifted first by `shift`, as the `index`-th image of its split (`load_image`)."""
    return to_tensor(letterbox(load_image(source, imgsz, shift, index)[0], imgsz)[0])


@dataclass(frozen=True)
class EncodedImage:
    """An image file's name and bytes: what a remote worker decodes, with no shared file system."""

    name: str
    data: bytes


def portable_images(images: list[Path], remote: bool) -> Iterator[Path | EncodedImage]:
    """The images as paths (read where they are used) or, for remote workers, as their bytes, read lazily."""
    for path in images:
        yield EncodedImage(str(path), _read_bytes(path)) if remote else path


@dataclass(frozen=True)
class Predictor:
    """What a worker compiles and how it turns images into predictions (the payload of a prediction job)."""

    runtime: Any  # qgate.runtimes.Runtime
    model: Any  # the runtime's portable model, or (local only) one it compiled
    precision: str
    imgsz: int
    settings: Postprocess
    task: Detect
    shift: Any = None  # qgate.shifts.Shift: the images as a deployed camera might deliver them


@dataclass(frozen=True)
class Shard:
    """Consecutive val images; `start` is the first one's index (its COCO image id)."""

    start: int
    images: list


def predict(executor, predictor: Predictor, images: list[Path],
            shard_images: int) -> tuple[list[list[dict]], list[tuple[int, int]], list[str]]:
    """Per-image COCO detections (image id = index), original (h, w) and the precision each worker ran.

    Remote executors get shards of `shard_images` image bytes; results come back in image order, so the
    merged detections are the local ones.
    """
    detections: list[list[dict]] = []
    shapes: list[tuple[int, int]] = []
    with tqdm(total=len(images), desc="evaluate", unit="img", leave=False, disable=None) as bar:
        for results in executor.run(prediction_job(predictor), shards(images, executor.remote, shard_images)):
            for image_detections, hw0 in results:
                detections.append(image_detections)
                shapes.append(hw0)
            bar.update(len(results))
    return detections, shapes, list(executor.infos)


def prediction_job(predictor: Predictor) -> Job:
    """Each worker compiles the predictor's model once; each shard of images comes back as its detections."""
    return Job(setup=_compile_predictor, work=_predict_shard, payload=predictor)


def shards(images: list[Path], remote: bool, size: int) -> Iterator[Shard]:
    """The val images in order: one shard of paths locally, shards of `size` images' bytes for remote workers."""
    if not remote:  # one shard: the plugin's requests stay busy across the whole split
        yield Shard(0, images)
        return
    for start in range(0, len(images), size):
        yield Shard(start, list(portable_images(images[start:start + size], remote)))


def _compile_predictor(predictor: Predictor, threads: int | None) -> tuple[tuple, str]:
    runtime, compiled = predictor.runtime, predictor.model
    if not runtime.is_compiled(compiled):
        compiled = runtime.compile(predictor.model.load(), predictor.precision, threads=threads)
    return (compiled, predictor), runtime.measured_precision(compiled)


def _predict_shard(state: tuple, shard: Shard) -> list[tuple[list[dict], tuple[int, int]]]:
    """Detections and original (h, w) of every image of the shard, in order."""
    compiled, predictor = state
    imgsz = predictor.imgsz
    results: list = [None] * len(shard.images)
    takes_uint8 = predictor.runtime.takes_uint8(compiled)

    def prepare(index: int) -> tuple[dict, tuple]:
        image, hw0, hw = load_image(shard.images[index], imgsz, predictor.shift, shard.start + index)
        padded, pad = letterbox(image, imgsz)
        return {0: padded[None] if takes_uint8 else to_tensor(padded)}, (index, Letterbox(hw0, hw, pad))

    def consume(outputs: tuple, context: tuple) -> None:
        index, geometry = context
        first = tuple(output[0] for output in outputs)  # batch item 0
        results[index] = (predictor.task.predictions(first, predictor.settings, shard.start + index, geometry),
                          geometry.hw0)

    predictor.runtime.infer_pipelined(compiled, range(len(shard.images)), prepare, consume, predictor.task.outputs)
    return results


def evaluate(runtime, model, images: list[Path], names: tuple[str, ...], imgsz: int,
             settings: Postprocess = Postprocess(), task=Detect(), precision: str = "f32", executor=None,
             shard_images: int = 16, shift=None) -> Evaluation:
    """Predict on `images` with `model` on `runtime` (locally unless `executor` says otherwise) and score against
    their YOLO labels; each image shifted by `shift` first (`qgate.shifts.Shift`) when given.

    A compiled model runs as it is (local only); a path or the runtime's model is compiled at `precision` by each
    worker.
    """
    executor = executor or LocalExecutor()
    source = model if runtime.is_compiled(model) else runtime.portable(model)
    start = time.perf_counter()
    predictor = Predictor(runtime, source, precision, imgsz, settings, task, shift)
    per_image, shapes, precisions = predict(executor, predictor, images, shard_images)
    return score(images, names, per_image, shapes, time.perf_counter() - start, precisions, task)


def score(images: list[Path], names: tuple[str, ...], per_image: list[list[dict]], shapes: list[tuple[int, int]],
          seconds: float, precisions: list[str], task=Detect()) -> Evaluation:
    """Score `predict`'s detections against the images' labels as the task does (on the driver, once)."""
    ground_truth = task.ground_truth(images, shapes, names)
    detections = [d for image_detections in per_image for d in image_detections]
    metrics, per_class = task.score(ground_truth, detections)
    return Evaluation(metrics=metrics, images=len(images), instances=len(ground_truth["annotations"]),
                      seconds=seconds, per_class=per_class, detections=detections, ground_truth=ground_truth,
                      precision=",".join(sorted(set(precisions))))
