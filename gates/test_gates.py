"""The quality gates: each reads the metrics files and fails with the value, the limit and what to look at."""

from __future__ import annotations

import pytest

from qgate.gates import judge


def test_gate(gate, metrics):
    verdict = judge(gate, metrics)
    if not verdict.passed:
        pytest.fail(verdict.message, pytrace=False)
