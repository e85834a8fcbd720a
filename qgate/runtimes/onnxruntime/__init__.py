"""ONNX Runtime on its CPU execution provider: the exported ONNX in FP32, a QDQ ONNX in INT8 (NNCF's ONNX backend or
ORT's `quantize_static`, `quantize.quantizer`), timed runs in-process (the `Runtime` protocol)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
import onnxruntime as ort

from qgate.deploy import quantizer_in_force
from qgate.errors import QgateError
from qgate.runtimes import capped_threads, nncf_settings
from qgate.runtimes.onnxruntime import head_graph, inference, ops, quantizer_groups, taps
from qgate.runtimes.onnxruntime.graph import Graph
from qgate.runtimes.onnxruntime.quantizers import QUANTIZERS


class OnnxRuntime:
    """The ONNX Runtime runtime; stateless, so it pickles to Ray workers with a job's payload."""

    name = "onnxruntime"

    def version(self):
        return ort.__version__

    def read(self, path):
        return onnx.load(str(path))

    def save(self, model, path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))

    def model_files(self, path):
        return [Path(path)]

    def from_onnx(self, onnx_path, weights, end2end):
        model = onnx.load(str(onnx_path))
        try:
            inference.session(model, inference.PRECISION)
        except Exception as exc:  # ORT's own error types; the first line names the op it cannot run
            raise QgateError(f"{weights}: ONNX Runtime {self.version()} cannot load the exported ONNX "
                             f"({str(exc).splitlines()[0][:160]})") from None
        return model

    def fingerprint(self, model):
        graph = onnx.GraphProto()
        graph.CopyFrom(model.graph)
        for node in graph.node:
            node.name = ""  # new nodes get numbered names
        return hashlib.sha256(graph.SerializeToString()).hexdigest()

    def input_shape(self, model):
        return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]

    def output_shapes(self, model):
        return [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output]

    def op_inventory(self, model):
        return ops.op_inventory(model)

    def decode_ops(self, model):
        return head_graph.decode_ops(model)

    def output_layers(self, model):
        return head_graph.output_layers(model)

    def quantizer_count(self, model):
        return ops.quantizer_count(model)

    def compile(self, model, precision, hint="THROUGHPUT", threads=None, uint8_input=True, device="CPU"):
        return inference.session(model, precision, capped_threads(threads), hint)

    def measured_precision(self, compiled):
        return inference.PRECISION

    def takes_uint8(self, compiled):
        return False  # no in-graph preprocessing: qgate feeds float NCHW tensors

    def is_compiled(self, model):
        return isinstance(model, ort.InferenceSession)

    def portable(self, model):
        return inference.PortableONNX(model)

    def infer_pipelined(self, compiled, items, prepare, consume, outputs=1):
        inference.infer_in_order(compiled, items, prepare, consume, outputs)

    def head_outputs(self, compiled, inputs, outputs=1):
        return inference.head_outputs(compiled, inputs, outputs)

    def infer(self, compiled, tensor):
        return tuple(compiled.run(None, {compiled.get_inputs()[0].name: tensor}))

    def devices(self):
        return ["CPU"]

    def bf16_supported(self, device):
        return False

    def timed_run(self, path, precision, cfg, report_dir, imgsz):
        return inference.timed_run(Path(path), precision, cfg, report_dir, imgsz)

    def scope_matches(self, model, scope, path):
        from nncf.onnx.graph.nncf_graph_builder import GraphConverter

        return nncf_settings.scope_matches(GraphConverter.create_nncf_graph(model), scope, path)

    def quantize(self, model, calibration, params, by_rule):
        float_names = [*by_rule, *self.scope_matches(model, params.quantize.ignored_scope, params.model.weights)]
        quantizer = QUANTIZERS[quantizer_in_force(self.name, params.quantize.quantizer)]
        return quantizer.quantize(model, calibration, params, float_names, by_rule)

    def precision_table(self, model, ignored):
        return ops.precision_table(model, ignored)

    def quantizer_groups(self, int8):
        return quantizer_groups.quantizer_groups(int8)

    def revert(self, int8, fp32, groups, selected):
        return quantizer_groups.revert(int8, fp32, groups, selected)

    def match_layers(self, fp32, int8, fp32_name, int8_name):
        return taps.match_layers(Graph(fp32), Graph(int8), fp32_name, int8_name)

    def instrument(self, model, keys):
        return taps.instrument(model, keys)

    def activation_quantizers(self, int8):
        return taps.activation_quantizers(Graph(int8))

    def producers(self, model):
        return taps.producers(Graph(model))

    def layer_facts(self, int8):
        return taps.layer_facts(Graph(int8))
