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
        image = decode(shard.images[index], predictor.shift, shard.start + index)
        prepared, geometry = predictor.task.prepare(image, imgsz)
        return {0: prepared[None] if takes_uint8 else to_tensor(prepared)}, (index, geometry, image.shape[:2])

    def consume(outputs: tuple, context: tuple) -> None:
        index, geometry, hw0 = context
        first = tuple(output[0] for output in outputs)  # batch item 0
        results[index] = (predictor.task.predictions(first, predictor.settings, shard.start + index, geometry), hw0)

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
