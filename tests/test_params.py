"""params.yaml loading: defaults for what it leaves out, an earlier release's file still loads, unknown and mistyped
keys are one-line errors naming file and key, and docs/params.md is generated from the defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from qgate import params_reference
from qgate.errors import QgateError
from qgate.params import DEFAULTS, REFERENCE, as_dict, load_params
from tests.conftest import ROOT, error_line, full_params, stage

EARLIER_RELEASE = ROOT / "tests" / "data" / "params_4e6ca4c.yaml"  # output paths were keys; no compute: section


def _write(tmp_path, mutate) -> str:
    params = full_params()
    mutate(params)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


def test_repository_params_load():
    params = load_params(ROOT / "params.yaml")
    assert params.baseline.inference_precision == "f32"
    assert params.model.imgsz % 32 == 0


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        pytest.param(lambda p: p["baseline"].update(inference_precison="f32"),
                     "unknown key 'baseline.inference_precison'; did you mean 'baseline.inference_precision'?",
                     id="misspelled-key"),
        pytest.param(lambda p: p.update(basline={}), "unknown key 'basline'; did you mean 'baseline'?",
                     id="misspelled-section"),
        pytest.param(lambda p: p["gates"].update(min_output_sqnr_db=30),
                     "'gates.min_output_sqnr_db' is 30, but qgate no longer has this key; set gates.max_detection_error",
                     id="replaced-gate-key-with-another-value"),
        pytest.param(lambda p: p["gates"].update(max_shift_map50_95_drop=0.03),
                     "'gates.max_shift_map50_95_drop' is 0.03, but qgate no longer has this key; set "
                     "gates.max_shift_drop (renamed: it judges the task's own metric) instead",
                     id="renamed-gate-key-with-another-value"),
        pytest.param(lambda p: p["baseline"].update(metrics="out/baseline.json"),
                     "'baseline.metrics' is 'out/baseline.json', but qgate now always writes it to "
                     "'metrics/baseline.json' (output paths are no longer params); delete the key",
                     id="retired-path-key-with-another-value"),
        pytest.param(lambda p: p["model"].update(imgsz="big"), "'model.imgsz' must be of type int", id="wrong-type"),
        pytest.param(lambda p: p["model"].update(imgsz=250), "use a multiple of 32", id="imgsz-not-stride"),
        pytest.param(lambda p: p["model"].update(imgsz=0), "'model.imgsz' is 0; use a multiple of 32 from 32 to 4096",
                     id="imgsz-zero"),
        pytest.param(lambda p: p["model"].update(imgsz=8192), "'model.imgsz' is 8192; use a multiple of 32",
                     id="imgsz-too-big"),
        pytest.param(lambda p: p["tune"].update(imgsz=[160, -32]),
                     "'tune.imgsz' has -32; list multiples of 32 from 32 to 4096", id="tune-imgsz-negative"),
        pytest.param(lambda p: p["gates"].update(max_map50_95_drop=-1),
                     "'gates.max_map50_95_drop' is -1.0; use a value in [0, 1]", id="drop-limit-negative"),
        pytest.param(lambda p: p["gates"].update(max_map50_95_drop=float("nan")),
                     "'gates.max_map50_95_drop' is nan; use a finite number", id="drop-limit-nan"),
        pytest.param(lambda p: p["tune"].update(max_seconds=float("inf")),
                     "'tune.max_seconds' is inf; use a finite number", id="seconds-infinite"),
        pytest.param(lambda p: p["gates"].update(min_speedup=-5),
                     "'gates.min_speedup' is -5.0; use a value > 0 (1.0: INT8 at least as fast)",
                     id="speedup-limit-negative"),
        pytest.param(lambda p: p["gates"].update(max_latency_ms=0),
                     "'gates.max_latency_ms' is 0.0; use a value > 0 or null (gate off)", id="latency-limit-zero"),
        pytest.param(lambda p: p["gates"].update(min_int8_score=1.5),
                     "'gates.min_int8_score' is 1.5; use a value in [0, 1] (mAP and fractions lie there) or null",
                     id="map-floor-above-one"),
        pytest.param(lambda p: p["gates"].update(max_detection_error=-0.1),
                     "'gates.max_detection_error' is -0.1; use a value >= 0", id="detection-error-negative"),
        pytest.param(lambda p: p["autofix"].update(target_drop=2),
                     "'autofix.target_drop' is 2.0; use an mAP50-95 drop in [-1, 1]", id="autofix-target-above-one"),
        pytest.param(lambda p: p["baseline"].update(inference_precision="fp32"), "use one of f32, bf16, f16",
                     id="bad-precision"),
        pytest.param(lambda p: p["baseline"].update(iou=1.5), "'baseline.iou' must be within [0, 1]",
                     id="iou-range"),
        pytest.param(lambda p: p.setdefault("deploy", {}).update(conf=1.2), "'deploy.conf' must be within [0, 1]",
                     id="deploy-conf-range"),
        pytest.param(lambda p: p.setdefault("deploy", {}).update(int8_conf=-0.1),
                     "'deploy.int8_conf' must be within [0, 1]", id="deploy-int8-conf-range"),
        pytest.param(lambda p: p["gates"].update(max_recall_drop=1.5),
                     "'gates.max_recall_drop' is 1.5; use a value in [0, 1] (mAP and fractions lie there) or null",
                     id="recall-limit-above-one"),
        pytest.param(lambda p: p.setdefault("robustness", {}).update(shifts=["fog"]),
                     "'robustness.shifts' is 'fog'; use one of dark, bright, low_contrast", id="unknown-shift"),
        pytest.param(lambda p: p.setdefault("robustness", {}).update(shifts=["dark", "dark"]),
                     "'robustness.shifts' lists a shift twice", id="shift-twice"),
        pytest.param(lambda p: p.setdefault("robustness", {}).update(severities=[0, 3]),
                     "'robustness.severities' is (0, 3); list distinct severities in 1..5", id="severity-range"),
        pytest.param(lambda p: p.setdefault("robustness", {}).update(severities=[]),
                     "'robustness.severities' is (); list distinct severities in 1..5", id="no-severity"),
        pytest.param(lambda p: p["gates"].update(max_shift_drop=-0.1),
                     "'gates.max_shift_drop' is -0.1; use a value in [0, 1]", id="shift-limit-range"),
        pytest.param(lambda p: p["sensitivity"].update(rank_quantile=0.0),
                     "'sensitivity.rank_quantile' is 0.0; use a value in (0, 1]", id="rank-quantile-range"),
        pytest.param(lambda p: p["int8_eval"].update(ci_level=1.0),
                     "'int8_eval.ci_level' is 1.0; use a level in (0, 1), e.g. 0.95", id="ci-level-range"),
        pytest.param(lambda p: p["autofix"].update(ci_level=0), "'autofix.ci_level' is 0.0; use a level in (0, 1)",
                     id="autofix-ci-level-range"),
        pytest.param(lambda p: p["int8_eval"].update(bootstrap_samples=99),
                     "'int8_eval.bootstrap_samples' is 99; use at least 100", id="too-few-resamples"),
        pytest.param(lambda p: p["gates"].update(inconclusive="maybe"),
                     "'gates.inconclusive' is 'maybe'; use one of point, pass, fail", id="inconclusive-policy"),
        pytest.param(lambda p: p["gates"].update(confidence=0.9),
                     "'gates.confidence' is 0.9 but 'int8_eval.ci_level' is 0.95: the gates judge the interval",
                     id="confidence-differs-from-the-measured-level"),
        pytest.param(lambda p: p["promote"].update(name="best.int8"),
                     "'promote.name' is 'best.int8'; use letters, digits, '-', '_' or '/'", id="registry-name"),
        pytest.param(lambda p: p["promote"].update(stage="-staging"), "'promote.stage' is '-staging'",
                     id="registry-stage"),
        pytest.param(lambda p: p["promote"].update(bump="huge"), "'promote.bump' is 'huge'; use one of patch, minor",
                     id="bump-rule"),
        pytest.param(lambda p: p["tune"]["space"].update(preset=[]), "'tune.space.preset' is empty; list at least one",
                     id="tune-empty-space"),
        pytest.param(lambda p: p["tune"]["space"].update(range_estimator=["default", "minmaxx"]),
                     "'tune.space.range_estimator' is 'minmaxx'; use one of default, minmax", id="tune-unknown-estimator"),
        pytest.param(lambda p: p["quantize"].update(range_estimator="median"),
                     "'quantize.range_estimator' is 'median'; use one of default", id="unknown-estimator"),
        pytest.param(lambda p: p["tune"].update(max_evaluations=0),
                     "'tune.max_evaluations' is 0; use an integer >= 1 (one evaluation is one candidate scored on one "
                     "subset)", id="tune-budget-below-one-evaluation"),
        pytest.param(lambda p: p["tune"].update(max_seconds=0), "'tune.max_seconds' is 0.0; use a wall-time budget > 0",
                     id="tune-no-time"),
        pytest.param(lambda p: p["benchmark"].update(repeats=1),
                     "'repeats' >= 2 (an interval needs two pairs)", id="one-benchmark-pair"),
        pytest.param(lambda p: p["demo"].update(task="classify"),
                     "'model.dataset' is data/demo/demo.yaml, but the classify demo writes data/demo: set "
                     "model.dataset to data/demo", id="classify-demo-judged-on-a-yaml"),
        pytest.param(lambda p: p["model"].update(dataset="data/demo"),
                     "'model.dataset' is data/demo, but the detect demo writes data/demo/demo.yaml",
                     id="detect-demo-judged-on-its-folder"),
        pytest.param(lambda p: p["autofix"].update(price_rounds=1),
                     "'autofix.price_rounds' is 1 and 'price_seconds' 2; use 0 rounds (no pricing) or 2 or more",
                     id="one-price-round"),
    ],
)
def test_bad_params_name_file_and_key(tmp_path, mutate, expected):
    path = _write(tmp_path, mutate)
    with pytest.raises(QgateError) as info:
        load_params(path)
    assert expected in str(info.value)
    assert str(info.value).startswith(path)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("model:\n  imgsz: [192\nbaseline: {}\n", ":3:9: not valid YAML (expected ',' or ']'",
                 id="syntax-with-line-and-column"),
    pytest.param("model:\n  weights: !!python/object/apply:os.system ['touch ran']\n",
                 ":2:12: the tag 'tag:yaml.org,2002:python/object/apply:os.system' is refused for safety",
                 id="python-tag-refused-not-called-syntax"),
])
def test_a_broken_params_file_names_line_and_column(tmp_path, text, expected):
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(QgateError) as info:
        load_params(tmp_path / "params.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'params.yaml'}{expected}"), str(info.value)
    assert not (tmp_path / "ran").exists()


def test_missing_params_file(tmp_path):
    with pytest.raises(QgateError, match="params file not found"):
        load_params(tmp_path / "nope.yaml")


def test_cli_exits_2_with_one_line(tmp_path):
    path = _write(tmp_path, lambda p: p["export"].update(opsett=17))
    result = stage("export", tmp_path, params=path)
    assert result.returncode == 2
    assert error_line(result) == (f"error: {path}: unknown key 'export.opsett'; did you mean 'export.opset'? "
                                  "(every key: docs/params.md)")
    assert "Traceback" not in result.stderr


def test_an_empty_params_file_is_every_default(tmp_path):
    (tmp_path / "params.yaml").write_text("")
    assert as_dict(load_params(tmp_path / "params.yaml")) == yaml.safe_load(DEFAULTS.read_text())


def test_a_missing_key_takes_its_default(tmp_path):
    path = _write(tmp_path, lambda p: p["benchmark"].pop("seconds"))
    assert load_params(path).benchmark.seconds == yaml.safe_load(DEFAULTS.read_text())["benchmark"]["seconds"]


def test_the_shipped_params_set_only_what_differs_or_what_dvc_yaml_reads():
    shipped = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert sum(len(section) for section in shipped.values()) <= 12
    assert as_dict(load_params(ROOT / "params.yaml")) == yaml.safe_load(DEFAULTS.read_text())  # the demo's


def test_a_params_file_of_an_earlier_release_loads_with_one_notice_and_runs(tmp_path):
    earlier = EARLIER_RELEASE.read_text()
    assert "\ncompute:" not in earlier and "  metrics: metrics/baseline.json" in earlier
    (tmp_path / "params.yaml").write_text(earlier)
    # the pipeline's first stage (it validates the file and resolves every value the stages read)
    result = subprocess.run([sys.executable, "-m", "qgate.resolve"], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "37 keys are no longer params" in notes[0] and "baseline.metrics" in notes[0]
    assert "gates.min_output_sqnr_db" in notes[0]  # a replaced gate's key, holding the value it shipped with
    assert "gates.min_int8_map50_95" in notes[0]  # a renamed one (now gates.min_int8_score), likewise
    resolved = yaml.safe_load((tmp_path / "params.resolved.yaml").read_text())
    assert resolved["compute"]["executor"] == "local"  # added since: its default
    # the same values as this release's file, but for the defaults since changed that the old file spells out:
    # a value written in params.yaml is the user's, whatever the release
    current = as_dict(load_params(ROOT / "params.yaml"))
    for (section, key), (then, now) in {("gates", "inconclusive"): ("pass", "point"),
                                        ("benchmark", "seconds"): (10, 5), ("demo", "val_images"): (100, 200)}.items():
        assert (resolved[section].pop(key), current[section].pop(key)) == (then, now)
    assert resolved == current


def test_every_key_has_a_meaning_in_the_defaults():
    docs = params_reference.key_docs(DEFAULTS.read_text())
    defaults = yaml.safe_load(DEFAULTS.read_text())

    def keys(values: dict, prefix: str = ""):
        for name, value in values.items():
            yield f"{prefix}{name}"
            if isinstance(value, dict):
                yield from keys(value, f"{prefix}{name}.")
    missing = [key for key in keys(defaults) if not docs.get(key)]
    assert not missing, f"{DEFAULTS}: add a comment saying what these mean: {missing}"


def test_the_params_reference_is_current():
    expected = params_reference.reference(DEFAULTS.read_text(), params_reference.pipeline_stages(ROOT))
    assert (ROOT / REFERENCE).read_text() == expected, f"{REFERENCE} is stale: run `python -m qgate.params_reference`"
