"""`make gate` after `dvc repro`: each gate judged once, for the JUnit XML, the terminal and the report."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from qgate import report
from qgate.cli import run_tool
from qgate.gates import Metrics, Verdict, judge_all
from qgate.params import load_params

GATES_DIR = Path(__file__).resolve().parent.parent / "gates"


class Judged:
    """A pytest plugin handing the gate tests verdicts already computed (gates/conftest.py uses them if present)."""

    def __init__(self, verdicts: list[Verdict]):
        self.verdicts = {v.gate: v for v in verdicts}

    @pytest.fixture(scope="session")
    def judged_verdicts(self) -> dict[str, Verdict]:
        return self.verdicts


def main(params_path: str) -> int:
    """Judge every gate, record the verdicts as JUnit XML, print them, write the report; non-zero when one failed."""
    metrics = Metrics(load_params(params_path))
    verdicts = judge_all(metrics.params, metrics)
    # pytest's own lines are shown only when it could not run: the table below says the rest, and the XML
    # carries each verdict for CI's test view
    with contextlib.redirect_stdout(io.StringIO()) as pytest_output:
        status = pytest.main([str(GATES_DIR), "--params", params_path, f"--junitxml={metrics.params.gates.junit}",
                              "-p", "no:cacheprovider", "-q", "-o", "junit_logging=system-out"],
                             plugins=[Judged(verdicts)])
    if status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        print(pytest_output.getvalue(), file=sys.stderr)
        print(f"error: the gate tests in {GATES_DIR.name}/ did not run (pytest exit {int(status)})", file=sys.stderr)
    report_status = report.publish(metrics, verdicts, params_path)
    failed = any(not v.passed for v in verdicts)
    return report_status or int(failed) or int(status)


if __name__ == "__main__":
    sys.exit(run_tool(main, __doc__))
