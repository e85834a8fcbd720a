"""Mixed precision by graph surgery: put chosen quantizer groups of an NNCF INT8 IR back in float.

A group is one activation FakeQuantize with every op it feeds (through ops that keep int8, as in
`precision.upstream_quantizers`) and those ops' int8 weights and corrected biases. Reverting a group
bypasses the FakeQuantize and restores the FP32 IR's weights and biases: what NNCF produces when
those ops are in its ignored scope, up to the bias correction of their neighbours. With every group
reverted, the model computes exactly the FP32 IR's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as opset

from qgate.precision import SKIPPED_TYPES, WEIGHTED_TYPES, upstream_quantizers, weight_quantizer

SWITCH_INPUT = "qgate_float_groups"


@dataclass(frozen=True)
class Group:
    """One activation quantizer and the ops that read its int8 output; `weighted` own their weights here."""

    quantizer: str
    ops: tuple[str, ...]
    weighted: tuple[str, ...]


def quantizer_groups(int8: ov.Model) -> list[Group]:
    """Every activation FakeQuantize of the INT8 IR, in graph order, with the ops it feeds."""
    consumers: dict[str, list[str]] = {}
    owned: dict[str, list[str]] = {}
    for op in int8.get_ordered_ops():
        kind, name = op.get_type_name(), op.get_friendly_name()
        if kind in SKIPPED_TYPES:
            continue
        weighted = kind in WEIGHTED_TYPES
        sources = [op.input_value(i).get_node() for i in range(op.get_input_size()) if not (weighted and i == 1)]
        quantizers = list(dict.fromkeys(fq.get_friendly_name() for s in sources for fq in upstream_quantizers(s)))
        for fq in quantizers:
            consumers.setdefault(fq, []).append(name)
        if weighted and quantizers and weight_quantizer(op.input_value(1).get_node()) is not None:
            owned.setdefault(quantizers[0], []).append(name)  # one owner, so one switch decides the weights
    return [Group(fq, tuple(ops), tuple(owned.get(fq, ()))) for fq, ops in consumers.items()]


def revert(int8: ov.Model, fp32: ov.Model, groups: list[Group], selected: set[int] | None = None) -> ov.Model:
    """A copy of `int8` with groups back in float.

    `selected` given: those groups are reverted for good (a real mixed-precision model to save or benchmark).
    `selected` None: a boolean input `qgate_float_groups` [len(groups)] chooses per inference, so one
    compiled model scores any combination (an emulation: its FakeQuantize ops run in float).
    """
    model = int8.clone()
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    fp32_ops = {op.get_friendly_name(): op for op in fp32.get_ordered_ops()}
    switch = opset.parameter([len(groups)], ov.Type.boolean, name=SWITCH_INPUT) if selected is None else None
    for index, group in enumerate(groups):
        if switch is None and index not in selected:
            continue
        condition = None if switch is None else opset.gather(switch, opset.constant(np.int64(index)),
                                                             opset.constant(np.int64(0)))
        fq = ops[group.quantizer]
        _reroute(fq.output(0), fq.input_value(0), condition)
        for name in group.weighted:
            _restore_float_inputs(ops[name], fp32_ops, condition)
    parameters = list(model.get_parameters()) + ([switch] if switch is not None else [])
    return ov.Model(model.get_results(), parameters, model.get_friendly_name())


def _reroute(quantized: ov.Output, float_value: ov.Output, condition) -> None:
    """Make every reader of `quantized` read `float_value` (or a Select of the two on `condition`)."""
    targets = list(quantized.get_target_inputs())
    source = float_value if condition is None else opset.select(condition, float_value, quantized).output(0)
    for target in targets:
        target.replace_source_output(source)


def _restore_float_inputs(op, fp32_ops: dict, condition) -> None:
    """The FP32 IR's weights for `op`, and its bias (NNCF's bias correction changed it) on the Add after it."""
    reference = fp32_ops.get(op.get_friendly_name())
    if reference is None:
        return
    _choose(op.input(1), _copy(reference.input_value(1)), condition)
    bias_name = op.get_friendly_name().removesuffix("/WithoutBiases")
    for target in op.output(0).get_target_inputs():
        add = target.get_node()
        if add.get_type_name() == "Add" and add.get_friendly_name() == bias_name and bias_name in fp32_ops:
            _choose(add.input(1), _copy(fp32_ops[bias_name].input_value(1)), condition)


def _copy(value: ov.Output) -> ov.Output:
    """A constant of this model's own (a node shared between two models would tie their graphs together)."""
    node = value.get_node()
    return opset.constant(node.get_data().copy()).output(0) if node.get_type_name() == "Constant" else value


def _choose(port: ov.Input, float_value: ov.Output, condition) -> None:
    quantized = port.get_source_output()
    port.replace_source_output(float_value if condition is None else
                               opset.select(condition, float_value, quantized).output(0))


def ignored_names(groups: list[Group], selected: set[int]) -> list[str]:
    """The op names to add to `quantize.ignored_scope.names` for the selected groups, in graph order."""
    return list(dict.fromkeys(name for i, group in enumerate(groups) if i in selected for name in group.ops))
