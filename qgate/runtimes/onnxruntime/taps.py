"""ONNX taps for divergence, the way ONNX Runtime's `qdq_loss_debug` pairs tensors: every float node output of the
FP32 model and its twin in the QDQ model (same node name; the QDQ model's value is what its DequantizeLinear
inputs compute), the activation Q/DQ pairs with their ranges, and what each node reads."""

from __future__ import annotations

import onnx

from qgate.divergence import NETWORK_INPUT, LayerFacts, QuantizerStats, matched_keys
from qgate.runtimes.onnxruntime.graph import NOT_LAYERS, Graph
from qgate.runtimes.onnxruntime.ops import quantizer_range


def layer_keys(graph: Graph) -> list[tuple[str, int]]:
    """(node name, output port) of every float node output, in topological order."""
    return [(node.name, port) for node in graph.nodes if node.op_type not in NOT_LAYERS
            for port, tensor in enumerate(node.output) if tensor in graph.float_values]


def instrument(model: onnx.ModelProto, keys: list[tuple[str, int]]) -> onnx.ModelProto:
    """A copy whose outputs are its own, then each key's tensor (through an Identity: a tensor can be a graph
    output once, and the model's last node's output already is)."""
    tapped = onnx.ModelProto()
    tapped.CopyFrom(model)
    nodes = {node.name: node for node in tapped.graph.node}
    for index, (name, port) in enumerate(keys):
        tap = f"qgate_tap_{index}"
        tapped.graph.node.append(onnx.helper.make_node("Identity", [nodes[name].output[port]], [tap], name=tap))
        tapped.graph.output.append(onnx.helper.make_tensor_value_info(tap, onnx.TensorProto.FLOAT, None))
    return tapped


def match_layers(fp32: Graph, int8: Graph, fp32_name: str, int8_name: str) -> list[tuple[str, int]]:
    """FP32 layer keys the QDQ graph also has; an error when the two come from different exports."""
    return matched_keys(layer_keys(fp32), layer_keys(int8), fp32_name, int8_name)


def activation_quantizers(int8: Graph) -> dict[tuple[str, int], QuantizerStats]:
    """Activation Q/DQ pairs keyed by the (name, port) output they quantize, with their ranges and readers."""
    found, inputs = {}, {i.name for i in int8.model.graph.input}
    for quantize in int8.nodes:
        if quantize.op_type != "QuantizeLinear" or int8.constant(quantize.input[0]) is not None:
            continue  # not a quantizer, or a weight's
        source = int8.real_source(quantize.input[0])
        if source is None and quantize.input[0] in inputs:
            source = NETWORK_INPUT
        if source is None:
            continue
        low, high, levels = quantizer_range(int8, quantize)
        stats = QuantizerStats(low=low, high=high, levels=levels, name=quantize.name)
        stats.consumers = [reader.name for dequantize in int8.readers.get(quantize.output[0], [])
                           for reader in int8.readers.get(dequantize.output[0], [])]
        found[source] = stats
    return found


def producers(graph: Graph) -> dict[str, list[tuple[str, int]]]:
    """For each node, the (name, port) outputs it reads, skipping constants and looking through Q/DQ pairs."""
    return {node.name: [s for s in (graph.real_source(t) for t in node.input if t) if s is not None]
            for node in graph.nodes}


def layer_facts(int8: Graph) -> dict[str, LayerFacts]:
    """Each QDQ node's type, the activation quantizers its inputs read and whether its weights are int8."""
    return {node.name: LayerFacts(node.op_type, tuple(q.name for q in int8.input_quantizers(node)),
                                  int8.weight_input(node) is not None and int8.weights_int8(node))
            for node in int8.nodes}
