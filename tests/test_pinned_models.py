"""The models the suite judges instead of training its own are current: the pinned pose demo model
(tests/pinned_models.py) and the detect demo's committed weights (dvc.yaml: demo_train's output is in git)."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import ROOT
from tests.pinned_models import TASKS, recorded, stale


@pytest.mark.parametrize("task", TASKS)
def test_the_pinned_task_model_is_current(task):
    why = stale(task)
    assert not why, (f"tests/models: the pinned {task} demo model is stale ({'; '.join(why)}): `python -m "
                     "tests.pinned_models` retrains it, `--rekey` records the key when training is unchanged")


@pytest.mark.parametrize("task", TASKS)
def test_the_pinned_task_model_learned_its_task(task):
    """What the suite's accuracy tests rest on, stated once: Ultralytics' own val of the pin on its demo's val split."""
    scored = recorded()[task]["ultralytics_val"]
    assert scored[f"{task}_map50_95"] > 0.5 and scored["map50_95"] > 0.5, scored


def test_the_demo_model_is_in_git_so_a_fresh_clone_trains_nothing():
    """`dvc repro` of a fresh clone skips demo_train when its weights are the file dvc.lock names (tested end to end
    by the demo pipeline, tests/test_pipeline.py); here: the weights are tracked, not cached."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["demo_train"]
    weights = next(out for out in stage["outs"] if isinstance(out, dict) and "models/demo/yolov8n_demo.pt" in out)
    assert weights["models/demo/yolov8n_demo.pt"]["cache"] is False
    assert (ROOT / "models/demo/yolov8n_demo.pt").is_file()
