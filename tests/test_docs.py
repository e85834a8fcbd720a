"""The docs hold no number the files do not: the README's verdict block is what the committed metrics give, every
relative link resolves, and the browser check that `make sample` relies on catches what it should."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from qgate import sample
from qgate.browser import open_page
from tests.conftest import ROOT, SAMPLE_PROJECT, chromium

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def test_the_readme_verdict_block_is_what_the_sample_metrics_give(project, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    monkeypatch.chdir(project)
    assert sample.readme_block(readme) == sample.verdict_block("params.yaml"), "README.md is stale: run `make sample`"


def _committed(path: str) -> bytes | None:
    """`path` as HEAD holds it (None when HEAD has no such file)."""
    done = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=ROOT, capture_output=True)
    return done.stdout if done.returncode == 0 else None


def test_the_sample_is_the_committed_demo_run():
    """While HEAD's params.yaml is the demo's (upstream, not a fork judging its own model), HEAD's sample files are
    HEAD's metrics: a commit that changed a metric without `make sample` fails here. Committed files, not the
    working tree: `make gate` on a fresh clone re-measures the demo (speed differs by CPU) before `make test`."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout with a commit: nothing committed to compare")
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD", SAMPLE_PROJECT.relative_to(ROOT)],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    prefix = SAMPLE_PROJECT.relative_to(ROOT).as_posix() + "/"
    assert f"{prefix}params.yaml" in listed, "docs/sample/project is not committed: run `make sample`"
    if _committed(f"{prefix}params.yaml") != _committed("params.yaml"):
        pytest.skip("params.yaml is not the sample's (a fork judging its own model): the sample stays upstream's")
    stale = [name.removeprefix(prefix) for name in listed if _committed(name) != _committed(name.removeprefix(prefix))]
    assert not stale, f"docs/sample/project differs from the committed {stale}: run `make sample` and commit"


def test_the_readme_block_is_replaced_between_its_markers_only():
    text = f"intro\n{sample.BEGIN}\n```text\nold\n```\n{sample.END}\noutro\n"
    replaced = sample.with_block(text, "new line 1\nnew line 2")
    assert replaced.startswith("intro\n") and replaced.endswith("\noutro\n")
    assert sample.readme_block(replaced) == "new line 1\nnew line 2"
    with pytest.raises(sample.QgateError, match="markers"):
        sample.with_block("no markers here", "x")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in FENCE.sub("", page.read_text()).splitlines()
            if re.match(r"^#{1,6} ", line)}


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200, "README.md: move the detail to docs/"


def test_the_browser_check_sees_requests_leaving_the_page_and_broken_images(tmp_path):
    page = tmp_path / "page.html"
    pixel = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    page.write_text(f"<html><body><h1>x</h1><img alt='inline' src='data:image/png;base64,{pixel}'>"
                    "<img alt='missing' src='nowhere.png'><img alt='remote' src='http://192.0.2.1/a.png'>"
                    "</body></html>")
    check = open_page(page, chromium())
    assert check.images == 3 and sorted(check.broken_images) == ["missing", "remote"]
    assert check.external_requests(tmp_path) == ["http://192.0.2.1/a.png"]
    assert check.screenshot.startswith(b"\x89PNG")
