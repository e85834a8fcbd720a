"""Which runtime, on this CPU: the side-by-side table `make runtimes` writes and the report shows."""

from __future__ import annotations

import csv
from pathlib import Path

from qgate.deploy import RUNTIMES

FP32_AGREEMENT = 0.002  # FP32 mAP50-95 runtimes must share: the same model and images, only float rounding differs
COLUMNS = ["runtime", "version", "quantizer", "fp32_map50_95", "fp32_differs_by", "int8_map50_95_drop",
           "drop_ci_low", "drop_ci_high", "accuracy", "fp32_fps", "int8_fps", "speedup", "speedup_ci_low",
           "speedup_ci_high", "speed", "int8_fps_over_fastest", "over_fastest_ci_low", "over_fastest_ci_high",
           "passes"]
HEADER = ["runtime", "quantizer", "FP32 mAP50-95", "INT8 drop [interval]", "accuracy", "FP32 / INT8 FPS",
          "speed-up [interval]", "speed", "INT8 FPS / fastest's"]


def answer(chosen: str, cpu: str) -> str:
    """The line that answers the question, naming the CPU."""
    if not chosen:
        return f"No runtime's INT8 model passes both the accuracy and speed gates on {cpu}."
    return (f"**{RUNTIMES[chosen].title}** is the fastest runtime whose INT8 model passes the accuracy and speed "
            f"gates, beyond noise, on {cpu}.")


def cells(row: dict) -> list[str]:
    """One runtime's row of the table (values as the CSV holds them: numbers or their text)."""
    r = {k: (float(v) if k not in ("runtime", "version", "quantizer", "accuracy", "speed") else v)
         for k, v in row.items()}
    differs = (f" ({r['fp32_differs_by']:+.4f}: beyond {FP32_AGREEMENT}, the runtimes disagree on the FP32 model; "
               "compare `inference_precision` in their baselines)" if abs(r["fp32_differs_by"]) > FP32_AGREEMENT
               else "")
    return [f"{RUNTIMES[r['runtime']].title} {r['version']}", r["quantizer"], f"{r['fp32_map50_95']:.4f}{differs}",
            f"{r['int8_map50_95_drop']:+.4f} [{r['drop_ci_low']:+.4f}, {r['drop_ci_high']:+.4f}]", r["accuracy"],
            f"{r['fp32_fps']:.0f} / {r['int8_fps']:.0f}",
            f"{r['speedup']:.2f}x [{r['speedup_ci_low']:.2f}, {r['speedup_ci_high']:.2f}]", r["speed"],
            f"{r['int8_fps_over_fastest']:.2f} [{r['over_fastest_ci_low']:.2f}, {r['over_fastest_ci_high']:.2f}]"]


def markdown(rows: list[dict], chosen: str, cpu: str) -> str:
    """The answer, then the table."""
    lines = [answer(chosen, cpu), "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cells(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def read_rows(path: str | Path) -> list[dict]:
    """The rows `make runtimes` wrote; empty when it has not run."""
    if not Path(path).is_file():
        return []
    with open(path) as handle:
        return list(csv.DictReader(handle))
