"""params.yaml loading: unknown, missing and mistyped keys are one-line errors naming file and key."""

from __future__ import annotations

import pytest
import yaml

from qgate.errors import QgateError
from qgate.params import load_params
from tests.conftest import ROOT, error_line, stage


def _write(tmp_path, mutate) -> str:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
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
        pytest.param(lambda p: p["model"].pop("imgsz"), "missing key 'model.imgsz'", id="missing-key"),
        pytest.param(lambda p: p["model"].update(imgsz="big"), "'model.imgsz' must be of type int", id="wrong-type"),
        pytest.param(lambda p: p["model"].update(imgsz=250), "use a multiple of 32", id="imgsz-not-stride"),
        pytest.param(lambda p: p["baseline"].update(inference_precision="fp32"), "use one of f32, bf16, f16",
                     id="bad-precision"),
        pytest.param(lambda p: p["baseline"].update(iou=1.5), "'baseline.iou' must be within [0, 1]",
                     id="iou-range"),
        pytest.param(lambda p: p["sensitivity"].update(rank_quantile=0.0),
                     "'sensitivity.rank_quantile' is 0.0; use a value in (0, 1]", id="rank-quantile-range"),
        pytest.param(lambda p: p["int8_eval"].update(ci_level=1.0),
                     "'int8_eval.ci_level' is 1.0; use a level in (0, 1), e.g. 0.95", id="ci-level-range"),
        pytest.param(lambda p: p["autofix"].update(ci_level=0), "'autofix.ci_level' is 0.0; use a level in (0, 1)",
                     id="autofix-ci-level-range"),
        pytest.param(lambda p: p["int8_eval"].update(bootstrap_samples=99),
                     "'int8_eval.bootstrap_samples' is 99; use at least 100", id="too-few-resamples"),
        pytest.param(lambda p: p["gates"].update(inconclusive="maybe"),
                     "'gates.inconclusive' is 'maybe'; use one of fail, pass", id="inconclusive-policy"),
        pytest.param(lambda p: p["gates"].update(confidence=0.9),
                     "'gates.confidence' is 0.9 but 'int8_eval.ci_level' is 0.95: the gates judge the interval",
                     id="confidence-differs-from-the-measured-level"),
        pytest.param(lambda p: p["promote"].update(name="best.int8"),
                     "'promote.name' is 'best.int8'; use letters, digits, '-', '_' or '/'", id="registry-name"),
        pytest.param(lambda p: p["promote"].update(stage="-staging"), "'promote.stage' is '-staging'",
                     id="registry-stage"),
        pytest.param(lambda p: p["promote"].update(bump="huge"), "'promote.bump' is 'huge'; use one of patch, minor",
                     id="bump-rule"),
        pytest.param(lambda p: p["benchmark"].update(repeats=1),
                     "'repeats' >= 2 (an interval needs two pairs)", id="one-benchmark-pair"),
    ],
)
def test_bad_params_name_file_and_key(tmp_path, mutate, expected):
    path = _write(tmp_path, mutate)
    with pytest.raises(QgateError) as info:
        load_params(path)
    assert expected in str(info.value)
    assert str(info.value).startswith(path)


def test_missing_params_file(tmp_path):
    with pytest.raises(QgateError, match="params file not found"):
        load_params(tmp_path / "nope.yaml")


def test_cli_exits_2_with_one_line(tmp_path):
    path = _write(tmp_path, lambda p: p["export"].update(opsett=17))
    result = stage("export", tmp_path, params=path)
    assert result.returncode == 2
    assert error_line(result) == (f"error: {path}: unknown key 'export.opsett'; did you mean 'export.opset'?")
    assert "Traceback" not in result.stderr
