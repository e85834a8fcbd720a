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
    params_path = _setup(description)
    try:
        metrics = main(load_params(params_path))
    except QgateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    print(json.dumps(metrics, indent=2))


def run_tool(main: Callable[..., int], description: str, switches: dict[str, str] | None = None) -> int:
    """Run a non-stage tool (gates, report, promote) on the `--params` file; bad input is one line and exit 2.

    `switches` are extra on/off flags (`{"push": "help text"}`), passed to `main` as keyword booleans.
    """
    parser = _parser(description)
    for name, help_text in (switches or {}).items():
        parser.add_argument(f"--{name}", action="store_true", help=help_text)
    args = vars(_parse(parser))
    params_path = args.pop("params")
    try:
        return main(params_path, **args)
    except QgateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _setup(description: str) -> str:
    return _parse(_parser(description)).params


def _parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default=str(DEFAULT_PARAMS), help="params file (default: params.yaml)")
    return parser


def _parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    offline.configure()
    return args
