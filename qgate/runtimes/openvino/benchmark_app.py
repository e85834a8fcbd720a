"""One benchmark_app run of an IR: its latency and throughput, or a one-line error naming the IR."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from qgate.errors import QgateError
from qgate.io import read_json
from qgate.params import BenchmarkParams

log = logging.getLogger(__name__)


def run_benchmark_app(ir: Path, precision: str, cfg: BenchmarkParams, report_dir: Path, imgsz: int) -> dict:
    """One benchmark_app run; returns latency (median, ms), throughput (FPS) and iterations."""
    report_dir.mkdir(parents=True, exist_ok=True)  # benchmark_app crashes after the run if it is missing
    command = [str(Path(sys.executable).parent / "benchmark_app"), "-m", str(ir), "-d", cfg.device,
               "-hint", cfg.hint, "-t", str(cfg.seconds), "-infer_precision", precision,
               "-report_type", "no_counters", "-report_folder", str(report_dir), "-json_stats"]
    if cfg.batch > 1:
        command += ["-shape", f"[{cfg.batch},3,{imgsz},{imgsz}]"]
    done = subprocess.run(_dies_with_this_process(command), capture_output=True, text=True)
    report = report_dir / "benchmark_report.json"
    if done.returncode != 0 or not report.is_file():
        raise QgateError(f"{ir}: benchmark_app failed (exit {done.returncode}): {error_text(done)}")
    results = read_json(report)["execution_results"]
    return {"latency_ms": float(results["latency (ms)"]), "fps": float(results["throughput"]),
            "iterations": int(results["total number of iterations"])}


# Run in the child before benchmark_app replaces it: prctl(PR_SET_PDEATHSIG, SIGKILL), which survives exec, so a
# stage killed with SIGKILL (no handler runs) takes its benchmark_app along instead of leaving it writing reports;
# it exits at once when that parent is already gone. (subprocess's preexec_fn could do this, but may deadlock a
# process with threads, as OpenVINO's are.)
_LAUNCHER = ("import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGKILL); "
             "os.getppid() == int(sys.argv[1]) or sys.exit(1); os.execv(sys.argv[2], sys.argv[2:])")


def _dies_with_this_process(command: list[str]) -> list[str]:
    """`command` wrapped so that it is killed when this process dies (Linux; elsewhere as it is)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", _LAUNCHER, str(os.getpid()), *command]


def error_text(done: subprocess.CompletedProcess) -> str:
    """benchmark_app's own error, on one line: from its first error line to the end, tracebacks dropped."""
    lines = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if "[ ERROR ]" in line or line.startswith(("RuntimeError",
                  "Exception"))), max(len(lines) - 3, 0))
    message = []
    for line in lines[first:]:
        if line.startswith(("Traceback", 'File "')):
            break
        message.append(line)
    return " ".join(message)[:400]
