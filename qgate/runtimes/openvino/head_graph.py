"""The head decode of an OpenVINO graph: the ops every output depends on without crossing a learned layer, and the
learned layers where that walk stops (`qgate.heads` says why the decode is found from the graph)."""

from __future__ import annotations

import numpy as np
import openvino as ov

from qgate.runtimes.openvino.ops import has_weights, weight_constant

NOT_COMPUTED = {"Constant", "Parameter", "Result"}


def decode_ops(model: ov.Model) -> list[str]:
    """Friendly names of the head decode: every op an output depends on without crossing a learned layer.

    Learned layers are convolutions and matrix products with trained weights, and the bias Add that follows
    one. DFL's convolution has fixed weights 0..reg_max-1 (a weighted sum, not a learned layer) and belongs to
    the decode. In graph order.
    """
    return _in_graph_order(model, _walk_head(model)[0])


def output_layers(model: ov.Model) -> list[str]:
    """Friendly names of the learned layers the head decode starts from: the last convolution of each branch
    that feeds an output (boxes, classes, mask coefficients, keypoints, mask prototypes). In graph order."""
    return _in_graph_order(model, _walk_head(model)[1])


def _walk_head(model: ov.Model) -> tuple[set[str], set[str]]:
    """(decode ops, output layers): walk back from every output until a learned layer."""
    inside: set[str] = set()
    frontier: set[str] = set()
    stack = [result.input_value(0).get_node() for result in model.get_results()]
    while stack:
        op = stack.pop()
        name = op.get_friendly_name()
        if name in inside or op.get_type_name() in NOT_COMPUTED:
            continue
        if _learned(op) or _bias_of_learned(op):
            frontier.add(name if _learned(op) else op.input_value(0).get_node().get_friendly_name())
            continue
        inside.add(name)
        stack += [op.input_value(i).get_node() for i in range(op.get_input_size())]
    return inside, frontier


def _in_graph_order(model: ov.Model, names: set[str]) -> list[str]:
    return [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_friendly_name() in names]


def _learned(op) -> bool:
    if not has_weights(op):
        return False  # activation x activation (attention) has no weights: part of whatever feeds it
    flat = weight_constant(op.input_value(1)).get_data().ravel()
    return not np.array_equal(flat, np.arange(flat.size, dtype=flat.dtype))  # DFL's fixed 0..reg_max-1


def _bias_of_learned(op) -> bool:
    if op.get_type_name() != "Add":
        return False
    sources = [op.input_value(i).get_node() for i in range(2)]
    return _learned(sources[0]) and weight_constant(op.input_value(1)) is not None
