"""Graph surgery for mixed precision, on the tiny quantized model: both ends are exact, groups are complete."""

from __future__ import annotations

import numpy as np
import openvino as ov

from qgate.preprocess import image_tensor
from qgate.groups import ignored_names
from qgate.runtimes.openvino.ops import WEIGHTED_TYPES, weight_quantizer
from qgate.runtimes.openvino.quantizer_groups import quantizer_groups, revert


def _models(project):
    core = ov.Core()
    return core.read_model(project / "models/export/model_fp32.xml"), core.read_model(
        project / "models/int8/model_int8.xml")


PROBE = "/model.2/cv2/act/Mul"  # carries INT8 error (the untrained model's output barely moves)


def _infer(model, x, **extra) -> tuple[np.ndarray, np.ndarray]:
    """The PROBE layer's output and the model's output."""
    model = model.clone()
    probe = next(op for op in model.get_ordered_ops() if op.get_friendly_name() == PROBE)
    model.add_outputs([probe.output(0)])
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    results = ov.Core().compile_model(model, "CPU", config).create_infer_request().infer({0: x, **extra})
    return results[1].copy(), results[0].copy()


def _sqnr_db(reference, value):
    return 10 * np.log10(np.sum(reference ** 2) / max(np.sum((reference - value) ** 2), 1e-30))


def _assert_same(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_every_group_float_is_the_fp32_model_and_none_float_is_int8(quantized_project):
    fp32, int8 = _models(quantized_project)
    groups = quantizer_groups(int8)
    x = image_tensor(sorted((quantized_project / "data/images/val").glob("*.jpg"))[0], 128)
    reference, quantized = _infer(fp32, x), _infer(int8, x)
    assert _sqnr_db(reference[0], quantized[0]) < 40  # INT8 really differs, so the checks below can fail
    _assert_same(_infer(revert(int8, fp32, groups, set(range(len(groups)))), x), reference)
    _assert_same(_infer(revert(int8, fp32, groups, set()), x), quantized)
    one = _infer(revert(int8, fp32, groups, {0}), x)
    assert not np.allclose(one[0], quantized[0]) and not np.allclose(one[0], reference[0])  # in between


def test_groups_partition_the_quantizers_and_the_ops_they_feed(quantized_project):
    _, int8 = _models(quantized_project)
    groups = quantizer_groups(int8)
    quantizers = [q for g in groups for q in g.quantizers]
    ops = [name for g in groups for name in g.ops]
    assert len(quantizers) == len(set(quantizers)) and len(ops) == len(set(ops))
    activation_fqs = {op.get_friendly_name() for op in int8.get_ordered_ops() if op.get_type_name() == "FakeQuantize"
                      and op.input_value(0).get_node().get_type_name() != "Constant"}
    assert set(quantizers) <= activation_fqs and len(quantizers) > 0
    assert any(len(g.quantizers) > 1 for g in groups)  # an op reading two quantizers joins them (Concat, Add)


def test_groups_cover_every_int8_weighted_op_once(quantized_project):
    _, int8 = _models(quantized_project)
    groups = quantizer_groups(int8)
    owned = [name for g in groups for name in g.weighted]
    assert len(owned) == len(set(owned))
    int8_weights = {op.get_friendly_name() for op in int8.get_ordered_ops() if op.get_type_name() in WEIGHTED_TYPES
                    and weight_quantizer(op.input_value(1).get_node()) is not None}
    assert int8_weights and int8_weights == set(owned)
    names = ignored_names(groups, {0, 1})
    assert names == list(dict.fromkeys(groups[0].ops + groups[1].ops))
