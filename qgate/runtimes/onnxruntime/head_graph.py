"""The head decode of an ONNX graph: the nodes every output depends on without crossing a learned layer, and the
learned layers where that walk stops (`qgate.heads` says why the decode is found from the graph)."""

from __future__ import annotations

import onnx

from qgate.runtimes.onnxruntime.graph import DEQUANTIZE, QUANTIZE, Graph

NOT_COMPUTED = {"Constant", QUANTIZE, DEQUANTIZE}


def decode_ops(model: onnx.ModelProto) -> list[str]:
    """Names of the head decode's nodes, in graph order."""
    graph = Graph(model)
    return _in_graph_order(graph, _walk_head(graph)[0])


def output_layers(model: onnx.ModelProto) -> list[str]:
    """Names of the learned layers the head decode starts from, in graph order."""
    graph = Graph(model)
    return _in_graph_order(graph, _walk_head(graph)[1])


def _walk_head(graph: Graph) -> tuple[set[str], set[str]]:
    """(decode nodes, output layers): walk back from every output until a learned layer."""
    inside: set[str] = set()
    frontier: set[str] = set()
    stack = [graph.source(output.name) for output in graph.model.graph.output]
    while stack:
        node = stack.pop()
        if node is None or node.name in inside or node.op_type in NOT_COMPUTED:
            if node is not None and node.op_type in (QUANTIZE, DEQUANTIZE):
                stack.append(graph.source(node.input[0]))
            continue
        if graph.learned(node) or _bias_of_learned(graph, node):
            frontier.add(node.name if graph.learned(node) else graph.source(node.input[0]).name)
            continue
        inside.add(node.name)
        stack += [graph.source(t) for t in node.input if t]
    return inside, frontier


def _bias_of_learned(graph: Graph, node: onnx.NodeProto) -> bool:
    """The Add of a bias after a MatMul (a Conv or Gemm holds its own)."""
    if node.op_type != "Add":
        return False
    first = graph.source(node.input[0])
    return first is not None and graph.learned(first) and graph.constant(node.input[1]) is not None


def _in_graph_order(graph: Graph, names: set[str]) -> list[str]:
    return [node.name for node in graph.nodes if node.name in names]
