"""Interleaved speed rounds: one timed run of every model, back to back, on whichever runtime judges them."""

from __future__ import annotations

import logging
from pathlib import Path

from qgate.params import BenchmarkParams

log = logging.getLogger(__name__)


def speed_round(runtime, models: dict[str, Path], precision: str, cfg: BenchmarkParams, report_dir: Path, imgsz: int,
                speeds: dict[str, list[float]], label: str) -> None:
    """One timed run (`runtime.timed_run`) of every model, back to back, appended to `speeds[name]`: higher is
    faster (FPS under the throughput hint, 1000 / median latency in ms under latency). Interleaved rounds pair
    the models' runs."""
    for name, path in models.items():
        index = len(speeds.setdefault(name, []))
        log.info("[round %d] %s benchmark: %s (%s, %d s)", index + 1, label, name, cfg.hint, cfg.seconds)
        run = runtime.timed_run(path, precision, cfg, report_dir / f"{name}_{index}", imgsz)
        speeds[name].append(run["fps"] if cfg.hint == "throughput" else 1000.0 / run["latency_ms"])
