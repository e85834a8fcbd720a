"""Evaluating a model (path or the runtime's model) like the baseline: its split, settings and precision."""

from __future__ import annotations

import logging
from pathlib import Path

from qgate.artifacts import model_dataset
from qgate.dataset import orphan_labels, split_images
from qgate.evaluator import Evaluation, evaluate_each
from qgate.heads import Postprocess
from qgate.params import Params
from qgate.runtimes import runtime_for
from qgate.tasks import task_for

log = logging.getLogger(__name__)


def val_images(params: Params, record: dict) -> tuple[list[Path], tuple[str, ...]]:
    """The images every model is scored on (the baseline's split, labels checked for the model's task) and the
    class names."""
    dataset = model_dataset(params, record)
    images = split_images(dataset, params.baseline.split)
    task = task_for(record)
    for image in images:  # the first bad line raises, naming it
        task.labels(image, dataset.names)
    orphans = orphan_labels(images)
    if orphans:
        log.warning("%d label file(s) have no image and are ignored, e.g. %s", len(orphans), orphans[0])
    return images, dataset.names


def baseline_postprocess(params: Params) -> Postprocess:
    """The score threshold, NMS IoU and detection cap every model is evaluated with (`baseline:`)."""
    return Postprocess(conf=params.baseline.conf, iou=params.baseline.iou, max_det=params.baseline.max_det)


def evaluate_model(params: Params, model: Path | object, record: dict, executor=None,
                   val: tuple[list[Path], tuple[str, ...]] | None = None, shift=None) -> Evaluation:
    """Evaluate a model (path or the runtime's model) on the baseline's split with its settings (`.precision`: the
    one run).

    `executor` (`qgate.executors.open_executor`; None: this process) runs the prediction; `val` (from
    `val_images`) spares a caller that evaluates many models re-reading and re-validating the dataset each time;
    `shift` (`qgate.shifts.Shift`) shifts every image first.
    """
    return evaluate_models(params, (model,), record, executor, val, shift)[0]


def evaluate_models(params: Params, models: tuple, record: dict, executor=None,
                    val: tuple[list[Path], tuple[str, ...]] | None = None, shift=None) -> list[Evaluation]:
    """`evaluate_model` of each model in one pass over the split: each image is read (and shifted) once for all."""
    cfg = params.baseline
    images, names = val or val_images(params, record)
    log.info("evaluating %s on %d %s images (%s executor)",
             ", ".join(str(m) if isinstance(m, Path) else "model" for m in models), len(images), cfg.split,
             params.compute.executor)
    results = evaluate_each(runtime_for(params), models, images, names, params.model.imgsz,
                            baseline_postprocess(params), task_for(record), cfg.inference_precision, executor,
                            params.compute.shard_images, shift)
    for result in results:
        log.info("evaluated at %s: %.1f images/s", result.precision, result.images_per_second)
    return results
