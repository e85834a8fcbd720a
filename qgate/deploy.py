"""The runtimes `deploy.runtime` can name, as qgate knows them without importing them: files, quantizers, words.

`qgate.runtimes` loads one; this table is what params checks, model paths and the report read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Description:
    """What qgate knows of a runtime without importing it: its files, quantizers and words."""

    title: str
    model_suffix: str  # of the file a model is saved to
    weights_suffix: str  # of the file holding its weights (hashed as the model's identity)
    quantizers: tuple[str, ...]  # `quantize.quantizer` values it takes, the one `default` means first
    quantizer_ops: str  # what its INT8 model's quantizers are called
    timer: str  # what times a run for the speed gate


RUNTIMES = {
    "openvino": Description("OpenVINO", ".xml", ".bin", ("nncf",), "FakeQuantize ops", "`benchmark_app`"),
    "onnxruntime": Description("ONNX Runtime", ".onnx", ".onnx", ("onnxruntime", "nncf"), "Q/DQ pairs",
                               "ONNX Runtime sessions timed in-process"),
}


def quantizer_in_force(runtime: str, quantizer: str) -> str:
    """The quantizer `quantize.quantizer` means on `runtime` (`default`: the runtime's own)."""
    return RUNTIMES[runtime].quantizers[0] if quantizer == "default" else quantizer
