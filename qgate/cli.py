"""Thin command-line wrapper shared by every stage: offline setup, logging, one-line errors."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Callable

from qgate import offline
from qgate.errors import QgateError
from qgate.params import DEFAULT_PARAMS, Params, load_params

EXIT_BAD_INPUT = 2


def run_stage(main: Callable[[Params], dict[str, Any]], description: str) -> None:
    """Parse `--params`, run `main(params)`, print its metrics; exit 2 with one line on bad input."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default=str(DEFAULT_PARAMS), help="params file (default: params.yaml)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    offline.configure()
    try:
        metrics = main(load_params(args.params))
    except QgateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    print(json.dumps(metrics, indent=2))
