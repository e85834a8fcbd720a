"""Why an op of an INT8 model runs in float, as the precision table and the structure gates word it, and the
automatic float rules (any runtime)."""

from __future__ import annotations

from typing import Any

SCOPE_RULE = "ignored by quantize.ignored_scope"
# "ignored" first, like the user's entries: the structure gate checks that every ignored op did stay float
DECODE_RULE = "ignored by the head-decode rule (quantize.keep_decode_float)"
OUTPUT_LAYER_RULE = "ignored by the output-layer rule (quantize.keep_output_layers_float)"
PRECISION_COLUMNS = ["index", "name", "type", "precision", "activations_int8", "weights_int8", "why",
                     "act_input_low", "act_input_high", "act_levels", "weight_levels"]


def rule_scope(runtime: Any, model: Any, params: Any) -> dict[str, str]:
    """Op name -> the automatic rule that keeps it float: the head decode (`quantize.keep_decode_float`) and the
    head's output layers (`quantize.keep_output_layers_float`), both found from the runtime's graph."""
    cfg = params.quantize
    return ({name: DECODE_RULE for name in runtime.decode_ops(model) if cfg.keep_decode_float}
            | {name: OUTPUT_LAYER_RULE for name in runtime.output_layers(model) if cfg.keep_output_layers_float})
