"""What a PR's metrics diff must say first: whether the base branch judged another model or timed another CPU.

`python -m qgate.base_diff origin/main` prints markdown notes (nothing when both match) for the job summary,
above `dvc metrics diff`: a difference between two models, or two machines, is not a regression.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from qgate.cpu import describe
from qgate.params import BenchmarkParams, ExportParams


def committed(ref: str, path: str) -> dict | None:
    """A JSON file as `ref` has it (None when that commit has no such file or it does not parse)."""
    shown = subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, text=True)
    try:
        return json.loads(shown.stdout) if shown.returncode == 0 else None
    except ValueError:
        return None


def current(path: str) -> dict | None:
    """A JSON file in the work tree (None when missing or unreadable)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def notes(ref: str, base: dict, head: dict) -> list[str]:
    """The caveats for comparing `head`'s metrics with `ref`'s (`base`/`head`: export record and benchmark)."""
    found = []
    base_export, head_export = base.get("export") or {}, head.get("export") or {}
    base_model, head_model = base_export.get("model_sha256"), head_export.get("model_sha256")
    if base_model and head_model and base_model != head_model:
        found.append(f"**{ref} judged another model** ({base_export.get('weights')}, sha256 {base_model[:12]}) "
                     f"than this branch ({head_export.get('weights')}, {head_model[:12]}): the diff below "
                     "compares two models, not one model's change.")
    base_cpu, head_cpu = _cpu(base.get("benchmark")), _cpu(head.get("benchmark"))
    if base_cpu != head_cpu:
        found.append(f"**Speed was measured on another CPU**: {ref} on {base_cpu}, this branch on {head_cpu}. "
                     "INT8/FP32 ratios differ between CPUs (AVX2-only gains less than VNNI or AMX), so a speed "
                     "difference below is the machines', not a regression.")
    return found


def _cpu(benchmark: dict | None) -> str:
    if not benchmark or "cpu_model" not in benchmark:
        return "an unrecorded CPU"
    return describe(benchmark)


def main(ref: str) -> list[str]:
    """Print and return the notes for `ref` against the work tree."""
    paths = {"export": ExportParams.record, "benchmark": BenchmarkParams.metrics}
    found = notes(ref, {k: committed(ref, p) for k, p in paths.items()}, {k: current(p) for k, p in paths.items()})
    for note in found:
        print(f"> {note}\n")
    return found


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m qgate.base_diff GIT_REF   (e.g. origin/main)")
    main(sys.argv[1])
