"""Honest caching: every DVC stage depends on all the project code it runs, derived from the imports."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from qgate.params_reference import pipeline_stages
from tests.conftest import ROOT

PACKAGES = ("qgate", "stages")


REGISTERED = re.compile(r"((?:qgate|stages)(?:\.\w+)+):\w+")  # a registry's "module:Class" (qgate.runtimes.RUNTIMES)


def imported_modules(path: Path) -> set[str]:
    """Project modules (`qgate.x`, `stages.y`) a file imports anywhere in it, function bodies included, with the
    packages a submodule's import runs first, and the modules a registry names as "module:Class" (imported by
    name at run time, whichever params choose)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and REGISTERED.fullmatch(node.value):
            names = [REGISTERED.fullmatch(node.value).group(1)]
        else:
            continue
        names = [".".join(name.split(".")[:end]) for name in names for end in range(2, name.count(".") + 2)]
        found |= {name for name in names if name.split(".")[0] in PACKAGES and _file(name).is_file()}
    return found


def _file(module: str) -> Path:
    """A module's file: `a/b.py`, or `a/b/__init__.py` for a package."""
    path = ROOT / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def code_closure(module: str) -> set[str]:
    """The files of `module` and of every project module it imports, transitively (repo-relative paths)."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo += imported_modules(_file(current))
    return {_file(m).relative_to(ROOT).as_posix() for m in seen} - {"qgate/__init__.py", "stages/__init__.py"}


STAGES = pipeline_stages(ROOT)["stages"]  # tune's pipeline file too: it runs from the root (wdir ..)


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_depends_on_exactly_the_code_it_runs(name):
    spec = STAGES[name]
    module = spec["cmd"].split("python -m ", 1)[1].split()[0]
    needed = code_closure(module)
    listed = {dep for dep in spec["deps"] if dep.endswith(".py")}
    assert not needed - listed, f"dvc.yaml stage '{name}' misses code deps {sorted(needed - listed)}"
    assert not listed - needed, f"dvc.yaml stage '{name}' lists code it does not run {sorted(listed - needed)}"


def test_the_closure_follows_imports_inside_functions():
    # qgate.report imports qgate.badcases inside a function; the sensitivity stage imports qgate.heads on top
    assert "qgate/badcases.py" in code_closure("qgate.report")
    assert {"stages/sensitivity.py", "qgate/heads.py", "qgate/groups.py"} <= code_closure("stages.sensitivity")


def test_the_closure_follows_packages_and_the_runtime_registry():
    # stages ask qgate.runtimes for the runtime params name; its modules are imported by name from RUNTIMES
    assert {"qgate/runtimes/__init__.py", "qgate/runtimes/openvino/__init__.py",
            "qgate/runtimes/openvino/quantizer_groups.py"} <= code_closure("stages.sensitivity")


PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
RUN_TO_RUN = re.compile(r"(seconds|per_second|fps|latency_ms)$")  # wall-clock fields differ on every run


def resolved(path: str) -> str:
    """A dvc.yaml path with its `${section.key}` filled in from params.yaml, as DVC does."""
    def value(match: re.Match) -> str:
        section, key = match.group(1).split(".")
        return str(PARAMS[section][key])
    return re.sub(r"\$\{([\w.]+)\}", value, path)


def _committed_outputs() -> set[str]:
    """Outputs DVC leaves to git (`cache: false`: metrics, the demo's weights): a fresh clone has them."""
    return {resolved(path) for spec in STAGES.values() for out in spec.get("outs", []) + spec.get("metrics", [])
            if isinstance(out, dict) for path, options in out.items() if options.get("cache") is False}


# Each stage's JSON inputs that git holds; the others (artifacts/*_detections.json, DVC-cached lists of detections)
# hold no fields at all. Listed, so that a stage with no such input is no test case that asserts nothing.
JSON_DEPS = [(name, dep) for name, spec in STAGES.items() for dep in spec["deps"]
             if resolved(dep).endswith(".json") and resolved(dep) in _committed_outputs()]


def test_the_json_inputs_checked_below_are_every_stage_s_committed_ones():
    assert {name for name, _ in JSON_DEPS} >= {"baseline", "int8_eval", "autofix", "tune"}, JSON_DEPS


@pytest.mark.parametrize("name, dep", JSON_DEPS, ids=[f"{name}:{dep}" for name, dep in JSON_DEPS])
def test_no_stage_depends_on_a_file_with_timings(name, dep):
    data = json.loads((ROOT / resolved(dep)).read_text())
    assert isinstance(data, dict), f"{dep}: expected a JSON object"
    timings = sorted(key for key in data if RUN_TO_RUN.search(key))
    assert not timings, f"stage '{name}' depends on {dep}, which holds run-to-run fields {timings}"


def test_the_package_has_no_import_cycle():
    modules = {f"qgate.{path.stem}" for path in (ROOT / "qgate").glob("*.py") if path.stem != "__init__"}
    graph = {module: imported_modules(_file(module)) & modules for module in modules}
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            assert state.get(imported) != "open", f"import cycle: {' -> '.join(trail + [module, imported])}"
            if imported not in state:
                visit(imported, trail + [module])
        state[module] = "done"

    for module in sorted(modules):
        if module not in state:
            visit(module, [])
