"""What the judge checks in a metrics file before it trusts it: each point inside its own interval, derived numbers
that agree across files, model files that hash to what was measured, and the params the stage ran with.

`make gate` re-runs what changed before judging, so these fail only where the judge runs alone (`make report`,
`make promote`, `python -m qgate.judge`) on files edited, swapped or left from another configuration.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import yaml

from qgate.artifacts import fixed_model, fp32_model, int8_model, weights_file
from qgate.deploy import quantizer_in_force
from qgate.io import sha256_file
from qgate.params import Params, as_dict

# The files write 5 decimals: a sum of rounded numbers may be off by a few 1e-5. What a hand edit has to move to
# change a verdict (a gate's limit, 0.01 by default) is far larger.
TOLERANCE = 1e-4
DVC_LOCK = Path("dvc.lock")
RESOLVED_PARAMS = "params.resolved.yaml"  # the file dvc.yaml's stages read their params from


def problems(params: Params, path: str, data: dict, stage: str, read: Callable[[str], Any]) -> list[str]:
    """What is wrong with metrics file `path` (written by `stage`), each as a phrase; `read` parses another file."""
    found = [*_outside_intervals(data), *_derived(params, path, data, read), *_hashes(params, path, data),
             *_recorded_params(params, path, data), *_locked_params(params, stage)]
    return list(dict.fromkeys(found))  # a file's record and DVC's lock can say the same thing


def _outside_intervals(data: dict) -> list[str]:
    """Every `key` with `key_ci_low` and `key_ci_high` beside it lies within them."""
    found = []
    for key, value in data.items():
        low, high = data.get(f"{key}_ci_low"), data.get(f"{key}_ci_high")
        if all(_is_number(v) for v in (value, low, high)) and not low - TOLERANCE <= value <= high + TOLERANCE:
            found.append(f"'{key}' {value} lies outside its own interval [{low}, {high}]")
    return found


def _derived(params: Params, path: str, data: dict, read: Callable[[str], Any]) -> list[str]:
    """INT8's drops are FP32 minus INT8, with the FP32 values the baseline wrote; autofix's drop likewise; a shift's
    judged drop is its worst severity's."""
    if path not in (params.int8_eval.metrics, params.autofix.metrics, params.robustness.metrics):
        return []
    baseline = read(params.baseline.metrics)
    found = _worst_shifts(data) if path == params.robustness.metrics else []
    prefix = "fixed_" if path == params.autofix.metrics else ""
    for key, drop in data.items():
        if not (key.startswith(prefix) and key.endswith("_drop") and _is_number(drop)):
            continue
        metric = key[len(prefix):-len("_drop")]
        fp32, int8 = data.get(f"baseline_{metric}", baseline.get(metric)), data.get(f"{prefix}{metric}")
        if not (_is_number(fp32) and _is_number(int8)):
            continue
        if abs(fp32 - int8 - drop) > TOLERANCE:
            found.append(f"'{key}' {drop} is not FP32 {fp32} - INT8 {int8}")
        relative = data.get(f"{key}_rel")
        if _is_number(relative) and fp32 and abs((fp32 - int8) / fp32 - relative) > TOLERANCE:
            found.append(f"'{key}_rel' {relative} is not ({fp32} - {int8}) / {fp32}")
    for key, fp32 in data.items():
        if key.startswith("baseline_") and _is_number(fp32) and _is_number(baseline.get(key[len("baseline_"):])):
            quoted = baseline[key[len("baseline_"):]]
            if abs(fp32 - quoted) > TOLERANCE:
                found.append(f"'{key}' {fp32} is not the {quoted} of {params.baseline.metrics}")
    return found


def _worst_shifts(data: dict) -> list[str]:
    """Each shift's judged drop (`bright_map50_95_drop`) is the largest of its severities' and names that one."""
    found = []
    for name in data.get("shifts") or []:
        for key, severity in data.items():
            if not (key.startswith(f"{name}_") and key.endswith("_drop_severity")):
                continue
            metric = key[len(name) + 1:-len("_drop_severity")]
            drops = {s: data.get(f"{name}_{s}_{metric}_drop") for s in data.get("severities") or []}
            judged = data.get(key[:-len("_severity")])
            if not all(_is_number(d) for d in (judged, *drops.values())) or severity not in drops:
                found.append(f"'{key[:-len('_severity')]}' lacks the drop of a severity it was chosen from")
            elif abs(judged - drops[severity]) > TOLERANCE or drops[severity] < max(drops.values()) - TOLERANCE:
                found.append(f"'{key[:-len('_severity')]}' {judged} is not the largest drop of its severities "
                             f"{drops}")
    return found


def _hashes(params: Params, path: str, data: dict) -> list[str]:
    """The model files on disk are the ones the file says it measured (a missing one cannot have been swapped)."""
    files = {params.export.record: [("ir_bin_sha256", fp32_model(params))],
             params.quantize.metrics: [("int8_ir_bin_sha256", int8_model(params))],
             params.autofix.metrics: [("fixed_ir_bin_sha256", fixed_model(params))]}.get(path, [])
    found = []
    for key, model in files:
        weights = weights_file(model)
        if data.get(key) and weights.is_file() and sha256_file(weights) != data[key]:
            found.append(f"{weights} is not the model it measured ({key} {str(data[key])[:12]})")
    return found


def _recorded_params(params: Params, path: str, data: dict) -> list[str]:
    """The settings a file records are the ones in force (for files judged without DVC's lock beside them)."""
    recorded = {params.export.record: {"imgsz": ("model.imgsz", params.model.imgsz),
                                       "opset": ("export.opset", params.export.opset),
                                       "runtime": ("deploy.runtime", params.deploy.runtime)},
                params.quantize.metrics: {"preset": ("quantize.preset", params.quantize.preset),
                                          "quantizer": ("quantize.quantizer", quantizer_in_force(
                                              params.deploy.runtime, params.quantize.quantizer))},
                params.int8_eval.metrics: {"bootstrap_samples": ("int8_eval.bootstrap_samples",
                                                                 params.int8_eval.bootstrap_samples)},
                params.robustness.metrics: {"shifts": ("robustness.shifts", list(params.robustness.shifts)),
                                            "severities": ("robustness.severities", list(params.robustness.severities)),
                                            "seed": ("robustness.seed", params.robustness.seed),
                                            "bootstrap_samples": ("robustness.bootstrap_samples",
                                                                  params.robustness.bootstrap_samples)},
                params.benchmark.metrics: {"hint": ("benchmark.hint", params.benchmark.hint),
                                           "batch": ("benchmark.batch", params.benchmark.batch),
                                           "seconds": ("benchmark.seconds", params.benchmark.seconds)}}.get(path, {})
    return [f"it was measured with {name} {data[key]!r}, and {name} is now {value!r}"
            for key, (name, value) in recorded.items() if key in data and data[key] != value]


def _locked_params(params: Params, stage: str) -> list[str]:
    """Every param DVC recorded for `stage` in dvc.lock has the value in force (no lock, or no such stage: none)."""
    if not DVC_LOCK.is_file():
        return []
    try:
        recorded = _lock(DVC_LOCK.resolve(), DVC_LOCK.stat().st_mtime_ns)["stages"][stage]["params"][RESOLVED_PARAMS]
    except (KeyError, TypeError, yaml.YAMLError):
        return []
    in_force = as_dict(params)
    return [f"it was measured with {name} {value!r}, and {name} is now {_at(in_force, name)!r}"
            for name, value in _flat(recorded).items() if _at(in_force, name) != value]


@functools.lru_cache(maxsize=4)
def _lock(path: Path, mtime_ns: int) -> Any:
    """dvc.lock parsed once per version of the file (the judge checks several metrics files against it)."""
    # libyaml's safe loader where PyYAML has it: the lock of the demo's pipeline (70 KB) parses in 0.02 s, not 0.19
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def _flat(values: dict, prefix: str = "") -> dict[str, Any]:
    """{'baseline': {'split': 'val'}, 'model.imgsz': 192} -> {'baseline.split': 'val', 'model.imgsz': 192}."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _at(values: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(values, dict) or part not in values:
            return "(no such key)"
        values = values[part]
    return values


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
