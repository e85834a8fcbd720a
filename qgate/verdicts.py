"""The three-valued verdict of one measured value against a limit, and whether a policy counts it as passed.

Pure Python: the gates that judge committed metrics import this and nothing heavier (no NumPy, no OpenVINO).
"""

from __future__ import annotations

import math

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


def meets(direction: str, value: float, limit: float) -> bool:
    """Whether `value` is on the passing side of `limit` ('<=': at most the limit, '>=': at least)."""
    return value <= limit if direction == "<=" else value >= limit


def verdict(direction: str, point: float, low: float | None, high: float | None, limit: float,
            confidence: float | None) -> str:
    """pass, fail or inconclusive: on the point value, or (with a `confidence` and an interval) on its bounds.

    The whole interval on the passing side passes, the whole interval on the failing side fails; a limit
    inside the interval is inconclusive: these images (or benchmark pairs) cannot tell.
    """
    if confidence is None or low is None or high is None:
        return PASS if meets(direction, point, limit) else FAIL
    failing_bound, passing_bound = (high, low) if direction == "<=" else (low, high)
    if meets(direction, failing_bound, limit):
        return PASS
    return INCONCLUSIVE if meets(direction, passing_bound, limit) else FAIL


def accepted(state: str, policy: str, point_meets: bool) -> bool:
    """Whether a verdict counts as passed under the `gates.inconclusive` policy (point | pass | fail)."""
    if state == INCONCLUSIVE:
        return point_meets if policy == "point" else policy == "pass"
    return state == PASS


def decide(direction: str, point: float, low: float | None, high: float | None, limit: float,
           confidence: float | None, policy: str) -> tuple[str, bool]:
    """The verdict and whether it counts as passed: one computation for the gates, autofix and the report."""
    state = verdict(direction, point, low, high, limit, confidence)
    return state, accepted(state, policy, meets(direction, point, limit))


def samples_to_resolve(point: float, low: float, high: float, limit: float, samples: int) -> int | None:
    """About how many samples (images, benchmark pairs) would put `limit` outside the interval around `point`.

    An interval's half-width shrinks like 1/sqrt(samples); the side of the interval that faces the limit must
    shrink to the distance from the point to the limit. None when the point sits on the limit (no sample
    count resolves it).
    """
    gap = abs(limit - point)
    if gap == 0:
        return None
    reach = (high - point) if limit > point else (point - low)
    return max(samples + 1, math.ceil(samples * (reach / gap) ** 2))
