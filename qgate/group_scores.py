"""Score quantizer groups: the INT8 model with one group alone in float, against FP32, as a job any executor runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qgate.compute import Job, LocalExecutor
from qgate.evaluator import portable_images
from qgate.preprocess import EncodedImage, image_tensor
from qgate.heads import Postprocess
from qgate.groups import Group
from qgate.tasks import Detect, Task

COMPILE_AHEAD = 2  # local: groups compiled on threads ahead of the one inferring


@dataclass(frozen=True)
class GroupScoring:
    """What a worker needs: the runtime, both models, the ranking images, and FP32's outputs and detections on them."""

    runtime: Any  # qgate.runtimes.Runtime
    fp32: Any  # the runtime's portable models
    int8: Any
    groups: list[Group]
    images: list[Path | EncodedImage]
    imgsz: int
    precision: str
    reference: list[tuple]
    masks: list[np.ndarray]
    fp32_detections: list[list[dict]]
    settings: Postprocess
    iou: float
    task: Task
    error: Callable


def score_groups(runtime, fp32, int8, groups: list[Group], images: list[Path], imgsz: int,
                 precision: str, settings: Postprocess, iou: float, confidence: float, task, error=None,
                 executor=None) -> dict:
    """Detection error against FP32 (on its confident detections) and detection disagreement, per group and image.

    Each group is compiled as a real mixed-precision model: the CPU's int8 kernels add error a float
    emulation of FakeQuantize does not show (on the demo, on this AVX2 machine: mAP50-95 drop 0.021 real,
    0.014 emulated), and the groups that fix it are the ones that matter. `task` (`qgate.tasks`) reads the
    outputs; `error` replaces its `detection_error` (benchmarks compare scores). Locally two groups
    compile while one infers: compiling is mostly serial work (0.8 s a group at 192 px, where 16 images infer
    in 0.1 s), and two models inferring at once on a 2-vCPU machine took 1.4x longer at 640 px.
    """
    error = error or task.detection_error
    executor = executor or LocalExecutor()
    inputs = [image_tensor(path, imgsz, prepare=task.prepare) for path in images]
    reference = runtime.head_outputs(runtime.compile(fp32, precision, uint8_input=False), inputs, task.outputs)
    quantized = runtime.head_outputs(runtime.compile(int8, precision, uint8_input=False), inputs, task.outputs)
    # none on an empty image: it adds no error (every anchor's box there is noise, which drowned the rest)
    masks = [task.confident(f, confidence) for f in reference]
    base = np.array([error(q, f, m) for q, f, m in zip(quantized, reference, masks)])
    if not base.any():  # FP32 confident nowhere, or INT8 exactly FP32 there: no group can remove anything
        return {"base": base, "errors": None, "disagreements": None}
    payload = GroupScoring(runtime, runtime.portable(fp32), runtime.portable(int8), groups,
                           list(portable_images(images, executor.remote)), imgsz, precision, reference, masks,
                           [task.predictions(f, settings, 0) for f in reference], settings, iou, task, error)
    job = Job(setup=_load, prepare=_compile_group, work=_score_group, payload=payload, prepare_ahead=COMPILE_AHEAD)
    scores = list(executor.run(job, range(len(groups))))
    return {"base": base, "errors": np.array([s[0] for s in scores]).reshape(len(groups), len(images)),
            "disagreements": np.array([s[1] for s in scores]).reshape(len(groups), len(images))}


def _load(scoring: GroupScoring, threads: int | None) -> tuple[dict, None]:
    state = {"scoring": scoring, "threads": threads, "fp32": scoring.fp32.load(), "int8": scoring.int8.load(),
             "inputs": [image_tensor(source, scoring.imgsz, prepare=scoring.task.prepare) for source in scoring.images]}
    return state, None


def _compile_group(state: dict, group: int):
    scoring = state["scoring"]
    model = scoring.runtime.revert(state["int8"], state["fp32"], scoring.groups, {group})
    return scoring.runtime.compile(model, scoring.precision, threads=state["threads"], uint8_input=False)


def _score_group(state: dict, compiled) -> tuple[list[float], list[float]]:
    """One group's detection error and disagreement per ranking image."""
    s = state["scoring"]
    outputs = s.runtime.head_outputs(compiled, state["inputs"], s.task.outputs)
    errors = [s.error(o, f, m) for o, f, m in zip(outputs, s.reference, s.masks)]
    disagreements = [disagreement(d, s.task.predictions(o, s.settings, 0), s.iou, s.task)
                     for o, d in zip(outputs, s.fp32_detections)]
    return errors, disagreements


def disagreement(reference: list[dict], candidate: list[dict], iou: float, task=Detect()) -> float:
    """The share of predictions (of the larger list) that do not match one-to-one at `iou` by the task's match."""
    total = max(len(reference), len(candidate))
    return 1 - sum(task.match(reference, candidate, iou)) / total if total else 0.0
