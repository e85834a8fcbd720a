"""Where work runs: an executor maps a job's pure function over items, in this process or on Ray actors.

A `Job` is module-level functions plus a payload: `setup(payload, threads)` builds a worker's state once
(a compiled model), `prepare(state, item)` and `work(state, prepared)` turn one item into its result. The
executor is chosen in `qgate.executors`, from `compute.executor`, and nowhere else; the local one never imports Ray.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Job:
    """What every worker sets up once, and the pure function it runs per item (results in item order)."""

    setup: Callable[[Any, int | None], tuple[Any, Any]]  # (payload, threads) -> (state, info for the driver)
    work: Callable[[Any, Any], Any]  # (state, prepared item) -> result
    payload: Any
    prepare: Callable[[Any, Any], Any] | None = None  # (state, item) -> prepared item; None: the item itself
    prepare_ahead: int = 0  # local only: items prepared on threads while one works (compiling while inferring)


class LocalExecutor:
    """This process: one worker state, items in order; `prepare` may run ahead on threads."""

    remote = False

    def __init__(self):
        self.infos: list = []

    def run(self, job: Job, items: Iterable) -> Iterator:
        """Each item's result, in order."""
        state, info = job.setup(job.payload, None)
        self.infos = [info]
        if job.prepare is None:
            yield from (job.work(state, item) for item in items)
            return
        with ThreadPoolExecutor(max(job.prepare_ahead, 1)) as pool:
            pending: deque = deque()
            for item in items:
                pending.append(pool.submit(job.prepare, state, item))
                if len(pending) > job.prepare_ahead:
                    yield job.work(state, pending.popleft().result())
            while pending:
                yield job.work(state, pending.popleft().result())

    def close(self) -> None:
        """Nothing to release."""


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (VmHWM; ru_maxrss would carry a parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
