"""Does the speed gate flap? The benchmark stage run N times on the demo, judged by the old and the new gate.

Phase 1 runs the stage N times with `gates.confidence: null` (a fixed `benchmark.repeats` pairs, no extra
ones) and takes the median INT8/FP32 ratio M over the runs. Then, for limits (a) 0.9 M and (b) 1.0 M:
the old gate (point ratio >= limit) on the phase-1 runs, and the new gate (`gates.confidence` 0.95: more
pairs while the limit is inside the interval, up to `benchmark.max_seconds`) on N fresh runs each. The goal:
(a) passes every time; (b) never both passes and fails (pass/inconclusive or fail/inconclusive only).

    python benchmarks/speed_gate.py                      # after `make gate` (the demo's IRs); ~15 min
    python benchmarks/speed_gate.py --runs 10 --seconds 2 --max-seconds 45
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

from qgate.cpu import cpu_info, describe  # noqa: E402
from qgate.verdicts import FAIL, INCONCLUSIVE, PASS, verdict  # noqa: E402
from benchmarks.workspace import ROOT, inside, rooted  # noqa: E402
from qgate.params import AutofixParams, Params, QuantizeParams, load_params  # noqa: E402
from stages import benchmark  # noqa: E402


def run_stage(params: Params, work: Path, run: str, limit: float | None, confidence: float | None) -> dict:
    """One benchmark stage run with its outputs in `work / run` and the gate settings it adapts to."""
    gates = dataclasses.replace(params.gates, min_speedup=limit if limit is not None else params.gates.min_speedup,
                                confidence=confidence)
    with inside(work / run, links=(QuantizeParams.out_dir, AutofixParams.out_dir)):
        return benchmark.main(dataclasses.replace(params, gates=gates))


def new_verdict(metrics: dict, limit: float) -> str:
    return verdict(">=", metrics["speedup_fps"], metrics["speedup_fps_ci_low"], metrics["speedup_fps_ci_high"],
                   limit, 0.95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=2, help="benchmark_app seconds per run")
    parser.add_argument("--max-seconds", type=float, default=45, help="benchmark.max_seconds for the new gate")
    args = parser.parse_args()
    base = rooted(load_params(ROOT / "params.yaml"))
    params = dataclasses.replace(base, benchmark=dataclasses.replace(
        base.benchmark, seconds=args.seconds, max_seconds=args.max_seconds, bf16=False))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fixed = [run_stage(params, work, f"point_{r}", None, None) for r in range(args.runs)]
        median = statistics.median(m["speedup_fps"] for m in fixed)
        table = []
        for name, factor in (("(a) 0.9 M", 0.9), ("(b) 1.0 M", 1.0)):
            limit = round(factor * median, 3)
            old = collections.Counter(PASS if m["speedup_fps"] >= limit else FAIL for m in fixed)
            runs = [run_stage(params, work, f"{factor}_{r}", limit, 0.95) for r in range(args.runs)]
            new = collections.Counter(new_verdict(m, limit) for m in runs)
            pairs = [m["pairs"] for m in runs]
            table.append((name, limit, old, new, min(pairs), max(pairs)))
    ratios = sorted(m["speedup_fps"] for m in fixed)
    print(f"\n{base.model.weights} at imgsz {base.model.imgsz}; CPU {describe(cpu_info())}, {os.cpu_count()} cores; "
          f"benchmark_app {base.benchmark.hint}, {args.seconds} s runs, {base.benchmark.repeats} pairs first")
    print(f"phase 1 ({args.runs} runs, {base.benchmark.repeats} pairs each): INT8/FP32 ratio median M = {median:.3f}, "
          f"range {ratios[0]:.3f}-{ratios[-1]:.3f}")
    print(f"{'limit':<12}{'value':>8}  {'old gate (point)':<22}{'new gate (95% interval, adaptive)':<42}{'pairs':>8}")
    for name, limit, old, new, low, high in table:
        old_text = f"{old[PASS]} pass, {old[FAIL]} fail"
        new_text = f"{new[PASS]} pass, {new[INCONCLUSIVE]} inconclusive, {new[FAIL]} fail"
        flaps = "  FLAPS" if new[PASS] and new[FAIL] else ""
        print(f"{name:<12}{limit:>8.3f}  {old_text:<22}{new_text + flaps:<42}{low:>4}-{high}")


if __name__ == "__main__":
    main()
