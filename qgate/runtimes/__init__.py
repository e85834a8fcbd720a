"""The runtime a model is judged on, behind one protocol: stages, gates and the report ask it, never its library.

A runtime loads and saves models, compiles them at an explicit precision and runs images through them, times a run
for the speed gate, quantizes with a float scope, lists its quantizer groups and reverts them, says which op runs
in which precision, and taps every layer's output for divergence. `deploy.runtime` names it; each lives in its
own package here, imported only when asked for (Ultralytics' AutoBackend and NNCF's per-backend folders do the
same).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from qgate.errors import QgateError

if TYPE_CHECKING:
    from qgate.calibration import Calibration
    from qgate.divergence import LayerFacts, QuantizerStats
    from qgate.groups import Group
    from qgate.params import BenchmarkParams, IgnoredScopeParams, Params


THREADS_VARIABLE = "QGATE_THREADS"  # caps each process's inference threads: a machine shared with other jobs

# name -> "module:Class", imported when the runtime is asked for (`qgate.deploy` describes each without importing it)
IMPLEMENTATIONS = {"openvino": "qgate.runtimes.openvino:OpenVINO",
                   "onnxruntime": "qgate.runtimes.onnxruntime:OnnxRuntime"}


class Runtime(Protocol):
    """What qgate asks of a runtime. Models are the runtime's own graph objects; paths are its files."""

    name: str

    def version(self) -> str:
        """The runtime library's version, for the report and provenance."""

    # models
    def read(self, path: Path) -> Any:
        """The model saved at `path`."""

    def save(self, model: Any, path: Path) -> None:
        """Save `model` to `path` with full-precision weights."""

    def model_files(self, path: Path) -> list[Path]:
        """Every file the model saved at `path` consists of (to copy it whole), the weights file last."""

    def from_onnx(self, onnx_path: Path, weights: str | Path, end2end: bool) -> Any:
        """The exported ONNX as this runtime's FP32 model; a one-line error naming `weights` when it cannot."""

    def fingerprint(self, model: Any) -> str:
        """A hash of the model's graph and weights that two quantizations giving the same model share."""

    def input_shape(self, model: Any) -> list[int]:
        """The static shape of the model's image input."""

    def output_shapes(self, model: Any) -> list[list[int]]:
        """The static shape of every output, in order."""

    def op_inventory(self, model: Any) -> dict:
        """Op counts by type and the names of the computing ops."""

    def decode_ops(self, model: Any) -> list[str]:
        """The head decode's op names, in graph order (`qgate.heads` says what the decode is)."""

    def output_layers(self, model: Any) -> list[str]:
        """The learned layers the head decode starts from, in graph order."""

    def quantizer_count(self, model: Any) -> int:
        """How many quantizers the INT8 model holds."""

    # inference
    def compile(self, model: Any, precision: str, hint: str = "THROUGHPUT", threads: int | None = None,
                uint8_input: bool = True, device: str = "CPU") -> Any:
        """The model ready to run, float layers at `precision`; `uint8_input`: letterboxed uint8 BGR HWC images."""

    def measured_precision(self, compiled: Any) -> str:
        """The precision the compiled model's float layers actually run in."""

    def takes_uint8(self, compiled: Any) -> bool:
        """Whether the compiled model takes uint8 HWC images (else float NCHW tensors)."""

    def is_compiled(self, model: Any) -> bool:
        """Whether `model` is already compiled (it then runs as it is, in this process only)."""

    def portable(self, model: Any) -> Any:
        """A handle of `model` (path or graph) that pickles, so it travels to a remote worker; `.load()` gives it."""

    def infer_pipelined(self, compiled: Any, items, prepare, consume, outputs: int = 1) -> None:
        """Infer every item in order: `prepare(item)` -> (inputs, context), `consume(outputs, context)`."""

    def head_outputs(self, compiled: Any, inputs: list, outputs: int = 1) -> list[tuple]:
        """The first `outputs` outputs of every input (batch item 0), copied."""

    def infer(self, compiled: Any, tensor: Any) -> tuple:
        """Every output of one input, as views valid until the next call."""

    # speed
    def devices(self) -> list[str]:
        """The devices this runtime can run on here."""

    def bf16_supported(self, device: str) -> bool:
        """Whether float layers can run in BF16 on `device`."""

    def timed_run(self, path: Path, precision: str, cfg: BenchmarkParams, report_dir: Path, imgsz: int) -> dict:
        """One timed run of the saved model: latency_ms (median), fps and iterations."""

    # quantization
    def scope_matches(self, model: Any, scope: IgnoredScopeParams, path: Path) -> dict[str, str]:
        """Op name -> the ignored-scope entry that keeps it float; an entry matching nothing is an error."""

    def quantize(self, model: Any, calibration: Calibration, params: Params, by_rule: list[str]) -> Any:
        """The INT8 model from `quantize.quantizer` calibrated on `calibration`, `by_rule` ops and the ignored scope
        kept float."""

    def precision_table(self, model: Any, ignored: dict[str, str]) -> list[dict]:
        """One row per quantizable op: its precision and why (`qgate.precision.PRECISION_COLUMNS`)."""

    def quantizer_groups(self, int8: Any) -> list[Group]:
        """The INT8 model's quantizer groups, in graph order."""

    def revert(self, int8: Any, fp32: Any, groups: list[Group], selected: set[int]) -> Any:
        """A copy of `int8` with the `selected` groups back in float."""

    # divergence taps
    def match_layers(self, fp32: Any, int8: Any, fp32_name: str, int8_name: str) -> list[tuple[str, int]]:
        """The (name, port) layer outputs both models have; an error when they come from different exports."""

    def instrument(self, model: Any, keys: list[tuple[str, int]]) -> Any:
        """The model with the `keys` outputs added after its own outputs."""

    def activation_quantizers(self, int8: Any) -> dict[tuple[str, int], QuantizerStats]:
        """Activation quantizers keyed by the (name, port) output they read, with their ranges."""

    def producers(self, model: Any) -> dict[str, list[tuple[str, int]]]:
        """For each op, the (name, port) outputs it reads, through quantizers."""

    def layer_facts(self, int8: Any) -> dict[str, LayerFacts]:
        """Each INT8 op's type, input quantizers and whether its weights are int8."""


def runtime_named(name: str) -> Runtime:
    """The runtime `deploy.runtime` names (its library is imported now, not before)."""
    module, cls = IMPLEMENTATIONS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def runtime_for(params: Params) -> Runtime:
    """The runtime the params deploy to."""
    return runtime_named(params.deploy.runtime)


def capped_threads(threads: int | None) -> int | None:
    """The CPU threads a compiled model may use: `threads` when the caller sets them (a Ray worker's CPU share),
    else $QGATE_THREADS when set (a machine shared with other jobs, such as the test suite's parallel lanes), else
    None: the runtime's own default, every core."""
    if threads:
        return threads
    value = os.environ.get(THREADS_VARIABLE, "")
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise QgateError(f"{THREADS_VARIABLE}={value}: a positive number of CPU threads per model, or unset it")
    return int(value)
