"""The executor `compute.executor` names: this process (`qgate.compute`) or Ray actors (`qgate.cluster`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from qgate.compute import LocalExecutor
from qgate.params import ComputeParams


@contextlib.contextmanager
def open_executor(compute: ComputeParams) -> Iterator[LocalExecutor]:
    """The executor `compute.executor` names, released (Ray actors and a private instance torn down) on exit."""
    if compute.executor == "ray":
        from qgate.cluster import RayExecutor  # Ray is imported only when asked for

        executor = RayExecutor(compute)
    else:
        executor = LocalExecutor()
    try:
        yield executor
    finally:
        executor.close()
