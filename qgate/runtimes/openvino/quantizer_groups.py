"""Mixed precision by graph surgery: put chosen quantizer groups of an NNCF INT8 IR back in float.

A group is a set of activation FakeQuantize ops with every op they feed (through ops that keep int8,
as in `ops.upstream_quantizers`) and those ops' int8 weights and corrected biases; quantizers that
feed a common op share a group, as an op only runs in float once all its inputs are float (an ignored-scope
entry removes them all; NNCF groups its quantizers the same way). Reverting a group bypasses its
FakeQuantize ops and restores the FP32 IR's weights and biases: what NNCF produces when those ops are
in its ignored scope, up to the bias correction of their neighbours. With every group reverted, the
model computes exactly the FP32 IR's output.
"""

from __future__ import annotations

import openvino as ov
import openvino.opset13 as opset

from qgate.groups import Group, joined_by_readers
from qgate.runtimes.openvino.ops import SKIPPED_TYPES, has_weights, upstream_quantizers, weight_quantizer


def quantizer_groups(int8: ov.Model) -> list[Group]:
    """The activation FakeQuantize ops of the INT8 IR joined by shared readers, in graph order, with their ops."""
    readers: dict[str, list[str]] = {}  # op -> the quantizers it reads, in graph order
    weighted: set[str] = set()
    for op in int8.get_ordered_ops():
        kind, name = op.get_type_name(), op.get_friendly_name()
        if kind in SKIPPED_TYPES:
            continue
        weighted_op = has_weights(op)
        sources = [op.input_value(i).get_node() for i in range(op.get_input_size()) if not (weighted_op and i == 1)]
        quantizers = list(dict.fromkeys(fq.get_friendly_name() for s in sources for fq in upstream_quantizers(s)))
        if quantizers:
            readers[name] = quantizers
            if weighted_op and weight_quantizer(op.input_value(1).get_node()) is not None:
                weighted.add(name)
    return joined_by_readers(readers, weighted)


def revert(int8: ov.Model, fp32: ov.Model, groups: list[Group], selected: set[int]) -> ov.Model:
    """A copy of `int8` with the `selected` groups back in float: a real mixed-precision model."""
    model = int8.clone()
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    fp32_ops = {op.get_friendly_name(): op for op in fp32.get_ordered_ops()}
    for index in sorted(selected):
        group = groups[index]
        for name in group.quantizers:
            fq = ops[name]
            for target in list(fq.output(0).get_target_inputs()):
                target.replace_source_output(fq.input_value(0))
        for name in group.weighted:
            _restore_float_inputs(ops[name], fp32_ops)
    return ov.Model(model.get_results(), model.get_parameters(), model.get_friendly_name())


def _restore_float_inputs(op, fp32_ops: dict) -> None:
    """The FP32 IR's weights for `op`, and its bias (NNCF's bias correction changed it) on the Add after it."""
    reference = fp32_ops.get(op.get_friendly_name())
    if reference is None:
        return
    op.input(1).replace_source_output(_copy(reference.input_value(1)))
    bias_name = op.get_friendly_name().removesuffix("/WithoutBiases")
    for target in op.output(0).get_target_inputs():
        add = target.get_node()
        if add.get_type_name() == "Add" and add.get_friendly_name() == bias_name and bias_name in fp32_ops:
            add.input(1).replace_source_output(_copy(fp32_ops[bias_name].input_value(1)))


def _copy(value: ov.Output) -> ov.Output:
    """A constant of this model's own (a node shared between two models would tie their graphs together)."""
    node = value.get_node()
    return opset.constant(node.get_data().copy()).output(0) if node.get_type_name() == "Constant" else value
