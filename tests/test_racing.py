"""qgate.racing: a candidate beyond the limit is dropped after the first subset; speed decides only beyond noise."""

from __future__ import annotations

import pytest

from qgate.intervals import PairedScorer, difference
from qgate.racing import (DROPPED, FAILED, PASSED, UNFINISHED, Budget, Candidate, Limit, Race, contested, fastest,
                          pair_level, subset_sizes)
from tests.test_intervals import _subset, synthetic_pair

IMAGES = 200
LIMIT = Limit("map50_95", "mAP50-95", 0.01)


@pytest.mark.parametrize("total, first, expected", [(200, 50, [50, 100, 200]), (100, 50, [50, 100]),
                                                    (30, 50, [30]), (120, 50, [50, 100, 120])])
def test_subsets_double_up_to_the_whole_split(total, first, expected):
    assert subset_sizes(total, first) == expected


def scored_race(budget: Budget = Budget(40, 600)) -> tuple[Race, dict[str, int]]:
    """A race of an exact copy of the reference model ('same') and a planted worse one ('worse': it misses a
    quarter of the objects), scored with real paired bootstraps on the first n of 200 synthetic images."""
    ground_truth, reference, worse = synthetic_pair(IMAGES, seed=11)
    models = {"same": [dict(d) for d in reference], "worse": worse}
    calls = {name: 0 for name in models}

    def score(candidate: Candidate, size: int):
        calls[candidate.name] += 1
        truth, fp32 = _subset(ground_truth, reference, set(range(size)))
        scorer = PairedScorer(truth, samples=300, seed=0)
        _, detections = _subset(ground_truth, models[candidate.name], set(range(size)))
        return {LIMIT.key: difference(scorer.scores(fp32)[0], scorer.scores(detections)[0], 0.95)}, 100.0

    race = Race([Candidate("worse", {}), Candidate("same", {})], [LIMIT], IMAGES, 50, budget, 0.95, "point")
    race.run(score)
    return race, calls


def test_a_candidate_beyond_the_limit_is_dropped_after_the_first_subset():
    race, calls = scored_race()
    worse, same = race.candidates
    assert worse.status == DROPPED and worse.images == 50 and calls["worse"] == 1 and worse.evaluations == 1
    assert worse.drops[LIMIT.key].low > LIMIT.limit and "above the limit 0.01 on 50 images" in worse.why
    assert same.status == PASSED and same.images == IMAGES and calls["same"] == 3
    assert race.evaluations == 4


def test_the_budget_leaves_candidates_unfinished_and_counts_scorings():
    race, calls = scored_race(Budget(evaluations=2, seconds=600))
    worse, same = race.candidates
    assert race.evaluations == 2 and calls == {"worse": 1, "same": 1}
    assert same.status == UNFINISHED and same.images == 50 and "tune.max_evaluations 2" in same.why


def test_the_whole_split_is_judged_like_the_gate():
    def score(candidate: Candidate, size: int):  # inside the interval at every size: only the last one judges
        from qgate.intervals import Interval

        return {LIMIT.key: Interval(0.012, 0.004, 0.02, 0.95)}, 1.0

    for policy, status in (("point", FAILED), ("pass", PASSED), ("fail", FAILED)):
        race = Race([Candidate("c0", {})], [LIMIT], 100, 50, Budget(10, 60), 0.95, policy)
        (candidate,) = race.run(score)
        assert candidate.status == status and candidate.evaluations == 2, policy


FP32 = [100.0, 101.0, 99.0, 100.0]
STEADY = [150.0, 152.0, 149.0, 151.0]


def test_a_faster_point_within_noise_is_not_preferred():
    within_noise = [152.0, 150.0, 151.0, 153.0]  # a higher median than STEADY's, the ratio's interval holds 1
    result = fastest(["current", "other"], {"current": STEADY, "other": within_noise}, FP32, 0.95)
    assert result.chosen == "current" and result.beaten_by == {"current": "", "other": ""}
    assert result.speedups["other"].point > result.speedups["current"].point
    assert result.why("current") == ""
    assert result.why("other") == "within noise of current, which comes first in the search"


def test_a_candidate_faster_beyond_noise_is_chosen():
    faster = [200.0, 203.0, 198.0, 201.0]
    result = fastest(["current", "faster"], {"current": STEADY, "faster": faster}, FP32, 0.95)
    assert result.chosen == "faster" and result.beaten_by["current"] == "faster"
    assert result.why("current") == "faster is faster beyond noise"
    assert 1.9 < result.speedups["faster"].low < result.speedups["faster"].high < 2.1


def test_a_pair_that_decides_between_two_finalists_is_a_tie_among_three():
    """Three finalists make three pairwise claims: each ratio's interval is wider (Bonferroni), so a 1.6% gain
    that is beyond noise at 95% with one pair no longer decides with three."""
    other = [152.0, 156.0, 150.0, 154.0]  # 1.017x STEADY: [1.003, 1.030] at 95%, [0.996, 1.037] at 98.3%
    two = {"current": STEADY, "other": other}
    assert fastest(list(two), two, FP32, 0.95).chosen == "other"
    three = {**two, "slow": [140.0, 141.0, 139.0, 140.0]}
    result = fastest(list(three), three, FP32, 0.95)
    assert result.chosen == "current" and result.beaten_by == {"current": "", "other": "", "slow": "current"}
    assert pair_level(0.95, 3) == pytest.approx(1 - 0.05 / 3) and pair_level(0.95, 1) == 0.95


def test_more_rounds_are_asked_for_only_while_a_faster_point_is_within_a_wide_interval():
    noisy = {"current": STEADY, "other": [120.0, 195.0, 150.0, 175.0]}  # 1.05x [0.76, 1.45]: more rounds may decide
    assert "other" in contested(fastest(["current", "other"], noisy, FP32, 0.95), noisy, 0.95, 0.15)
    tie = {"current": STEADY, "other": [152.0, 150.0, 151.0, 153.0]}  # 1.01x [0.99, 1.03]: a tie, known well
    assert contested(fastest(["current", "other"], tie, FP32, 0.95), tie, 0.95, 0.15) == ""
    slower = {"current": STEADY, "other": [120.0, 185.0, 140.0, 150.0]}  # within noise, but slower on the point
    assert contested(fastest(["current", "other"], slower, FP32, 0.95), slower, 0.95, 0.15) == ""
    decided = {"current": STEADY, "faster": [200.0, 203.0, 198.0, 201.0]}
    assert contested(fastest(["current", "faster"], decided, FP32, 0.95), decided, 0.95, 0.15) == ""
