"""An ONNX graph as ONNX Runtime's QDQ models need it read: nodes by name, who produces and reads each tensor,
constants, learned layers, and the QuantizeLinear -> DequantizeLinear pairs that make an op run in int8."""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import numpy_helper

QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
WEIGHTED_TYPES = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
# ops that only move int8 values: a quantizer before one stands for each of its readers (as NNCF places them)
INT8_TRANSPARENT_TYPES = {"Split", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "MaxPool", "Concat", "Slice"}
NOT_LAYERS = {QUANTIZE, DEQUANTIZE, "Constant", "Shape", "Cast"}


class Graph:
    """Index of one ONNX model's graph (its nodes are in topological order, as ONNX requires)."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.nodes = list(model.graph.node)
        self.by_name = {node.name: node for node in self.nodes}
        self.producer: dict[str, tuple[onnx.NodeProto, int]] = {}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.nodes:
            for port, tensor in enumerate(node.output):
                self.producer[tensor] = (node, port)
            for tensor in node.input:
                self.readers.setdefault(tensor, []).append(node)
        self.initializers = {t.name: t for t in model.graph.initializer}

    @functools.cached_property
    def float_values(self) -> set[str]:
        """Names of the float tensors (ONNX shape inference: only the divergence taps need it, and it is the
        costliest part of reading a graph; sensitivity reads two per quantizer group)."""
        return _float_values(self.model)

    def constant(self, tensor: str) -> np.ndarray | None:
        """The value of an initializer or Constant node output; None for a computed tensor."""
        if tensor in self.initializers:
            return numpy_helper.to_array(self.initializers[tensor])
        node = self.producer.get(tensor, (None, 0))[0]
        if node is not None and node.op_type == "Constant":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def source(self, tensor: str) -> onnx.NodeProto | None:
        """The node producing `tensor`; None for a graph input or an initializer."""
        return self.producer.get(tensor, (None, 0))[0]

    def weight_input(self, node: onnx.NodeProto) -> str | None:
        """A weighted op's weight tensor when it is a constant, possibly behind a DequantizeLinear; else None
        (attention's MatMul of two activations has no weights)."""
        if node.op_type not in WEIGHTED_TYPES or len(node.input) < 2:
            return None
        tensor = node.input[1]
        dequantize = self.source(tensor)
        if dequantize is not None and dequantize.op_type == DEQUANTIZE:
            quantize = self.source(dequantize.input[0])
            tensor = quantize.input[0] if quantize is not None and quantize.op_type == QUANTIZE else \
                dequantize.input[0]
        return tensor if self.constant(tensor) is not None else None

    def weights_int8(self, node: onnx.NodeProto) -> bool:
        """Whether a weighted op reads its weights through a DequantizeLinear."""
        dequantize = self.source(node.input[1]) if self.weight_input(node) else None
        return dequantize is not None and dequantize.op_type == DEQUANTIZE

    def activation_quantizer(self, tensor: str) -> onnx.NodeProto | None:
        """The QuantizeLinear of the Q -> DQ pair whose DequantizeLinear produces `tensor` (an activation's)."""
        dequantize = self.source(tensor)
        if dequantize is None or dequantize.op_type != DEQUANTIZE:
            return None
        quantize = self.source(dequantize.input[0])
        if quantize is None or quantize.op_type != QUANTIZE or self.constant(quantize.input[0]) is not None:
            return None
        return quantize

    def upstream_quantizers(self, tensor: str) -> list[onnx.NodeProto]:
        """The activation quantizers feeding `tensor` through ops that keep int8; empty when any path reaches a
        float op first."""
        quantize = self.activation_quantizer(tensor)
        if quantize is not None:
            return [quantize]
        node = self.source(tensor)
        if node is None or node.op_type not in INT8_TRANSPARENT_TYPES:
            return []
        inputs = node.input if node.op_type == "Concat" else node.input[:1]
        found = [self.upstream_quantizers(t) for t in inputs]
        return [q for quantizers in found for q in quantizers] if all(found) else []

    def activation_inputs(self, node: onnx.NodeProto) -> list[str]:
        """The tensors a node reads that are not its constant weights or bias."""
        weighted = self.weight_input(node) is not None
        return [t for i, t in enumerate(node.input) if t and not (weighted and i >= 1)
                and self.constant(t) is None]

    def input_quantizers(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The activation quantizers a node's inputs come through."""
        return [q for t in self.activation_inputs(node) for q in self.upstream_quantizers(t)]

    def real_source(self, tensor: str) -> tuple[str, int] | None:
        """(node name, port) of the op computing `tensor`, looking through Q -> DQ pairs; None for constants and
        graph inputs."""
        node = self.source(tensor)
        while node is not None and node.op_type in (QUANTIZE, DEQUANTIZE):
            tensor = node.input[0]
            node = self.source(tensor)
        if node is None or node.op_type == "Constant":
            return None
        return node.name, list(node.output).index(tensor)

    def learned(self, node: onnx.NodeProto) -> bool:
        """A layer with trained weights: not DFL's fixed 0..reg_max-1 weighted sum, which belongs to the decode."""
        tensor = self.weight_input(node)
        if tensor is None:
            return False
        flat = self.constant(tensor).ravel()
        return not np.array_equal(flat, np.arange(flat.size, dtype=flat.dtype))


def _float_values(model: onnx.ModelProto) -> set[str]:
    """Names of the float tensors of the graph (computed ones, by ONNX shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]
    return {info.name for info in infos if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
