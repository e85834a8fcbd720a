"""A model on its runtime + image list -> detections (Ultralytics-identical pre/post-processing) -> the task's metrics.

Prediction is a job (`qgate.compute`): shards of images in, detections out, run by whichever executor.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from qgate.compute import Job, LocalExecutor
from qgate.heads import Postprocess
from qgate.preprocess import EncodedImage, decode, read_bytes, to_tensor
from qgate.tasks import Detect


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


def portable_images(images: list[Path], remote: bool) -> Iterator[Path | EncodedImage]:
    """The images as paths (read where they are used) or, for remote workers, as their bytes, read lazily."""
    for path in images:
        yield EncodedImage(str(path), read_bytes(path)) if remote else path


@dataclass(frozen=True)
class Predictor:
    """What a worker compiles and how it turns images into predictions (the payload of a prediction job)."""

    runtime: Any  # qgate.runtimes.Runtime
    models: tuple  # the runtime's portable models, or (local only) ones it compiled; each image is decoded once for all
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
            shard_images: int) -> tuple[list[list[list[dict]]], list[tuple[int, int]], list[list[str]]]:
    """Per model of the predictor: per-image COCO detections (image id = index); the images' original (h, w); per
    model, the precision each worker ran.

    Remote executors get shards of `shard_images` image bytes; results come back in image order, so the
    merged detections are the local ones.
    """
    detections: list[list[list[dict]]] = [[] for _ in predictor.models]
    shapes: list[tuple[int, int]] = []
    with tqdm(total=len(images), desc="evaluate", unit="img", leave=False, disable=None) as bar:
        for results in executor.run(prediction_job(predictor), shards(images, executor.remote, shard_images)):
            for per_model, hw0 in results:
                for model_detections, image_detections in zip(detections, per_model):
                    model_detections.append(image_detections)
                shapes.append(hw0)
            bar.update(len(results))
    return detections, shapes, [[info[model] for info in executor.infos] for model in range(len(predictor.models))]


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


def _compile_predictor(predictor: Predictor, threads: int | None) -> tuple[tuple, tuple[str, ...]]:
    runtime = predictor.runtime
    compiled = tuple(model if runtime.is_compiled(model) else
                     runtime.compile(model.load(), predictor.precision, threads=threads) for model in predictor.models)
    return (compiled, predictor), tuple(runtime.measured_precision(model) for model in compiled)


SHARED_IMAGES = 16  # images decoded at a time and kept for every model of a predictor that has several


def _predict_shard(state: tuple, shard: Shard) -> list[tuple[tuple[list[dict], ...], tuple[int, int]]]:
    """Every image of the shard, in order: each model's detections, and the image's original (h, w).

    One model prepares each image while earlier ones infer. Several (FP32 and INT8 under one shift) take turns over
    `SHARED_IMAGES` images at a time, prepared once: decoding and shifting cost as much as inferring on small models.
    """
    compiled, predictor = state
    count = len(shard.images)
    detections: list[list] = [[None] * count for _ in compiled]
    originals: list = [None] * count
    kept: dict[int, tuple] = {}  # this chunk's prepared images, when another model reads them too

    def image(index: int) -> tuple:
        if index in kept:
            return kept[index]
        decoded = decode(shard.images[index], predictor.shift, shard.start + index)
        pixels, geometry = predictor.task.prepare(decoded, predictor.imgsz)
        originals[index] = decoded.shape[:2]
        if len(compiled) > 1:
            kept[index] = pixels, geometry
        return pixels, geometry

    step = count if len(compiled) == 1 else SHARED_IMAGES
    for first in range(0, count, step):
        chunk = range(first, min(first + step, count))
        for model, found in zip(compiled, detections):
            _infer_images(predictor, model, chunk, image, found, shard.start)
        kept.clear()
    return [(tuple(found[index] for found in detections), originals[index]) for index in range(count)]


def _infer_images(predictor: Predictor, model: Any, indices: range, image, found: list, start: int) -> None:
    """`model`'s detections of the images at `indices` into `found`; `image(index)` -> (pixels, geometry)."""
    takes_uint8 = predictor.runtime.takes_uint8(model)

    def feed(index: int) -> tuple[dict, tuple]:
        pixels, geometry = image(index)
        return {0: pixels[None] if takes_uint8 else to_tensor(pixels)}, (index, geometry)

    def consume(outputs: tuple, context: tuple) -> None:
        index, geometry = context
        head = tuple(output[0] for output in outputs)  # batch item 0
        found[index] = predictor.task.predictions(head, predictor.settings, start + index, geometry)

    predictor.runtime.infer_pipelined(model, indices, feed, consume, predictor.task.outputs)


def evaluate(runtime, model, images: list[Path], names: tuple[str, ...], imgsz: int,
             settings: Postprocess = Postprocess(), task=Detect(), precision: str = "f32", executor=None,
             shard_images: int = 16, shift=None) -> Evaluation:
    """Predict on `images` with `model` on `runtime` (locally unless `executor` says otherwise) and score against
    their YOLO labels; each image shifted by `shift` first (`qgate.shifts.Shift`) when given.

    A compiled model runs as it is (local only); a path or the runtime's model is compiled at `precision` by each
    worker.
    """
    return evaluate_each(runtime, (model,), images, names, imgsz, settings, task, precision, executor, shard_images,
                         shift)[0]


def evaluate_each(runtime, models: tuple, images: list[Path], names: tuple[str, ...], imgsz: int,
                  settings: Postprocess = Postprocess(), task=Detect(), precision: str = "f32", executor=None,
                  shard_images: int = 16, shift=None) -> list[Evaluation]:
    """`evaluate` of each model in one pass over the images: each image is read (and shifted) once for all of them.
    Each evaluation's `seconds` is the whole pass's."""
    executor = executor or LocalExecutor()
    sources = tuple(model if runtime.is_compiled(model) else runtime.portable(model) for model in models)
    start = time.perf_counter()
    predictor = Predictor(runtime, sources, precision, imgsz, settings, task, shift)
    per_model, shapes, precisions = predict(executor, predictor, images, shard_images)
    seconds = time.perf_counter() - start
    return [score(images, names, per_image, shapes, seconds, model_precisions, task)
            for per_image, model_precisions in zip(per_model, precisions)]


def score(images: list[Path], names: tuple[str, ...], per_image: list[list[dict]], shapes: list[tuple[int, int]],
          seconds: float, precisions: list[str], task=Detect()) -> Evaluation:
    """Score `predict`'s detections against the images' labels as the task does (on the driver, once)."""
    ground_truth = task.ground_truth(images, shapes, names)
    detections = [d for image_detections in per_image for d in image_detections]
    metrics, per_class = task.score(ground_truth, detections)
    return Evaluation(metrics=metrics, images=len(images), instances=len(ground_truth["annotations"]),
                      seconds=seconds, per_class=per_class, detections=detections, ground_truth=ground_truth,
                      precision=",".join(sorted(set(precisions))))
