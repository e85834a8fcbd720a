"""NNCF with the `quantize:` params, for every runtime NNCF quantizes for (OpenVINO IR, ONNX): its settings, the
calibration images as its dataset, and which ops each ignored-scope entry keeps in float."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from qgate.calibration import Calibration
from qgate.errors import QgateError
from qgate.params import IgnoredScopeParams, Params, QuantizeParams
from qgate.precision import SCOPE_RULE


def quantize(model: Any, calibration: Calibration, params: Params, by_rule: list[str],
             as_input: Callable[[np.ndarray], Any] = lambda tensor: tensor) -> Any:
    """NNCF post-training quantization with the `quantize:` settings, `by_rule` ops and the ignored scope float.
    `as_input` turns an image tensor into what the model's runtime takes (ONNX: a dict by input name)."""
    import nncf

    return nncf.quantize(model, calibration_dataset(calibration, as_input), subset_size=len(calibration.images),
                         advanced_parameters=advanced_parameters(params.quantize),
                         **nncf_settings(params, by_rule))


def calibration_dataset(calibration: Calibration, as_input: Callable[[np.ndarray], Any] = lambda t: t):
    """The calibration images as an NNCF dataset of input tensors."""
    import nncf

    return nncf.Dataset(calibration.images, lambda path: as_input(calibration.tensor(path)))


def nncf_settings(params: Params, by_rule: list[str]) -> dict:
    """The NNCF arguments `quantize:` sets that `nncf.quantize` and its accuracy-control variant share."""
    import nncf

    cfg = params.quantize
    scope = cfg.ignored_scope
    ignored = nncf.IgnoredScope(
        names=list(dict.fromkeys([*by_rule, *scope.names])), patterns=list(scope.patterns), types=list(scope.types),
        subgraphs=[nncf.Subgraph(inputs=list(s.inputs), outputs=list(s.outputs)) for s in scope.subgraphs])
    return {"preset": nncf.QuantizationPreset(cfg.preset),
            "model_type": None if cfg.model_type == "none" else nncf.ModelType(cfg.model_type),
            "fast_bias_correction": cfg.fast_bias_correction, "ignored_scope": ignored}


def advanced_parameters(cfg: QuantizeParams):
    """NNCF's advanced parameters: SmoothQuant's MatMul alpha (`quantize.smooth_quant_alpha`; NNCF applies it with
    model_type transformer only) and the activations' range estimator (`quantize.range_estimator`) when not NNCF's."""
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    estimator = {} if cfg.range_estimator == "default" else {
        "activations_range_estimator_params": getattr(RangeEstimatorParametersSet, cfg.range_estimator.upper())}
    return AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(
        matmul=cfg.smooth_quant_alpha), **estimator)


def scope_matches(graph: Any, scope: IgnoredScopeParams, model_path: Path) -> dict[str, str]:
    """Map op name -> the ignored-scope entry that keeps it float, on NNCF's graph of the model; an entry matching
    nothing is an error."""
    from nncf.scopes import IgnoredScope, Subgraph, get_matched_ignored_scope_info

    entries = [(f"names[{i}] '{n}'", IgnoredScope(names=[n])) for i, n in enumerate(scope.names)]
    entries += [(f"patterns[{i}] '{p}'", IgnoredScope(patterns=[p])) for i, p in enumerate(scope.patterns)]
    entries += [(f"types[{i}] '{t}'", IgnoredScope(types=[t])) for i, t in enumerate(scope.types)]
    entries += [(f"subgraphs[{i}] {list(s.inputs)} -> {list(s.outputs)}",
                 IgnoredScope(subgraphs=[Subgraph(inputs=list(s.inputs), outputs=list(s.outputs))]))
                for i, s in enumerate(scope.subgraphs)]
    matches: dict[str, str] = {}
    for label, entry in entries:
        try:
            _, found = get_matched_ignored_scope_info(entry, [graph])
        except Exception:  # nncf raises on a subgraph endpoint name that is not in the graph
            found = {}
        names = set().union(*found.values()) if found else set()
        if not names:
            raise QgateError(f"{model_path}: quantize.ignored_scope.{label} matches no op of this model; "
                             "fix or remove that entry (op names are the model's node names)")
        for name in names:
            matches.setdefault(name, f"{SCOPE_RULE}.{label}")
    return matches
