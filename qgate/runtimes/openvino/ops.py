"""OpenVINO graph facts: the per-op precision table and op inventory of an IR, and the quantizer and weight
patterns NNCF leaves in it."""

from __future__ import annotations

import collections

import openvino as ov

WEIGHTED_TYPES = {"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData"}
ACTIVATION_TYPES = {"Add", "Subtract", "Multiply", "Divide", "Concat", "MaxPool", "AvgPool", "Interpolate"}
INT8_TRANSPARENT_TYPES = {"VariadicSplit", "Split", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "MaxPool",
                          "Concat", "StridedSlice", "Slice"}
WEIGHT_PATH_TYPES = {"Multiply", "Subtract", "Convert", "Reshape", "Unsqueeze", "FakeQuantize"}
SKIPPED_TYPES = {"FakeQuantize", "Constant", "Parameter", "Result", "Convert"}
INVENTORY_SKIPPED = {"Constant", "Parameter", "Result"}  # renamed or re-created freely by graph passes


def precision_table(model: ov.Model, ignored: dict[str, str]) -> list[dict]:
    """One row per weighted or activation-quantizable op of an NNCF-quantized model, in graph order."""
    rows = []
    for op in model.get_ordered_ops():
        kind, name = op.get_type_name(), op.get_friendly_name()
        if kind in SKIPPED_TYPES:
            continue
        weighted = has_weights(op)
        producers = [op.input_value(i).get_node() for i in range(op.get_input_size())]
        activation_fqs = [fq for i, p in enumerate(producers) if not (weighted and i == 1)
                          for fq in upstream_quantizers(p)]
        weight_fq = weight_quantizer(producers[1]) if weighted else None
        elementwise_with_constant = kind in ACTIVATION_TYPES and any(
            p.get_type_name() == "Constant" for p in producers)  # bias / scale: fused, never quantized
        if not (weighted or activation_fqs or name in ignored
                or (kind in ACTIVATION_TYPES and not elementwise_with_constant)):
            continue
        quantized = bool(activation_fqs or weight_fq)
        low, high, levels = _range(activation_fqs)
        rows.append({
            "index": len(rows), "name": name, "type": kind, "precision": "int8" if quantized else "float",
            "activations_int8": int(bool(activation_fqs)), "weights_int8": int(weight_fq is not None),
            "why": ignored.get(name) or ("quantized" if quantized else f"not quantized by NNCF ({kind} here)"),
            "act_input_low": low, "act_input_high": high, "act_levels": levels,
            "weight_levels": _levels(weight_fq),
        })
    return rows


def upstream_quantizers(node) -> list:
    """FakeQuantize ops feeding `node`'s value through ops that keep int8 (split, reshape, concat, pool).

    NNCF puts one quantizer before a Split or Concat instead of one per consumer. Empty when any path
    reaches a float op first.
    """
    kind = node.get_type_name()
    if kind == "FakeQuantize":
        return [node]
    if kind not in INT8_TRANSPARENT_TYPES:
        return []
    inputs = [node.input_value(0).get_node()] if kind != "Concat" else \
        [node.input_value(i).get_node() for i in range(node.get_input_size())]
    found = [upstream_quantizers(n) for n in inputs]
    return [fq for fqs in found for fq in fqs] if all(found) else []


def weight_quantizer(node):
    """The weight decompression (int8 Constant -> Convert -> Multiply) or FakeQuantize feeding a weighted op;
    None for float weights and for an activation (attention's MatMul of two activations has no weights)."""
    found = None
    while node.get_type_name() in WEIGHT_PATH_TYPES:
        if found is None and (node.get_type_name() == "FakeQuantize" or "fq_weights" in node.get_friendly_name()):
            found = node
        node = node.input_value(0).get_node()
    return found if node.get_type_name() == "Constant" else None


def weight_constant(value: ov.Output):
    """The Constant holding a weighted op's weights (through decompression and quantizers), or None."""
    node = value.get_node()
    while node.get_type_name() in WEIGHT_PATH_TYPES:
        node = node.input_value(0).get_node()
    return node if node.get_type_name() == "Constant" else None


def has_weights(op) -> bool:
    """A convolution or matrix product whose second input is a constant (not attention's activation x activation)."""
    return op.get_type_name() in WEIGHTED_TYPES and weight_constant(op.input_value(1)) is not None


def _range(fake_quantizes: list) -> tuple:
    if not fake_quantizes:
        return "", "", ""
    lows = [fq.input_value(1).get_node().get_data().min() for fq in fake_quantizes]
    highs = [fq.input_value(2).get_node().get_data().max() for fq in fake_quantizes]
    return round(float(min(lows)), 6), round(float(max(highs)), 6), _levels(fake_quantizes[0])


def _levels(node) -> int | str:
    if node is None:
        return ""
    if node.get_type_name() == "FakeQuantize":
        return node.get_attributes()["levels"]
    return 256  # NNCF compressed the weights to an int8 constant


def op_inventory(model: ov.Model) -> dict:
    """Op counts by type and the friendly names of the computing ops (constants aside) of an OpenVINO model."""
    ops = model.get_ordered_ops()
    types = collections.Counter(op.get_type_name() for op in ops)
    return {
        "ir_op_count": len(ops),
        "ir_op_types": dict(sorted(types.items())),
        "ir_op_names": sorted(op.get_friendly_name() for op in ops if op.get_type_name() not in INVENTORY_SKIPPED),
    }


def fake_quantize_count(model: ov.Model) -> int:
    """The FakeQuantize ops NNCF inserted in an OpenVINO model: how much of it runs in INT8."""
    return sum(op.get_type_name() == "FakeQuantize" for op in model.get_ops())
