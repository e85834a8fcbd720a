"""`make sample`: the README's verdict block and docs/sample/report.{html,png}, from the current metrics.

docs/sample/project keeps the params and metrics files they come from. tests/test_docs.py fails when the
README's block differs from what those files give, or (while params.yaml is the demo's) when they differ from
the committed metrics: the README never quotes a number the files do not hold. The gate-semantics tests
judge that snapshot too, so they hold in a fork whose own model's metrics are committed.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from qgate import report
from qgate.browser import open_page
from qgate.errors import QgateError
from qgate.gates import Metrics, judge_all
from qgate.io import write_bytes, write_text
from qgate.params import load_params
from qgate.summary import terminal

README = Path("README.md")
SAMPLE = Path("docs/sample")
PROJECT = SAMPLE / "project"  # params.yaml and the files the gates read, as the sample was made from them
BEGIN, END = "<!-- verdict-output:begin -->", "<!-- verdict-output:end -->"


def verdict_block(params_path: str) -> str:
    """The terminal output of `make gate`'s verdict for the current metrics, as the README shows it."""
    metrics = Metrics(load_params(params_path))
    return _block(metrics, judge_all(metrics.params, metrics))


def _block(metrics: Metrics, verdicts: list) -> str:
    return f"{terminal(metrics, verdicts)}\n{report.written(metrics.params)}"


def readme_block(text: str) -> str:
    """The verdict block the README holds between its markers."""
    if BEGIN not in text or END not in text:
        raise QgateError(f"{README}: no '{BEGIN}' ... '{END}' markers; put them where the verdict output goes")
    inner = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    return inner.removeprefix("```text").removesuffix("```").strip("\n")


def with_block(text: str, block: str) -> str:
    """The README text with `block` between the markers."""
    readme_block(text)  # checks the markers
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n```text\n{block}\n```\n{END}{rest.split(END, 1)[1]}"


def main(params_path: str) -> int:
    """Write the report, copy it to docs/sample, screenshot it in Chromium, put the verdict in the README."""
    params = load_params(params_path)
    metrics = Metrics(params)
    verdicts = judge_all(params, metrics)  # judged once: the report and the README's block
    report.write_report(metrics, verdicts, Path(params_path))
    page = SAMPLE / "report.html"
    SAMPLE.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(params.gates.report_html, page)
    check = open_page(page)
    if check.broken_images or check.external_requests(SAMPLE):
        raise QgateError(f"{page}: images that did not load {check.broken_images}, requests outside the page "
                         f"{check.external_requests(SAMPLE)}")
    write_bytes(SAMPLE / "report.png", check.screenshot)
    _snapshot([params_path, *metrics.paths()])
    write_text(README, with_block(README.read_text(), _block(metrics, verdicts)))
    print(f"wrote {page} ({check.images} images, {check.svgs} plots, all loaded), {SAMPLE / 'report.png'} and "
          f"the verdict block in {README}")
    return 0


def _snapshot(paths: list[str]) -> None:
    """Copy `paths` under docs/sample/project, replacing the previous snapshot whole."""
    staging = PROJECT.with_name(PROJECT.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    for path in paths:
        (staging / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, staging / path)
    shutil.rmtree(PROJECT, ignore_errors=True)
    staging.rename(PROJECT)


if __name__ == "__main__":
    from qgate.cli import run_tool

    sys.exit(run_tool(main, __doc__))
