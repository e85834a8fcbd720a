"""The runtime seam: only `qgate/runtimes/` imports a runtime's library, and `deploy.runtime` picks one or fails."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import yaml

from qgate.deploy import RUNTIMES
from qgate.errors import QgateError
from qgate.params import load_params
from qgate.runtimes import IMPLEMENTATIONS, THREADS_VARIABLE, Runtime, runtime_named
from tests.conftest import ROOT, assert_fails_cleanly

RUNTIME_LIBRARIES = {"openvino", "nncf", "onnxruntime"}


def _imported_roots(path: Path) -> set[str]:
    """The top-level packages a file imports anywhere in it (function bodies included)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
    return roots


def test_only_the_runtime_packages_import_a_runtime_library():
    outside = [path for folder in ("qgate", "stages", "gates") for path in sorted((ROOT / folder).rglob("*.py"))
               if "runtimes" not in path.relative_to(ROOT).parts]
    offenders = {path.relative_to(ROOT).as_posix(): sorted(_imported_roots(path) & RUNTIME_LIBRARIES)
                 for path in outside if _imported_roots(path) & RUNTIME_LIBRARIES}
    assert len(outside) > 60 and not offenders, offenders


def test_every_described_runtime_is_implemented():
    assert set(RUNTIMES) == set(IMPLEMENTATIONS)


@pytest.mark.parametrize("name", list(RUNTIMES))
def test_every_registered_runtime_has_the_whole_protocol(name):
    runtime = runtime_named(name)
    wanted = {n for n, member in inspect.getmembers(Runtime) if inspect.isfunction(member) and not n.startswith("_")}
    missing = sorted(n for n in wanted if not callable(getattr(runtime, n, None)))
    assert len(wanted) > 25 and not missing, f"{name} lacks {missing}"
    assert runtime.name == name


def test_an_unknown_runtime_fails_in_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"deploy": {"runtime": "tensorrt"}}))
    assert_fails_cleanly("export", tmp_path, ["params.yaml", "'deploy.runtime' is 'tensorrt'", "openvino"],
                         "metrics/export_record.json")
    assert not (tmp_path / "models").exists()


def test_the_old_executor_key_names_its_new_one(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"compute": {"backend": "ray"}}))
    assert_fails_cleanly("baseline", tmp_path, ["'compute.backend' is 'ray'", "compute.executor"],
                         "metrics/baseline.json")


@pytest.mark.parametrize("section, fragment", [
    ({"quantize": {"onnxruntime": {"calibrate_method": "kl"}}},
     "'quantize.onnxruntime.calibrate_method' is 'kl'; use one of minmax, entropy, percentile, distribution"),
    ({"tune": {"space": {"quantizer": ["onnxruntime"]}}},
     "'quantize.quantizer' is 'onnxruntime', which deploy.runtime openvino does not offer"),
    ({"deploy": {"runtime": "onnxruntime"}, "quantize": {"quantizer": "tensorrt"}},
     "'quantize.quantizer' is 'tensorrt', which deploy.runtime onnxruntime does not offer; use default or one of "
     "onnxruntime, nncf"),
])
def test_bad_runtime_and_quantizer_params_name_the_key_and_the_choices(tmp_path, section, fragment):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(section))
    with pytest.raises(QgateError) as failure:
        load_params(tmp_path / "params.yaml")
    assert fragment in str(failure.value) and "\n" not in str(failure.value)


def _relu_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_qgate_threads_caps_a_compiled_model_s_threads_and_a_caller_s_count_wins(tmp_path, monkeypatch, name):
    """$QGATE_THREADS (a machine shared with other jobs: the suite's lanes) reaches every runtime's compile; a Ray
    worker's own share still wins; a value that is no count is one line naming the variable."""
    runtime = runtime_named(name)
    model = runtime.read(_relu_onnx(tmp_path / "relu.onnx"))  # OpenVINO reads ONNX too

    def threads(compiled) -> int:
        if name == "onnxruntime":
            return compiled.get_session_options().intra_op_num_threads
        return compiled.get_property("INFERENCE_NUM_THREADS")

    monkeypatch.setenv(THREADS_VARIABLE, "1")
    assert threads(runtime.compile(model, "f32", uint8_input=False)) == 1
    assert threads(runtime.compile(model, "f32", threads=2, uint8_input=False)) == 2
    monkeypatch.setenv(THREADS_VARIABLE, "two")
    with pytest.raises(QgateError, match=f"^{THREADS_VARIABLE}=two: a positive number"):
        runtime.compile(model, "f32", uint8_input=False)
