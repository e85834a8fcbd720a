"""The two quantizers an ONNX Runtime user has: NNCF's ONNX backend (the `quantize:` settings OpenVINO's quantizer
takes) and ONNX Runtime's own `quantize_static` (`quantize.onnxruntime:`); both write a QDQ model."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from qgate.calibration import Calibration
from qgate.params import Params
from qgate.runtimes import nncf_settings
from qgate.runtimes.onnxruntime.graph import QUANTIZE, Graph
from qgate.runtimes.onnxruntime.quantizer_groups import bypass


class NNCF:
    """NNCF's ONNX backend: the same presets, range estimators, bias correction and ignored scope as for OpenVINO."""

    name = "nncf"

    def quantize(self, model: onnx.ModelProto, calibration: Calibration, params: Params, float_names: list[str],
                 by_rule: list[str]) -> onnx.ModelProto:
        """The QDQ model; NNCF matches the ignored scope itself (`float_names` are what it will match)."""
        name = model.graph.input[0].name
        return nncf_settings.quantize(model, calibration, params, by_rule, lambda tensor: {name: tensor})


class OnnxRuntime:
    """`onnxruntime.quantization.quantize_static`: QDQ, uint8 activations and int8 weights (its defaults),
    `quantize.onnxruntime.calibrate_method`, `per_channel` and `op_types`, every float op in `nodes_to_exclude`."""

    name = "onnxruntime"

    def quantize(self, model: onnx.ModelProto, calibration: Calibration, params: Params, float_names: list[str],
                 by_rule: list[str]) -> onnx.ModelProto:
        """The QDQ model, `float_names` (the rules' ops and every op the ignored scope matches) excluded."""
        from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                              quantize_static)

        cfg = params.quantize.onnxruntime
        name = model.graph.input[0].name

        class Images(CalibrationDataReader):
            def __init__(self):
                self.paths = iter(calibration.images)

            def get_next(self):
                path = next(self.paths, None)
                return None if path is None else {name: calibration.tensor(path)}

        method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                  "percentile": CalibrationMethod.Percentile, "distribution": CalibrationMethod.Distribution}
        with tempfile.TemporaryDirectory() as folder:
            source, output = Path(folder) / "model_fp32.onnx", Path(folder) / "model_int8.onnx"
            onnx.save(model, str(source))  # given the ModelProto, quantize_static moves its weights to a file
            quantize_static(source, output, Images(), quant_format=QuantFormat.QDQ, per_channel=cfg.per_channel,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            nodes_to_exclude=list(float_names), calibrate_method=method[cfg.calibrate_method],
                            op_types_to_quantize=list(cfg.op_types) or None)
            return _float_inputs_for(onnx.load(str(output)), set(float_names))


def _float_inputs_for(model: onnx.ModelProto, float_names: set[str]) -> onnx.ModelProto:
    """Remove the Q/DQ pairs only excluded ops read. quantize_static quantizes a Conv's output for its own int8
    kernel whoever reads it, so a head decode kept float would still read the output layer's rounded values."""
    graph = Graph(model)
    only_float = {quantize.name for quantize in graph.nodes if quantize.op_type == QUANTIZE
                  and graph.constant(quantize.input[0]) is None
                  and all(reader.name in float_names for dequantize in graph.readers.get(quantize.output[0], [])
                          for reader in graph.readers.get(dequantize.output[0], []))}
    bypass(model, graph, only_float)
    return model


QUANTIZERS = {quantizer.name: quantizer for quantizer in (NNCF(), OnnxRuntime())}
