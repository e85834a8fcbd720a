"""The pose demo model the suite judges, trained once and committed (tests/models/), with a key.

A model trained here differs by CPU: the pose demo lost 0.004 box mAP50-95 on one EPYC and 0.017 on another, and
no public pose checkpoint exists to judge instead. A test about accuracy must not depend on what training on its
machine happened to learn, nor pay minutes to train. So the suite judges this pinned model on the pose demo's data
(`demo_data` draws the same bytes on every CPU); the detect demo's model is in git with the pipeline (dvc.yaml:
demo_train's weights), and segment is judged on the official YOLOv8n-seg of ../shared/reference.

Each pin carries a key: the `demo:` values of its task and what decides what training makes (the demo's data and
training code, Ultralytics' and torch's versions). tests/test_pinned_models.py fails when the key is stale:

    python -m tests.pinned_models           # retrain a stale pin with the real demo stages (~3 min)
    python -m tests.pinned_models --rekey   # only record the new key: the change does not affect training
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "tests" / "models"
KEYS = FOLDER / "pins.json"
TASKS = ("pose",)  # segment: the official YOLOv8n-seg of ../shared/reference is a real model to judge
TRAINING_CODE = ("stages/demo_data.py", "stages/demo_train.py")
PACKAGES = ("ultralytics", "torch")


def weights(task: str) -> Path:
    """The pinned model of `task`."""
    return FOLDER / f"yolov8n_{task}_demo.pt"


def key_inputs(task: str) -> dict:
    """What decides the model `demo_train` makes for `task`: the demo's values, its code, the packages."""
    from qgate.params import as_dict, load_params

    demo = as_dict(load_params(ROOT / "params.yaml").demo) | {"task": task}
    code = {name: hashlib.sha256((ROOT / name).read_bytes()).hexdigest() for name in TRAINING_CODE}
    return {"demo": demo, "code": code, "packages": {name: version(name) for name in PACKAGES}}


def key(task: str) -> str:
    """The key of `task`'s pin: a hash of key_inputs."""
    return hashlib.sha256(json.dumps(key_inputs(task), sort_keys=True).encode()).hexdigest()


def recorded() -> dict:
    """pins.json: per task, the key, the weights' sha256, the inputs behind the key, where and what it trained."""
    return json.loads(KEYS.read_text()) if KEYS.is_file() else {}


def stale(task: str) -> list[str]:
    """Why `task`'s pin is stale (empty when it is current): the inputs that changed, or its file."""
    entry = recorded().get(task)
    if entry is None or not weights(task).is_file():
        return [f"no pinned model for {task}"]
    if hashlib.sha256(weights(task).read_bytes()).hexdigest() != entry["sha256"]:
        return [f"{weights(task).relative_to(ROOT)} is not the file pins.json records"]
    now = key_inputs(task)
    return [f"{section}: {entry['inputs'][section]} -> {now[section]}" for section in now
            if entry["inputs"].get(section) != now[section]]


def train(task: str) -> dict:
    """Train `task`'s demo with the real demo_data and demo_train stages in a scratch project; copy the weights
    to tests/models; return its pins.json entry."""
    from qgate.cpu import cpu_info, describe
    from qgate.params import load_params
    from stages import demo_data, demo_train

    with tempfile.TemporaryDirectory() as scratch:
        previous = Path.cwd()
        os.chdir(scratch)
        try:
            Path("params.yaml").write_text(yaml.safe_dump({"demo": {"task": task}}))
            params = load_params("params.yaml")
            demo_data.main(params)
            trained = demo_train.main(params)
            FOLDER.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(params.demo.weights, weights(task))
        finally:
            os.chdir(previous)
    return {"trained_on": describe(cpu_info()), "ultralytics_val": trained} | entry(task)


def entry(task: str) -> dict:
    """The key part of `task`'s pins.json entry, for the pinned file as it is."""
    return {"key": key(task), "sha256": hashlib.sha256(weights(task).read_bytes()).hexdigest(),
            "inputs": key_inputs(task)}


def main(argv: list[str] | None = None) -> int:
    """Retrain the stale pins (all with --force), or with --rekey record the current key for the files as they are."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rekey", action="store_true", help="record the new key only, train nothing")
    parser.add_argument("--force", action="store_true", help="retrain every pin, stale or not")
    args = parser.parse_args(argv)
    from qgate import offline

    offline.configure()
    pins = recorded()
    for task in TASKS:
        why = stale(task)
        if args.rekey:
            pins[task] = pins.get(task, {}) | entry(task)
        elif why or args.force:
            print(f"{task}: training ({'; '.join(why) or 'forced'})", flush=True)
            pins[task] = train(task)
        else:
            print(f"{task}: current")
    KEYS.write_text(json.dumps(pins, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
