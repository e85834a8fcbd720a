"""Where inference happens: compile an OpenVINO model at an explicit precision, and run inputs through it."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import openvino as ov

log = logging.getLogger(__name__)

DEVICE = "CPU"


class PortableModel:
    """An IR path or ov.Model that pickles as its IR bytes, so it travels through Ray's object store.

    Locally it is never serialized: `load()` returns the model (or reads the path) as it is.
    """

    def __init__(self, model: str | Path | ov.Model):
        self._model, self._ir = model, None

    def load(self) -> ov.Model:
        """The model; read from its IR bytes when it was sent from another process."""
        if self._ir is not None:
            xml, weights = self._ir
            return ov.Core().read_model(xml, ov.Tensor(np.frombuffer(weights, dtype=np.uint8)))
        if isinstance(self._model, ov.Model):
            return self._model
        return ov.Core().read_model(str(self._model))

    def __getstate__(self) -> dict:
        return {"ir": self._ir or self._ir_bytes()}

    def __setstate__(self, state: dict) -> None:
        self._model, self._ir = None, state["ir"]

    def _ir_bytes(self) -> tuple[str, bytes]:
        if isinstance(self._model, ov.Model):
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "model.xml"
                ov.save_model(self._model, path, compress_to_fp16=False)
                return path.read_text(), path.with_suffix(".bin").read_bytes()
        path = Path(self._model)
        return path.read_text(), path.with_suffix(".bin").read_bytes()


def compile_model(model: str | Path | ov.Model, precision: str, hint: str = "THROUGHPUT", threads: int | None = None,
                  uint8_input: bool = True, device: str = DEVICE) -> ov.CompiledModel:
    """Compile with an explicit inference precision; `uint8_input` takes letterboxed uint8 BGR HWC images.

    The u8 -> float, BGR -> RGB, HWC -> CHW and /255 steps then run inside the graph: in NumPy they cost as
    much as reading the JPEG. The precision is explicit because OpenVINO picks BF16 on CPUs that have it.
    `threads` caps the CPU threads (a Ray worker's CPU share); the outputs do not depend on it. Such a
    worker does not pin its threads: each process pins from core 0, so two 1-thread workers on a 2-core node
    shared one core and ran at half speed (benchmarks/scale.py).
    """
    core = ov.Core()
    if isinstance(model, (str, Path)):
        model = core.read_model(str(model))
    if uint8_input:
        model = _uint8_bgr_input(model.clone())  # the caller's model keeps its float input
    config = {"PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": precision}
    if threads:
        config.update({"INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": False})
    compiled = core.compile_model(model, device, config)
    if (measured := measured_precision(compiled)) != precision:
        log.warning("%s cannot run %s on this CPU; it runs %s: reports show the precision measured",
                    device, precision, measured)
    return compiled


def _uint8_bgr_input(model: ov.Model) -> ov.Model:
    ppp = ov.preprocess.PrePostProcessor(model)
    ppp.input().tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_color_format(
        ov.preprocess.ColorFormat.BGR)
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    ppp.input().preprocess().convert_element_type(ov.Type.f32).convert_color(
        ov.preprocess.ColorFormat.RGB).scale(255.0)
    return ppp.build()


def measured_precision(compiled: ov.CompiledModel) -> str:
    """The precision the plugin actually runs float layers in (a request it cannot honour falls back)."""
    return compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def infer_pipelined(compiled: ov.CompiledModel, items, prepare, consume, outputs: int = 1) -> None:
    """Infer every item asynchronously on the plugin's optimal number of requests, in order.

    `prepare(item)` -> (inputs, context) runs while earlier requests infer; `consume(outputs, context)` gets each
    request's first `outputs` outputs (a tuple, valid only during the call) once it is done. No Python callback runs on
    OpenVINO's threads: with AsyncInferQueue callbacks, destroying the compiled model could deadlock (its
    stream threads waited for the GIL the main thread held while joining them; seen in the family tests).
    """
    requests = [compiled.create_infer_request()
                for _ in range(max(2, compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))]
    contexts: list = [None] * len(requests)

    def finish(slot: int) -> None:
        if contexts[slot] is not None:
            requests[slot].wait()
            consume(tuple(requests[slot].get_output_tensor(i).data for i in range(outputs)), contexts[slot])

    started = 0
    for item in items:
        slot = started % len(requests)
        finish(slot)
        inputs, contexts[slot] = prepare(item)
        requests[slot].start_async(inputs)
        started += 1
    for offset in range(len(requests)):  # the rest, oldest first
        finish((started + offset) % len(requests))


def head_outputs(compiled: ov.CompiledModel, inputs: list[np.ndarray],
                 outputs: int = 1) -> list[tuple[np.ndarray, ...]]:
    """The first `outputs` outputs of every input (batch item 0), inferred asynchronously, copied out of requests."""
    results: list[tuple] = [()] * len(inputs)

    def keep(tensors: tuple, index: int) -> None:
        results[index] = tuple(tensor[0].copy() for tensor in tensors)

    infer_pipelined(compiled, range(len(inputs)), lambda index: ({0: inputs[index]}, index), keep, outputs)
    return results
