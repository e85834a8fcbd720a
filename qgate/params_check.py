"""Which params values are valid: ranges, choices, and settings that must agree (one-line errors naming the key).

It checks a `qgate.params.Params` and imports nothing from there: the loader calls it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from qgate.errors import QgateError
from qgate.deploy import RUNTIMES

INFERENCE_PRECISIONS = ("f32", "bf16", "f16")
REGISTRY_NAME = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9-/_]*[a-zA-Z0-9])?")  # gto.constants' artifact/stage rule
RAY_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9.\-]+:[0-9]{1,5}")  # a Ray client or GCS address: host:port
RANGE_ESTIMATORS = ("default", "minmax", "mean_minmax", "median_minmax", "mean_no_outliers_minmax", "mean_quantile",
                    "histogram")  # `default`: NNCF's for the preset; the others: nncf's RangeEstimatorParametersSet
# qgate.shifts.SHIFTS' names (tests/test_shifts.py checks): that module needs OpenCV, loading params does not
SHIFT_NAMES = ("dark", "bright", "low_contrast", "gaussian_noise", "defocus_blur", "motion_blur", "jpeg")
MAX_IMGSZ = 4096  # larger sides need more memory than a CI runner has; no YOLO checkpoint is trained above 1536
OPTIONAL_GATES = ("max_drop_rel", "min_int8_score", "max_class_drop", "max_latency_ms", "max_recall_drop",
                  "max_f1_drop", "max_small_map50_95_drop", "max_shift_drop")
# the file under demo.data_dir that a task's demo model is judged on: a dataset yaml; a classifier's folder of splits
DEMO_DATASET_FILES = {"detect": "demo.yaml", "segment": "demo.yaml", "pose": "demo.yaml", "obb": "demo.yaml",
                      "classify": ""}
MIN_BOOTSTRAP_SAMPLES = 100  # fewer resamples put the 2.5% tails of a 95% interval on 2 or 3 values


def check_values(params: Any, path: Path) -> None:
    _one_of(path, "baseline.inference_precision", params.baseline.inference_precision, INFERENCE_PRECISIONS)
    _image_size(path, "model.imgsz", params.model.imgsz)
    _one_of(path, "deploy.runtime", params.deploy.runtime, tuple(RUNTIMES))
    _quantizer(path, params.deploy.runtime, params.quantize.quantizer)
    _one_of(path, "quantize.onnxruntime.calibrate_method", params.quantize.onnxruntime.calibrate_method,
            ("minmax", "entropy", "percentile", "distribution"))
    for section, key in (("baseline", "conf"), ("baseline", "iou"), ("int8_eval", "bad_case_conf"),
                         ("int8_eval", "bad_case_iou"), ("deploy", "conf"), ("deploy", "int8_conf")):
        value = getattr(getattr(params, section), key)
        if value is not None and not 0.0 <= value <= 1.0:
            raise QgateError(f"{path}: '{section}.{key}' must be within [0, 1]")
    _one_of(path, "demo.task", params.demo.task, tuple(DEMO_DATASET_FILES))
    if not params.demo.classes:
        raise QgateError(f"{path}: 'demo.classes' must list at least one class")
    _demo_dataset(path, params)
    _one_of(path, "quantize.preset", params.quantize.preset, ("performance", "mixed"))
    _one_of(path, "quantize.model_type", params.quantize.model_type, ("none", "transformer"))
    _one_of(path, "quantize.range_estimator", params.quantize.range_estimator, RANGE_ESTIMATORS)
    _smooth_quant_alpha(path, "quantize.smooth_quant_alpha", params.quantize.smooth_quant_alpha)
    _one_of(path, "benchmark.hint", params.benchmark.hint, ("throughput", "latency"))
    for key in ("subset_size",):
        if getattr(params.quantize, key) < 1:
            raise QgateError(f"{path}: 'quantize.{key}' must be >= 1")
    if params.divergence.images < 1 or params.divergence.bad_cases < 0:
        raise QgateError(f"{path}: 'divergence.images' must be >= 1 and 'divergence.bad_cases' >= 0")
    if not 0.0 <= params.sensitivity.conf <= 1.0 or params.sensitivity.images < 1:
        raise QgateError(f"{path}: 'sensitivity.conf' must be within [0, 1] and 'sensitivity.images' >= 1")
    if not 0.0 < params.sensitivity.rank_quantile <= 1.0:
        raise QgateError(f"{path}: 'sensitivity.rank_quantile' is {params.sensitivity.rank_quantile}; "
                         "use a value in (0, 1], e.g. 0.1")
    if params.autofix.max_evaluations < 1:
        raise QgateError(f"{path}: 'autofix.max_evaluations' is {params.autofix.max_evaluations}; the search needs "
                         "at least 1 full evaluation of the val split (a few are typical: set 8 or more)")
    if params.autofix.price_rounds == 1 or params.autofix.price_rounds < 0 or params.autofix.price_seconds <= 0:
        raise QgateError(f"{path}: 'autofix.price_rounds' is {params.autofix.price_rounds} and 'price_seconds' "
                         f"{params.autofix.price_seconds:g}; use 0 rounds (no pricing) or 2 or more (an interval needs "
                         "two), and seconds > 0")
    _check_robustness(params.robustness, path)
    _check_gates(params.gates, path)
    # a target below 0 asks INT8 to beat FP32: no gate is switched off by it, it only makes autofix search longer
    if not -1.0 <= params.autofix.target_drop <= 1.0:
        raise QgateError(f"{path}: 'autofix.target_drop' is {params.autofix.target_drop}; use an mAP50-95 drop in "
                         "[-1, 1], e.g. gates.max_map50_95_drop")
    if params.benchmark.seconds <= 0 or params.benchmark.repeats < 2 or params.benchmark.batch < 1:
        raise QgateError(f"{path}: 'benchmark.seconds' must be > 0, 'repeats' >= 2 (an interval needs two pairs) "
                         f"and 'batch' >= 1; "
                         f"got {params.benchmark.seconds}, {params.benchmark.repeats}, {params.benchmark.batch}")
    _check_statistics(params, path)
    _check_promote(params, path)
    _check_compute(params.compute, path)
    _check_tune(params.tune, path)
    _check_tune_quantizers(params, path)


def _check_robustness(robustness: Any, path: Path) -> None:
    """Known shifts, each once; severities ImageNet-C defines, each once (a repeat would be judged twice)."""
    for shift in robustness.shifts:
        _one_of(path, "robustness.shifts", shift, SHIFT_NAMES)
    if len(set(robustness.shifts)) != len(robustness.shifts):
        raise QgateError(f"{path}: 'robustness.shifts' lists a shift twice; list each once")
    severities = robustness.severities
    if not severities and robustness.shifts or len(set(severities)) != len(severities) \
            or any(not 1 <= s <= 5 for s in severities):
        raise QgateError(f"{path}: 'robustness.severities' is {tuple(severities)}; list distinct severities in "
                         "1..5, e.g. [1, 3]")


def _check_promote(params: Any, path: Path) -> None:
    """Registry names GTO and DVC accept, and a version bump rule."""
    for key, value in (("promote.name", params.promote.name), ("promote.stage", params.promote.stage)):
        if not REGISTRY_NAME.fullmatch(value):
            raise QgateError(f"{path}: '{key}' is {value!r}; use letters, digits, '-', '_' or '/', starting and "
                             "ending with a letter or digit (GTO's rule for artifact and stage names)")
    for key in ("bump", "bump_new_model"):
        _one_of(path, f"promote.{key}", getattr(params.promote, key), ("patch", "minor", "major"))


def _check_tune_quantizers(params: Any, path: Path) -> None:
    for value in params.tune.space.quantizer:
        if value != "default" and value not in RUNTIMES[params.deploy.runtime].quantizers:
            _quantizer(path, params.deploy.runtime, value)


def _check_tune(tune: Any, path: Path) -> None:
    """A search space with at least one value per key, each one valid for `quantize:`, and a budget."""
    choices = {"preset": ("performance", "mixed"), "model_type": ("none", "transformer"),
               "range_estimator": RANGE_ESTIMATORS}
    for key in ("preset", "model_type", "smooth_quant_alpha", "fast_bias_correction", "range_estimator", "subset_size",
                "keep_decode_float"):
        values = getattr(tune.space, key)
        if not values:
            raise QgateError(f"{path}: 'tune.space.{key}' is empty; list at least one value (e.g. the one "
                             f"quantize.{key} has)")
        for value in values:
            if key in choices:
                _one_of(path, f"tune.space.{key}", value, choices[key])
            if key == "smooth_quant_alpha":
                _smooth_quant_alpha(path, "tune.space.smooth_quant_alpha", value)
            if key == "subset_size" and value < 1:
                raise QgateError(f"{path}: 'tune.space.subset_size' has {value}; use calibration image counts >= 1")
    for size in tune.imgsz:
        _image_size(path, "tune.imgsz", size, listed=True)
    for key in ("first_images", "finalists", "max_evaluations"):
        if getattr(tune, key) < 1:
            raise QgateError(f"{path}: 'tune.{key}' is {getattr(tune, key)}; use an integer >= 1"
                             + (" (one evaluation is one candidate scored on one subset)"
                                if key == "max_evaluations" else ""))
    if tune.max_seconds <= 0:
        raise QgateError(f"{path}: 'tune.max_seconds' is {tune.max_seconds}; use a wall-time budget > 0, e.g. 1800")


def _demo_dataset(path: Path, params: Any) -> None:
    """The demo model is judged on the dataset its task's demo writes: a classify demo writes class folders, the
    others a yaml (caught here, before training, rather than at baseline)."""
    demo, model = params.demo, params.model
    written = {Path(demo.data_dir) / name for name in DEMO_DATASET_FILES.values()}  # what any demo task writes
    if (Path(model.weights) == Path(demo.weights) and Path(model.dataset) in written
            and Path(model.dataset) != Path(demo.dataset)):
        raise QgateError(f"{path}: 'model.dataset' is {model.dataset}, but the {demo.task} demo writes "
                         f"{demo.dataset}: set model.dataset to {demo.dataset}")


def _image_size(path: Path, key: str, size: int, listed: bool = False) -> None:
    """A side in pixels a YOLO model can take: a multiple of 32 from 32 to MAX_IMGSZ (`listed`: one of a list)."""
    if not 32 <= size <= MAX_IMGSZ or size % 32:
        said = f"has {size}; list multiples of 32" if listed else f"is {size}; use a multiple of 32"
        raise QgateError(f"{path}: '{key}' {said} from 32 to {MAX_IMGSZ} (32 is the largest stride of most YOLO "
                         f"models, 64 of P6 ones), e.g. {'[160, 128]' if listed else 640}")


def _check_gates(gates: Any, path: Path) -> None:
    """Each threshold within the range of what it limits, so that no value switches its gate off unseen."""
    fractions = ("max_map50_95_drop", "max_mask_map50_95_drop", "max_pose_map50_95_drop", "max_top1_drop",
                 "max_drop_rel", "min_int8_score", "max_class_drop", "max_layers_below_sqnr_floor_frac",
                 "max_recall_drop", "max_f1_drop", "max_small_map50_95_drop", "max_shift_drop")
    for key in fractions:
        value = getattr(gates, key)
        if value is not None and not 0.0 <= value <= 1.0:
            raise QgateError(f"{path}: 'gates.{key}' is {value}; use a value in [0, 1] (mAP and fractions lie "
                             "there)" + (" or null (gate off)" if key in OPTIONAL_GATES else ""))
    for key in ("min_speedup", "max_latency_ms"):
        value = getattr(gates, key)
        if value is not None and value <= 0:
            raise QgateError(f"{path}: 'gates.{key}' is {value}; use a value > 0"
                             + (" or null (gate off)" if key in OPTIONAL_GATES else " (1.0: INT8 at least as fast)"))
    for key in ("max_detection_error", "report_bad_cases"):
        if getattr(gates, key) < 0:
            raise QgateError(f"{path}: 'gates.{key}' is {getattr(gates, key)}; use a value >= 0")


def _smooth_quant_alpha(path: Path, key: str, value: float) -> None:
    """NNCF's SmoothQuant alpha: in [0, 1], or negative for off."""
    if value > 1:
        raise QgateError(f"{path}: '{key}' is {value}; use an alpha in [0, 1] (NNCF's default 0.95), or -1 to "
                         "switch SmoothQuant off")


def _check_compute(compute: Any, path: Path) -> None:
    """A known executor, a Ray address Ray can join, and positive sizes."""
    _one_of(path, "compute.executor", compute.executor, ("local", "ray"))
    if compute.address is not None and compute.address != "auto" and not RAY_ADDRESS.fullmatch(compute.address):
        raise QgateError(f"{path}: 'compute.address' is {compute.address!r}; use null (a private Ray instance for "
                         "this run), auto (the cluster this machine joined) or ray://host:port / host:port")
    for key in ("workers", "cpus_per_worker", "shard_images"):
        value = getattr(compute, key)
        if value is not None and value < 1:
            raise QgateError(f"{path}: 'compute.{key}' is {value}; use an integer >= 1"
                             + (" or null (one per CPU the cluster reports)" if key == "workers" else ""))
    if compute.timeout_s <= 0:
        raise QgateError(f"{path}: 'compute.timeout_s' is {compute.timeout_s}; use seconds > 0, e.g. 300")


def _check_statistics(params: Any, path: Path) -> None:
    """Interval levels in (0, 1), enough resamples, and the gates judging the level the stages measured."""
    for key, level in (("int8_eval.ci_level", params.int8_eval.ci_level),
                       ("benchmark.ci_level", params.benchmark.ci_level),
                       ("autofix.ci_level", params.autofix.ci_level), ("gates.confidence", params.gates.confidence)):
        if level is not None and not 0.0 < level < 1.0:
            raise QgateError(f"{path}: '{key}' is {level}; use a level in (0, 1), e.g. 0.95")
    for key, samples in (("int8_eval.bootstrap_samples", params.int8_eval.bootstrap_samples),
                         ("robustness.bootstrap_samples", params.robustness.bootstrap_samples)):
        if samples < MIN_BOOTSTRAP_SAMPLES:
            raise QgateError(f"{path}: '{key}' is {samples}; use at least {MIN_BOOTSTRAP_SAMPLES} (1000 takes "
                             "seconds)")
    _one_of(path, "gates.inconclusive", params.gates.inconclusive, ("point", "pass", "fail"))
    confidence = params.gates.confidence
    for key, level in (("int8_eval.ci_level", params.int8_eval.ci_level),
                       ("benchmark.ci_level", params.benchmark.ci_level)):
        if confidence is not None and level != confidence:
            raise QgateError(f"{path}: 'gates.confidence' is {confidence} but '{key}' is {level}: the gates judge "
                             "the interval the stage measured; set both to the same level")
    if params.benchmark.max_spread <= 0:
        raise QgateError(f"{path}: 'benchmark.max_spread' must be > 0 (a fraction of the speed-up, e.g. 0.15)")
    if params.benchmark.max_seconds < params.benchmark.seconds * 2 * params.benchmark.repeats:
        raise QgateError(f"{path}: 'benchmark.max_seconds' is {params.benchmark.max_seconds}, less than its "
                         f"{params.benchmark.repeats} first pairs take (2 x {params.benchmark.repeats} x "
                         f"{params.benchmark.seconds} s); raise it")


def _quantizer(path: Path, runtime: str, quantizer: str) -> None:
    offered = RUNTIMES[runtime].quantizers
    if quantizer != "default" and quantizer not in offered:
        runs_it = [name for name, d in RUNTIMES.items() if quantizer in d.quantizers]
        where = f" (deploy.runtime: {' or '.join(runs_it)} has it)" if runs_it else ""
        raise QgateError(f"{path}: 'quantize.quantizer' is {quantizer!r}, which deploy.runtime {runtime} does not "
                         f"offer; use default or one of {', '.join(offered)}{where}")


def _one_of(path: Path, key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise QgateError(f"{path}: '{key}' is {value!r}; use one of {', '.join(allowed)}")
