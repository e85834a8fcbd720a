"""The quality gates: each reads the metrics files and fails with the value, the limit and what to look at."""

from __future__ import annotations

import pytest


def test_gate(gate, verdicts):
    verdict = verdicts[gate.name]
    # kept in the JUnit XML of passed gates too: an inconclusive pass must show in CI's test view
    print(f"{verdict.state}: {verdict.message}")
    if not verdict.passed:
        pytest.fail(verdict.message, pytrace=False)
