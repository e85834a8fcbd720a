"""The three-valued verdict of one measured value against a limit, and whether a policy counts it as passed.

Pure Python: the gates that judge committed metrics import this and nothing heavier (no NumPy, no OpenVINO).
"""

from __future__ import annotations

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


def verdict(direction: str, point: float, low: float | None, high: float | None, limit: float,
            confidence: float | None) -> str:
    """pass, fail or inconclusive: on the point value, or (with a `confidence` and an interval) on its bounds.

    The whole interval on the passing side passes, the whole interval on the failing side fails; a limit
    inside the interval is inconclusive: these images (or benchmark pairs) cannot tell.
    """
    def ok(value: float) -> bool:
        return value <= limit if direction == "<=" else value >= limit

    if confidence is None or low is None or high is None:
        return PASS if ok(point) else FAIL
    failing_bound, passing_bound = (high, low) if direction == "<=" else (low, high)
    if ok(failing_bound):
        return PASS
    return INCONCLUSIVE if ok(passing_bound) else FAIL


def accepted(state: str, inconclusive: str) -> bool:
    """Whether a verdict counts as passed under the `gates.inconclusive` policy (pass | fail)."""
    return state == PASS or (state == INCONCLUSIVE and inconclusive == "pass")
