"""OpenVINO on its CPU plugin: IRs, NNCF's FakeQuantize INT8, `benchmark_app` for speed (the `Runtime` protocol)."""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

import openvino as ov

from qgate.errors import QgateError
from qgate.io import sha256_file
from qgate.runtimes import capped_threads, nncf_settings
from qgate.runtimes.openvino import benchmark_app, head_graph, inference, ops, quantizer_groups, taps


class OpenVINO:
    """The OpenVINO runtime; stateless, so it pickles to Ray workers with a job's payload."""

    name = "openvino"

    def version(self) -> str:
        return ov.get_version().split("-")[0]

    def read(self, path):
        return ov.Core().read_model(str(path))

    def save(self, model, path):
        ov.save_model(model, path, compress_to_fp16=False)  # the default would halve the weights to FP16

    def model_files(self, path):
        return [Path(path).with_suffix(".xml"), Path(path).with_suffix(".bin")]

    def from_onnx(self, onnx_path, weights, end2end):
        try:
            return ov.convert_model(onnx_path)
        except RuntimeError as exc:
            reason = next((line.strip() for line in str(exc).splitlines() if "Shapes" in line or "not" in line),
                          str(exc).splitlines()[0])
            fix = ("set export.end2end: false (OpenVINO cannot convert this NMS-free head's top-K, e.g. YOLO26-seg's "
                   "masks)" if end2end else "this model's export does not convert; report its model yaml")
            raise QgateError(f"{weights}: OpenVINO {self.version()} cannot convert the exported ONNX "
                             f"({reason[:160]}); {fix}") from None

    def fingerprint(self, model):
        # op names and the IR's runtime info left out: new ops get numbered names, and NNCF writes the settings it
        # was called with into the runtime info
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.xml"
            self.save(model, path)
            graph = re.sub(r'<rt_info>.*?</rt_info>| name="[^"]*"', "", path.read_text(), flags=re.DOTALL)
            return hashlib.sha256(graph.encode()).hexdigest() + sha256_file(path.with_suffix(".bin"))

    def input_shape(self, model):
        return [int(d) for d in model.inputs[0].get_shape()]

    def output_shapes(self, model):
        return [[int(d) for d in output.get_shape()] for output in model.outputs]

    def op_inventory(self, model):
        return ops.op_inventory(model)

    def quantizer_count(self, model):
        return ops.fake_quantize_count(model)

    def compile(self, model, precision, hint="THROUGHPUT", threads=None, uint8_input=True, device=inference.DEVICE):
        return inference.compile_model(model, precision, hint, capped_threads(threads), uint8_input, device)

    def measured_precision(self, compiled):
        return inference.measured_precision(compiled)

    def takes_uint8(self, compiled):
        return compiled.input(0).get_element_type() == ov.Type.u8  # compile's in-graph preprocessing

    def is_compiled(self, model):
        return isinstance(model, ov.CompiledModel)

    def portable(self, model):
        return inference.PortableModel(model)

    def infer_pipelined(self, compiled, items, prepare, consume, outputs=1):
        inference.infer_pipelined(compiled, items, prepare, consume, outputs)

    def head_outputs(self, compiled, inputs, outputs=1):
        return inference.head_outputs(compiled, inputs, outputs)

    def infer(self, compiled, tensor):
        # share_outputs: views of the request's own buffers; copies would double the peak memory at 640 px
        return compiled(tensor, share_outputs=True).to_tuple()

    def devices(self):
        return list(ov.Core().available_devices)

    def bf16_supported(self, device):
        return "BF16" in ov.Core().get_property(device, "OPTIMIZATION_CAPABILITIES")

    def timed_run(self, path, precision, cfg, report_dir, imgsz):
        return benchmark_app.run_benchmark_app(Path(path), precision, cfg, report_dir, imgsz)

    def scope_matches(self, model, scope, path):
        from nncf.openvino.graph.nncf_graph_builder import GraphConverter

        return nncf_settings.scope_matches(GraphConverter.create_nncf_graph(model), scope, path)

    def quantize(self, model, calibration, params, by_rule):
        return nncf_settings.quantize(model, calibration, params, by_rule)

    def precision_table(self, model, ignored):
        return ops.precision_table(model, ignored)

    def quantizer_groups(self, int8):
        return quantizer_groups.quantizer_groups(int8)

    def revert(self, int8, fp32, groups, selected):
        return quantizer_groups.revert(int8, fp32, groups, selected)

    def match_layers(self, fp32, int8, fp32_name, int8_name):
        return taps.match_layers(fp32, int8, fp32_name, int8_name)

    def instrument(self, model, keys):
        return taps.instrument(model, keys)

    def activation_quantizers(self, int8):
        return taps.activation_quantizers(int8)

    def producers(self, model):
        return taps.producers(model)

    def layer_facts(self, int8):
        return taps.layer_facts(int8)

    def decode_ops(self, model):
        return head_graph.decode_ops(model)

    def output_layers(self, model):
        return head_graph.output_layers(model)
