"""`tune`'s search: candidates raced on growing subsets of the val images, then the fastest passing one by speed pairs.

Pure logic over measured numbers (no model code): the stage supplies a `score` function and the benchmark runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from qgate.intervals import Interval, ratio_interval
from qgate.verdicts import decide

RACING, PASSED, DROPPED, FAILED, UNFINISHED, SAME = "racing", "passed", "dropped", "failed", "unfinished", "same model"


@dataclass
class Candidate:
    """One quantize config in the race: what it sets, how far it got, and why it stopped."""

    name: str
    settings: dict
    images: int = 0  # val images its latest drops were measured on
    evaluations: int = 0
    drops: dict[str, Interval] = field(default_factory=dict)  # metric family key -> drop FP32 - candidate
    images_per_second: float = 0.0  # the evaluation loop's on its latest subset (benchmark_app judges speed)
    status: str = RACING
    why: str = ""


@dataclass(frozen=True)
class Limit:
    """One accuracy gate a candidate must pass: the family's key, its title and `gates.max_..._drop`."""

    key: str
    title: str
    limit: float


@dataclass(frozen=True)
class Budget:
    """What the race may spend: candidate scorings and wall seconds (no scoring starts after them)."""

    evaluations: int
    seconds: float


def subset_sizes(total: int, first: int) -> list[int]:
    """Images per round: `first`, doubled each round, the whole split last."""
    sizes, size = [], min(first, total)
    while size < total:
        sizes.append(size)
        size *= 2
    return [*sizes, total]


class Race:
    """Successive rounds over growing image subsets (the first `n` of a seeded order, nested round to round).

    After each subset a candidate whose drop interval lies wholly above a gate's limit is dropped: more images
    narrow the interval around its drop, they do not move it below the limit. On the whole split the
    candidate is judged as `make gate` judges it (`gates.confidence`, `gates.inconclusive`).
    """

    def __init__(self, candidates: list[Candidate], limits: list[Limit], total: int, first: int, budget: Budget,
                 confidence: float | None, policy: str):
        self.candidates, self.limits, self.budget = candidates, limits, budget
        self.sizes = subset_sizes(total, first)
        self.confidence, self.policy = confidence, policy
        self.evaluations, self.start = 0, None  # the budget counts from the first run, over every run

    def run(self, score: Callable[[Candidate, int], tuple[dict[str, Interval], float]],
            twin: Callable[[Candidate], str] = lambda candidate: "") -> list[Candidate]:
        """Score the racing candidates round by round; `score(candidate, n)` measures it on the first n images.

        `twin(candidate)` names an earlier candidate whose INT8 model is the same one ('' if none): settings
        that change nothing (NNCF's default range estimator is one of the named ones) are not scored twice.
        Candidates `add`ed after a run race in the next one, within what is left of the budget.
        """
        if self.start is None:
            self.start = time.perf_counter()
        for size in self.sizes:
            for candidate in self.racing():
                spent = self.spent()
                if spent:
                    candidate.status, candidate.why = UNFINISHED, spent
                    continue
                if size == self.sizes[0] and (same := twin(candidate)):
                    candidate.status, candidate.why = SAME, f"the same INT8 model as {same}"
                    continue
                candidate.drops, candidate.images_per_second = score(candidate, size)
                candidate.images, self.evaluations = size, self.evaluations + 1
                candidate.evaluations += 1
                self._judge(candidate, final=size == self.sizes[-1])
        return self.candidates

    def racing(self) -> list[Candidate]:
        """The candidates still in the race, in search order."""
        return [c for c in self.candidates if c.status == RACING]

    def add(self, candidates: list[Candidate]) -> None:
        """More candidates, to race in the next `run`."""
        self.candidates.extend(candidates)

    def spent(self) -> str:
        """Which budget is spent ('' while neither is)."""
        if self.evaluations >= self.budget.evaluations:
            return f"budget: tune.max_evaluations {self.budget.evaluations} spent"
        if self.start is not None and time.perf_counter() - self.start >= self.budget.seconds:
            return f"budget: tune.max_seconds {self.budget.seconds:g} spent"
        return ""

    def _judge(self, candidate: Candidate, final: bool) -> None:
        for limit in self.limits:
            drop = candidate.drops[limit.key]
            if not final and drop.low > limit.limit:
                candidate.status = DROPPED
                candidate.why = (f"{limit.title} drop {drop.text()} above the limit {limit.limit:g} on "
                                 f"{candidate.images} images")
                return
            if final:
                state, passed = decide("<=", drop.point, drop.low, drop.high, limit.limit, self.confidence,
                                       self.policy)
                if not passed:
                    candidate.status = FAILED
                    candidate.why = f"{limit.title} drop {drop.text()} {state} against the limit {limit.limit:g}"
                    return
        if final:
            candidate.status = PASSED


@dataclass(frozen=True)
class Fastest:
    """The chosen candidate, every benchmarked candidate's speed-up over FP32, and which ones another beat."""

    chosen: str
    speedups: dict[str, Interval]
    beaten_by: dict[str, str]  # candidate -> a candidate faster beyond noise ('' when none is)
    rounds: int  # interleaved benchmark rounds the chosen one ran

    def why(self, name: str) -> str:
        """Why candidate `name` was not chosen ('' for the chosen one): another one is faster beyond noise, or it
        is within noise of the chosen one, which comes first in the search (c0, then tune.space's order)."""
        if name == self.chosen:
            return ""
        if self.beaten_by[name]:
            return f"{self.beaten_by[name]} is faster beyond noise"
        return f"within noise of {self.chosen}, which comes first in the search"


def pair_level(level: float, candidates: int) -> float:
    """The level of each candidate-to-candidate ratio interval, so that all of them together hold at `level`
    (Bonferroni over the pairs: three candidates make three claims, and one in twenty ties would look decided at
    95% each)."""
    pairs = max(1, candidates * (candidates - 1) // 2)
    return 1 - (1 - level) / pairs


def fastest(order: list[str], speeds: dict[str, list[float]], fp32: list[float], level: float) -> Fastest:
    """The first candidate in search order that no other one beats beyond noise.

    `speeds` are per-round measurements (interleaved rounds: index i of every list ran in the same round),
    higher is faster. A candidate beats another when their paired speed ratio's interval (at `pair_level`) lies
    above 1: a point value inside the noise never decides, so the earlier config (c0 first) is kept on a tie.
    """
    beaten_by, per_pair = {}, pair_level(level, len(order))
    for name in order:
        beaten_by[name] = next((other for other in order if other != name and
                                ratio_interval(speeds[other], speeds[name], per_pair).low > 1.0), "")
    unbeaten = [name for name in order if not beaten_by[name]]
    chosen = unbeaten[0] if unbeaten else max(order, key=lambda n: sorted(speeds[n])[len(speeds[n]) // 2])
    return Fastest(chosen, {name: ratio_interval(speeds[name], fp32, level) for name in order}, beaten_by, len(fp32))


def contested(result: Fastest, speeds: dict[str, list[float]], level: float, spread: float) -> str:
    """Why more rounds could change the choice ('' when they could not): a finalist that ran faster than the
    chosen one on the point value, but not beyond noise, with a ratio interval still wider than `spread` of the
    ratio either way (`benchmark.max_spread`: a ratio known that well is a tie, more rounds would not decide)."""
    per_pair = pair_level(level, len(speeds))
    for name in speeds:
        if name != result.chosen:
            ratio = ratio_interval(speeds[name], speeds[result.chosen], per_pair)
            if ratio.point > 1.0 >= ratio.low and (ratio.high - ratio.low) / 2 > spread * ratio.point:
                return f"{name} ran {ratio.point:.2f}x the speed of {result.chosen}, within a wide interval"
    return ""
