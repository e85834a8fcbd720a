"""Where ONNX Runtime infers: sessions on its CPU execution provider, run in order, and a timed run for speed."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import psutil

from qgate.io import write_json
from qgate.params import BenchmarkParams

log = logging.getLogger(__name__)

PROVIDER = "CPUExecutionProvider"
PRECISION = "f32"  # the CPU execution provider runs float ops in FP32: no BF16 or FP16 hint to give it
WARMUP_RUNS = 3


class PortableONNX:
    """An ONNX path or ModelProto that pickles as its bytes, so it travels through Ray's object store."""

    def __init__(self, model: str | Path | onnx.ModelProto):
        self._model = model

    def load(self) -> onnx.ModelProto:
        """The model (read from its path when it is one)."""
        return self._model if isinstance(self._model, onnx.ModelProto) else onnx.load(str(self._model))

    def __getstate__(self) -> dict:
        return {"bytes": self.load().SerializeToString()}

    def __setstate__(self, state: dict) -> None:
        self._model = onnx.load_from_string(state["bytes"])


def threads_for(threads: int | None) -> int:
    """Intra-op threads: a Ray worker's CPU share, else ORT's default, one per physical core."""
    return threads or psutil.cpu_count(logical=False) or 1


def session(model: onnx.ModelProto | str | Path, precision: str, threads: int | None = None,
            hint: str = "THROUGHPUT") -> ort.InferenceSession:
    """An inference session on the CPU execution provider with ORT's defaults (what a deployment gets): one intra-op
    thread per physical core, pinned by ORT, spinning (1.3x the demo's FP32 throughput on a 2-vCPU EPYC). `threads`
    (a Ray worker's CPU share) sets the count and so leaves them unpinned, as OpenVINO's workers are. A precision
    it cannot honour is run in FP32, said once."""
    if precision != PRECISION:
        log.warning("ONNX Runtime's CPU execution provider cannot run %s; it runs f32: reports show the precision "
                    "measured", precision)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # warnings about unused initializers of a reverted model are not the user's
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, options, providers=[PROVIDER])


def infer_in_order(compiled: ort.InferenceSession, items, prepare, consume, outputs: int = 1) -> None:
    """Infer every item in order: `prepare(item)` -> ({0: input}, context), `consume(outputs, context)`."""
    name = compiled.get_inputs()[0].name
    wanted = [o.name for o in compiled.get_outputs()[:outputs]]
    for item in items:
        inputs, context = prepare(item)
        consume(tuple(compiled.run(wanted, {name: inputs[0]})), context)


def head_outputs(compiled: ort.InferenceSession, inputs: list[np.ndarray], outputs: int = 1) -> list[tuple]:
    """The first `outputs` outputs of every input (batch item 0)."""
    results: list[tuple] = []
    infer_in_order(compiled, range(len(inputs)), lambda i: ({0: inputs[i]}, None),
                   lambda out, _: results.append(tuple(t[0] for t in out)), outputs)
    return results


def timed_run(path: Path, precision: str, cfg: BenchmarkParams, report_dir: Path, imgsz: int) -> dict:
    """Run the model on one input for `cfg.seconds` after a warm-up: median latency, throughput, iterations.

    One request at a time on ORT's pinned intra-op threads (their count is recorded): the CPU execution provider
    has no streams, so the throughput hint and the latency hint measure the same thing here. The run's numbers go to `report_dir` as benchmark_app's
    report does.
    """
    compiled = session(path, precision)
    feed = {compiled.get_inputs()[0].name: np.random.default_rng(0).random(
        (cfg.batch, 3, imgsz, imgsz), dtype=np.float32)}
    for _ in range(WARMUP_RUNS):
        compiled.run(None, feed)
    latencies: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < cfg.seconds:
        began = time.perf_counter()
        compiled.run(None, feed)
        latencies.append((time.perf_counter() - began) * 1000)
    elapsed = time.perf_counter() - start
    run = {"latency_ms": statistics.median(latencies), "fps": cfg.batch * len(latencies) / elapsed,
           "iterations": len(latencies), "threads": threads_for(None), "onnxruntime_version": ort.__version__}
    write_json(report_dir / "timed_run.json", run)
    return run
