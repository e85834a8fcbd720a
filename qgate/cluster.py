"""The Ray executor: actors that each hold one job's state, items spread over them, a dead worker's items retried.

Only `qgate.executors.open_executor` imports this module, and only for `compute.executor: ray`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report over the network (offline machines)

import ray  # noqa: E402
import ray.exceptions as rex  # noqa: E402

from qgate.compute import Job, peak_rss_mb  # noqa: E402
from qgate.errors import QgateError  # noqa: E402
from qgate.params import ComputeParams  # noqa: E402

log = logging.getLogger(__name__)

IN_FLIGHT_PER_WORKER = 2  # one item running, one queued: workers never idle, the driver holds few results
MAX_ATTEMPTS = 3  # an item that kills this many workers is a fault of the item, not of the cluster
JOIN_ATTEMPTS = 5  # a Ray Client head at times loses the per-driver server it forks (ray-project/ray#63202)
# how the head reports that server's death: found dead, gone while the head checked it (psutil), dead after it started
CLIENT_SERVER_DIED = ("Starting Ray client server failed", "psutil.ZombieProcess", "psutil.NoSuchProcess",
                      "Proxy failed to Connect to backend")
WORKER_LOST = (rex.RayActorError, rex.WorkerCrashedError, rex.ObjectLostError, rex.ActorUnavailableError,
               rex.NodeDiedError, rex.OwnerDiedError)
QGATE_PACKAGE = Path(__file__).resolve().parent


@ray.remote(max_restarts=0, max_task_retries=0)  # the executor retries, on another actor, with its own limit
class Worker:
    """One job's state (a compiled model) at a time, and the job's pure function run on items."""

    def __init__(self, threads: int):
        self.threads, self.job, self.state = threads, None, None

    def setup(self, job: Job, payload) -> tuple[int, object]:
        """Build the job's state from its payload (fetched from the object store); return the pid and its info."""
        self.job, self.state = job, None  # the last job's compiled model is freed before the next one compiles
        self.state, info = job.setup(payload, self.threads)
        return os.getpid(), info

    def work(self, item):
        """The job's result for one item."""
        prepared = self.job.prepare(self.state, item) if self.job.prepare else item
        return self.job.work(self.state, prepared)

    def peak_rss_mb(self) -> float:
        """This process's peak resident memory."""
        return peak_rss_mb()


class RayExecutor:
    """Ray actors on a private local instance (`compute.address: null`) or a running cluster."""

    remote = True

    def __init__(self, compute: ComputeParams):
        self.compute, self.infos, self.pids = compute, [], []
        self.where = compute.address or "a private local Ray instance"
        connect(compute)
        try:
            self.workers = self._worker_count()
            self.actors = [self._start_worker() for _ in range(self.workers)]
        except BaseException:
            ray.shutdown()
            raise
        self.job: Job | None = None
        self.payload = None
        log.info("ray: %d workers of %d CPU(s) each on %s", self.workers, compute.cpus_per_worker, self.where)

    def run(self, job: Job, items: Iterable) -> Iterator:
        """Each item's result, in item order; a dead worker's items go to the others."""
        try:
            yield from self._run(job, items)
        except ConnectionError as exc:  # Ray Client (ray://) lost the head for longer than its grace period
            raise self._gone(f"connection lost: {_why(exc)}") from None

    def _run(self, job: Job, items: Iterable) -> Iterator:
        self.job, self.payload = dataclasses.replace(job, payload=None), ray.put(job.payload)
        self._setup(self.actors)
        queue, attempts = deque(), {}
        source = enumerate(items)
        running: dict = {}  # result ref -> (index, item, actor)
        done: dict = {}
        next_index = 0
        while True:
            self._submit(queue, source, running)
            if not running:
                break
            ready, _ = ray.wait(list(running), num_returns=1, timeout=self.compute.timeout_s)
            if not ready:
                raise self._gone(f"no result in compute.timeout_s={self.compute.timeout_s} s")
            index, item, actor = running.pop(ready[0])
            try:
                done[index] = _get(ready[0])
            except WORKER_LOST as exc:
                attempts[index] = attempts.get(index, 1) + 1
                if attempts[index] > MAX_ATTEMPTS:
                    raise QgateError(f"item {index} of the job lost {MAX_ATTEMPTS} Ray workers in a row ({_why(exc)}); "
                                     "it is likely too big for a worker's memory: raise the cluster's memory "
                                     "or lower compute.shard_images") from None
                self._lose(actor, exc)
                queue.appendleft((index, item))
                continue
            while next_index in done:
                yield done.pop(next_index)
                next_index += 1

    def peak_rss_mb(self) -> list[float]:
        """Each live worker's peak resident memory (MB)."""
        return ray.get([actor.peak_rss_mb.remote() for actor in self.actors], timeout=self.compute.timeout_s)

    def close(self) -> None:
        """Stop the workers and disconnect (a private instance is shut down with them); best effort.

        Never a Ray call once disconnected: Ray would start a new local instance for it.
        """
        if ray.is_initialized():
            with contextlib.suppress(Exception):  # a cluster that is gone must not hide why the run failed
                for actor in getattr(self, "actors", []):
                    ray.kill(actor)
        ray.shutdown()

    def _worker_count(self) -> int:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        per_worker = self.compute.cpus_per_worker
        workers = self.compute.workers or cpus // per_worker
        if workers < 1 or workers * per_worker > cpus:
            raise QgateError(f"compute.workers x compute.cpus_per_worker = {max(workers, 1)} x {per_worker} CPUs, but "
                             f"the Ray cluster at {self.where} has {cpus}; lower them or add nodes")
        return workers

    def _start_worker(self):
        cpus = self.compute.cpus_per_worker
        return Worker.options(num_cpus=cpus).remote(cpus)

    def _setup(self, actors: list) -> None:
        """Every actor builds the current job's state; one that died on the way is dropped."""
        refs = {actor.setup.remote(self.job, self.payload): actor for actor in actors}
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=self.compute.timeout_s)
        if late:
            raise self._gone(f"{len(late)} worker(s) not ready in compute.timeout_s={self.compute.timeout_s} s")
        self.infos, self.pids = [], []
        for ref in ready:
            try:
                pid, info = _get(ref)
            except WORKER_LOST as exc:
                self._lose(refs[ref], exc, replace=False)
                continue
            self.pids.append(pid)
            self.infos.append(info)
        if not self.actors:
            raise self._gone("every worker died while loading the model")

    def _submit(self, queue: deque, source: Iterator, running: dict) -> None:
        """Fill every worker up to IN_FLIGHT_PER_WORKER items: retried ones first, then new ones."""
        load = {actor: 0 for actor in self.actors}
        for _, _, actor in running.values():
            load[actor] = load.get(actor, 0) + 1
        for actor in self.actors:
            while load[actor] < IN_FLIGHT_PER_WORKER:
                if not queue:
                    entry = next(source, None)
                    if entry is None:
                        return
                    queue.append(entry)
                index, item = queue.popleft()
                running[actor.work.remote(item)] = (index, item, actor)
                load[actor] += 1

    def _lose(self, actor, exc: Exception, replace: bool = True) -> None:
        """Drop a dead worker; when none is left, start a fresh set (a cluster that cannot is gone)."""
        if actor in self.actors:
            self.actors.remove(actor)
            log.warning("ray: a worker died (%s); its items are retried on the %d others", _why(exc),
                        len(self.actors))
        if not self.actors and replace:
            log.warning("ray: no worker left; starting %d new ones", self.workers)
            self.actors = [self._start_worker() for _ in range(self.workers)]
            self._setup(self.actors)

    def _gone(self, why: str) -> QgateError:
        return QgateError(f"compute: the Ray cluster at {self.where} is gone or stuck ({why}); check it "
                          "(`ray status`) or set compute.executor: local")


def connect(compute: ComputeParams) -> None:
    """Start a private Ray instance or join `compute.address`; an unreachable cluster is a one-line error."""
    runtime_env = {"py_modules": [str(QGATE_PACKAGE)]}  # the cluster needs qgate's code, not a shared disk
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
               "runtime_env": runtime_env}
    address = compute.address
    if address is None:
        ray.init(address="local", **options)
        return
    if address != "auto":
        _check_reachable(address, compute.timeout_s)
    try:
        _join(address, options)
    except (ConnectionError, RuntimeError, rex.RayError) as exc:
        raise QgateError(f"compute.address {address!r}: cannot join the Ray cluster ({_why(exc)}); start it "
                         "(`ray start --head`), fix the address, give its token (RAY_AUTH_TOKEN) if it uses token "
                         "authentication, or set compute.address: null") from None


def _join(address: str, options: dict) -> None:
    """ray.init, joined again when a Ray Client head's server for this driver died starting (a Ray race)."""
    for attempt in range(1, JOIN_ATTEMPTS + 1):
        try:
            ray.init(address=address, **options)
            return
        except ConnectionAbortedError as exc:  # ray.init has already disconnected the failed client
            if not any(why in str(exc) for why in CLIENT_SERVER_DIED):
                raise
            if attempt == JOIN_ATTEMPTS:
                raise QgateError(f"compute.address {address!r}: the head's Ray Client server for this driver died "
                                 f"starting {JOIN_ATTEMPTS} times ({_why(exc)}); restart the head, or run the gate "
                                 "on a node of the cluster with compute.address: auto") from None
            log.warning("ray: the head's server for this driver died starting (%s); joining again, attempt %d of %d",
                        _why(exc), attempt + 1, JOIN_ATTEMPTS)


def _check_reachable(address: str, timeout: float) -> None:
    """A TCP connect first: ray.init retries an unreachable address for minutes."""
    host, port = address.removeprefix("ray://").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=min(timeout, 10)).close()
    except OSError as exc:
        raise QgateError(f"compute.address {address!r}: nothing answers at {host}:{port} ({exc.strerror or exc}); "
                         "start the cluster (`ray start --head`), fix the address, or set compute.address: null") \
            from None


def _get(ref):
    """A task's result; an error the task raised on bad input comes back as the same one-line error."""
    try:
        return ray.get(ref)
    except rex.RayTaskError as exc:
        if isinstance(exc.cause, QgateError):
            raise QgateError(str(exc.cause)) from None
        raise


def _why(exc: BaseException) -> str:
    """An exception in one line: its first and, for a server's traceback, its last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return (lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}")[:300]
