"""Gate collection: one test per active gate of params.yaml's `gates:` section (`--params` picks the file)."""

from __future__ import annotations

import pytest

from qgate.errors import QgateError
from qgate.gates import Metrics, Verdict, active_gates, judge_all
from qgate.params import DEFAULT_PARAMS, Params, load_params


def pytest_addoption(parser):
    parser.addoption("--params", default=str(DEFAULT_PARAMS), help="params file with the gates: section")


def _params(config) -> Params:
    try:
        return load_params(config.getoption("--params"))
    except QgateError as exc:
        raise pytest.UsageError(str(exc)) from exc


def pytest_generate_tests(metafunc):
    if "gate" in metafunc.fixturenames:
        gates = active_gates(_params(metafunc.config))
        metafunc.parametrize("gate", [pytest.param(gate, id=gate.name) for gate in gates])


@pytest.fixture(scope="session")
def verdicts(request) -> dict[str, Verdict]:
    """Every active gate's verdict: the ones `qgate.judge` computed (its `judged_verdicts`), else judged here once."""
    try:
        return request.getfixturevalue("judged_verdicts")
    except pytest.FixtureLookupError:
        params = _params(request.config)
        return {v.gate: v for v in judge_all(params, Metrics(params))}
