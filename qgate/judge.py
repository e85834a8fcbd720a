"""`make gate` after `dvc repro`: the pytest gates (JUnit XML), then the report and the verdict table."""

from __future__ import annotations

import sys
from pathlib import Path

from qgate import report
from qgate.cli import run_tool
from qgate.params import load_params

GATES_DIR = Path(__file__).resolve().parent.parent / "gates"


def main(params_path: str) -> int:
    """Run the gates, then write the report; the exit status is non-zero when any gate failed."""
    import pytest

    params = load_params(params_path)
    status = pytest.main([str(GATES_DIR), "--params", params_path, f"--junitxml={params.gates.junit}",
                          "-p", "no:cacheprovider", "-v", "--no-header", "-o", "junit_logging=system-out"])
    print()
    report_status = report.main(params_path)
    return int(status) or report_status


if __name__ == "__main__":
    sys.exit(run_tool(main, __doc__))
