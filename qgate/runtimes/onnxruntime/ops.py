"""What a QDQ ONNX model runs in int8: the op inventory, its quantizers and the per-op precision table."""

from __future__ import annotations

import collections

import onnx

from qgate.runtimes.onnxruntime.graph import DEQUANTIZE, QUANTIZE, Graph

ACTIVATION_TYPES = {"Add", "Sub", "Mul", "Div", "Concat", "MaxPool", "AveragePool", "Resize"}
INVENTORY_SKIPPED = {"Constant", QUANTIZE, DEQUANTIZE}  # Q/DQ pairs are counted apart (`quantizer_count`)


def op_inventory(model: onnx.ModelProto) -> dict:
    """Op counts by type and the names of the computing ops of an ONNX model (its quantizers aside)."""
    nodes = [n for n in model.graph.node if n.op_type not in INVENTORY_SKIPPED]
    return {
        "ir_op_count": len(nodes),
        "ir_op_types": dict(sorted(collections.Counter(n.op_type for n in nodes).items())),
        "ir_op_names": sorted(n.name for n in nodes),
    }


def quantizer_count(model: onnx.ModelProto) -> int:
    """The Q/DQ pairs (QuantizeLinear ops) in the model: how much of it runs in INT8."""
    return sum(node.op_type == QUANTIZE for node in model.graph.node)


def precision_table(model: onnx.ModelProto, ignored: dict[str, str]) -> list[dict]:
    """One row per weighted or activation-quantizable op of a QDQ model, in graph order."""
    graph = Graph(model)
    rows = []
    for node in graph.nodes:
        if node.op_type in INVENTORY_SKIPPED:
            continue
        weighted = graph.weight_input(node) is not None
        quantizers = graph.input_quantizers(node)
        weights_int8 = weighted and graph.weights_int8(node)
        with_constant = node.op_type in ACTIVATION_TYPES and any(graph.constant(t) is not None for t in node.input)
        if not (weighted or quantizers or node.name in ignored or
                (node.op_type in ACTIVATION_TYPES and not with_constant)):
            continue
        quantized = bool(quantizers or weights_int8)
        low, high, levels = _range(graph, quantizers)
        rows.append({
            "index": len(rows), "name": node.name, "type": node.op_type, "precision": "int8" if quantized else "float",
            "activations_int8": int(bool(quantizers)), "weights_int8": int(weights_int8),
            "why": ignored.get(node.name) or ("quantized" if quantized else f"not quantized ({node.op_type} here)"),
            "act_input_low": low, "act_input_high": high, "act_levels": levels,
            "weight_levels": 256 if weights_int8 else "",
        })
    return rows


def quantizer_range(graph: Graph, quantize: onnx.NodeProto):
    """(low, high, levels) a QuantizeLinear represents: its integer range, dequantized."""
    scale = graph.constant(quantize.input[1])
    zero = graph.constant(quantize.input[2]) if len(quantize.input) > 2 and quantize.input[2] else None
    signed = zero is not None and zero.dtype.kind == "i"
    zero = 0 if zero is None else zero.astype("float64")
    lowest, highest = (-128, 127) if signed else (0, 255)
    return (lowest - zero) * scale, (highest - zero) * scale, 256


def _range(graph: Graph, quantizers: list) -> tuple:
    if not quantizers:
        return "", "", ""
    bounds = [quantizer_range(graph, q) for q in quantizers]
    return (round(float(min(b[0].min() for b in bounds)), 6), round(float(max(b[1].max() for b in bounds)), 6),
            256)
