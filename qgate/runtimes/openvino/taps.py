"""OpenVINO taps for divergence: every layer output of an IR as a model output, matched between FP32 and INT8,
the activation FakeQuantize ops with their ranges, and which outputs each op reads."""

from __future__ import annotations

import openvino as ov

from qgate.divergence import NETWORK_INPUT, LayerFacts, QuantizerStats, matched_keys
from qgate.errors import QgateError
from qgate.runtimes.openvino.ops import has_weights, upstream_quantizers, weight_quantizer

NON_TENSOR_TYPES = {"Constant", "Parameter", "Result", "FakeQuantize", "ShapeOf"}


def layer_keys(model: ov.Model) -> list[tuple[str, int]]:
    """(friendly name, output port) of every real-valued op output, in topological order."""
    keys = []
    for op in model.get_ordered_ops():
        if op.get_type_name() in NON_TENSOR_TYPES:
            continue
        for port in range(op.get_output_size()):
            if op.get_output_element_type(port).is_real():
                keys.append((op.get_friendly_name(), port))
    return keys


def instrument(model: ov.Model, keys: list[tuple[str, int]]) -> ov.Model:
    """A model whose outputs are the given op outputs, first the original outputs, then `keys`."""
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    outputs = [r.input_value(0) for r in model.get_results()] + [ops[name].output(port) for name, port in keys]
    return ov.Model(outputs, model.get_parameters(), "instrumented")


def match_layers(fp32: ov.Model, int8: ov.Model, fp32_name: str, int8_name: str) -> list[tuple[str, int]]:
    """FP32 layer keys that the INT8 graph also has; error when the two come from different exports."""
    matched = matched_keys(layer_keys(fp32), layer_keys(int8), fp32_name, int8_name)
    # same family, same op names, another model (other class count or input size): names match, shapes do not
    fp32_shapes, int8_shapes = _output_shapes(fp32), _output_shapes(int8)
    differing = next((key for key in matched if fp32_shapes[key] != int8_shapes[key]), None)
    if differing:
        raise QgateError(f"{int8_name}: layer {differing[0]} has shape {int8_shapes[differing]} but "
                         f"{fp32_shapes[differing]} in {fp32_name}; the two IRs come from different models, "
                         "re-run `dvc repro quantize`")
    return matched


def _output_shapes(model: ov.Model) -> dict[tuple[str, int], str]:
    return {(op.get_friendly_name(), port): str(op.get_output_partial_shape(port))
            for op in model.get_ordered_ops() for port in range(op.get_output_size())}


def activation_quantizers(int8: ov.Model) -> dict[tuple[str, int], QuantizerStats]:
    """Activation FakeQuantize ops keyed by the (name, port) they read, with their ranges and consumers."""
    found = {}
    for op in int8.get_ordered_ops():
        if op.get_type_name() != "FakeQuantize":
            continue
        source = op.input_value(0)
        if source.get_node().get_type_name() == "Constant":
            continue  # a weight quantizer
        bounds = [op.input_value(i).get_node().get_data() for i in (1, 2)]
        stats = QuantizerStats(low=bounds[0], high=bounds[1], levels=op.get_attributes()["levels"],
                               name=op.get_friendly_name())
        stats.consumers = sorted(t.get_node().get_friendly_name() for t in op.output(0).get_target_inputs())  # a set
        reads_input = source.get_node().get_type_name() == "Parameter"
        found[NETWORK_INPUT if reads_input else (source.get_node().get_friendly_name(), source.get_index())] = stats
    return found


def producers(model: ov.Model) -> dict[str, list[tuple[str, int]]]:
    """For each op, the (name, port) outputs it reads, skipping constants and looking through FakeQuantize."""
    result = {}
    for op in model.get_ordered_ops():
        inputs = []
        for i in range(op.get_input_size()):
            value = op.input_value(i)
            while value.get_node().get_type_name() in {"FakeQuantize", "Convert"}:
                value = value.get_node().input_value(0)
            if value.get_node().get_type_name() not in {"Constant"}:
                inputs.append((value.get_node().get_friendly_name(), value.get_index()))
        result[op.get_friendly_name()] = inputs
    return result


def layer_facts(int8: ov.Model) -> dict[str, LayerFacts]:
    """Each INT8 op's type, the activation quantizers its inputs read and whether its weights are int8."""
    facts = {}
    for op in int8.get_ordered_ops():
        weighted = has_weights(op)
        quantizers = tuple(fq.get_friendly_name() for i in range(op.get_input_size()) if not (weighted and i == 1)
                           for fq in upstream_quantizers(op.input_value(i).get_node()))
        facts[op.get_friendly_name()] = LayerFacts(op.get_type_name(), quantizers, weighted and weight_quantizer(
            op.input_value(1).get_node()) is not None)
    return facts
