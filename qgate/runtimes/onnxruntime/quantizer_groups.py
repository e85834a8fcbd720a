"""Mixed precision by graph surgery on a QDQ ONNX model: put chosen quantizer groups back in float.

A group is a set of activation Q/DQ pairs with every op reading them (`qgate.groups.joined_by_readers`). Reverting
one makes its readers read the pair's float input, and gives its weighted readers the FP32 model's weights and bias
back (NNCF's bias correction changed the bias; ORT's quantizer stored both in int8): what the quantizer produces
when those ops are excluded, up to its neighbours' bias correction. With every group reverted, the model computes
the FP32 model's output.
"""

from __future__ import annotations

import onnx

from qgate.groups import Group, joined_by_readers
from qgate.runtimes.onnxruntime.graph import NOT_LAYERS, Graph


def quantizer_groups(int8: onnx.ModelProto) -> list[Group]:
    """The activation QuantizeLinear ops joined by shared readers, in graph order, with their ops."""
    graph = Graph(int8)
    readers: dict[str, list[str]] = {}
    weighted: set[str] = set()
    for node in graph.nodes:
        if node.op_type in NOT_LAYERS:
            continue
        quantizers = list(dict.fromkeys(q.name for q in graph.input_quantizers(node)))
        if quantizers:
            readers[node.name] = quantizers
            if graph.weight_input(node) is not None and graph.weights_int8(node):
                weighted.add(node.name)
    return joined_by_readers(readers, weighted)


def revert(int8: onnx.ModelProto, fp32: onnx.ModelProto, groups: list[Group], selected: set[int]) -> onnx.ModelProto:
    """A copy of `int8` with the `selected` groups back in float: a real mixed-precision model."""
    model = onnx.ModelProto()
    model.CopyFrom(int8)
    graph, reference = Graph(model), Graph(fp32)
    for index in sorted(selected):
        for name in groups[index].weighted:
            _restore_float_inputs(model, graph.by_name[name], reference)
    bypass(model, graph, {name for index in selected for name in groups[index].quantizers})
    return model


def bypass(model: onnx.ModelProto, graph: Graph, quantizers: set[str]) -> None:
    """Make every reader of these QuantizeLinear ops' Q -> DQ pairs read the float tensor they quantize, and drop
    what nothing reads any more."""
    floats: dict[str, str] = {}  # a dequantized tensor -> the float tensor its Q/DQ pair quantized
    for name in quantizers:
        quantize = graph.by_name[name]
        for dequantize in graph.readers.get(quantize.output[0], []):
            floats[dequantize.output[0]] = quantize.input[0]
    for node in model.graph.node:
        for i, tensor in enumerate(node.input):
            if tensor in floats:
                node.input[i] = floats[tensor]
    _drop_unread(model)


def _restore_float_inputs(model: onnx.ModelProto, node: onnx.NodeProto, reference: Graph) -> None:
    """The FP32 model's weights (and bias) for `node`, as initializers of this model's own."""
    twin = reference.by_name.get(node.name)
    if twin is None:
        return
    for i in range(1, min(len(node.input), len(twin.input))):
        value = reference.initializers.get(twin.input[i])
        if value is None:
            continue
        restored = onnx.TensorProto()
        restored.CopyFrom(value)
        restored.name = f"{twin.input[i]}_qgate_float"
        if all(t.name != restored.name for t in model.graph.initializer):
            model.graph.initializer.append(restored)
        node.input[i] = restored.name


def _drop_unread(model: onnx.ModelProto) -> None:
    """Remove nodes and initializers nothing reads any more (the bypassed Q/DQ pairs, replaced int8 weights)."""
    outputs = {o.name for o in model.graph.output}
    while True:
        read = {t for node in model.graph.node for t in node.input} | outputs
        unread = [n for n in model.graph.node if not any(t in read for t in n.output)]
        if not unread:
            break
        for node in unread:
            model.graph.node.remove(node)
    read = {t for node in model.graph.node for t in node.input}
    kept = [t for t in model.graph.initializer if t.name in read]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
