"""The task the export record names owns decode, conversion and scoring; old or foreign records are refused."""

import numpy as np
import pytest

from qgate.errors import QgateError
from qgate.heads import End2EndHead, Postprocess, RawHead
from qgate.preprocess import Letterbox
from qgate.tasks import Detect, scale_to_original, task_for, to_coco


def test_task_for_reads_the_task_and_head_layout():
    task = task_for({"task": "detect", "head_layout": "end2end"})
    assert isinstance(task, Detect) and isinstance(task.head, End2EndHead)
    assert task.metrics.primary.iou_type == "bbox" and task.outputs == 1


@pytest.mark.parametrize("record", [{"head_layout": "raw"}, {"task": "rotated", "head_layout": "raw"},
                                    {"task": "detect"}, {"task": "obb", "head_layout": "end2end"}])
def test_a_record_without_a_known_task_or_layout_says_re_export(record):
    with pytest.raises(QgateError, match="re-run `dvc repro export`"):
        task_for(record)


def test_detect_predictions_are_the_heads_rows_in_original_pixels():
    output = np.zeros((4 + 2, 3), np.float32)
    output[:4] = [[100, 200, 50], [100, 120, 60], [40, 20, 10], [40, 20, 10]]
    output[4:] = [[0.9, 0.0, 0.3], [0.0, 0.8, 0.0]]
    geometry = Letterbox((480, 640), (240, 320), (0, 40))
    rows = RawHead().detections(output, Postprocess())
    ours = Detect().predictions((output,), Postprocess(), 7, geometry)
    assert ours == to_coco(scale_to_original(rows, geometry), 7)
    assert [d["category_id"] for d in ours] == [1, 2, 1] and {d["image_id"] for d in ours} == {7}
    assert Detect().predictions((output,), Postprocess(), 0) == to_coco(rows, 0)  # no letterbox: input pixels
