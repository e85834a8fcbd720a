"""Why `yolo val` on your .pt prints another mAP than qgate's FP32 baseline: Ultralytics' `rect=True` default.

One run, same weights and images: Ultralytics' `val()` of the `.pt` with its default `rect=True` (each batch
letterboxed to its own stride-aligned shape: a 640x640 image runs at 672x672), with `rect=False` (every image
at imgsz x imgsz, what a static exported model runs), and qgate's FP32 baseline of the exported IR.

    python benchmarks/rect.py --reference ../shared/reference      # official yolov8n + COCO128 at 640
    python benchmarks/rect.py                                       # the demo (after `dvc repro export`)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qgate import offline  # noqa: E402

offline.configure()

from benchmarks.peers import reference_params  # noqa: E402
from qgate.dataset import load_dataset, ultralytics_yaml  # noqa: E402
from qgate.params import load_params  # noqa: E402
from qgate.artifacts import export_record, fp32_model  # noqa: E402
from qgate.pipeline import evaluate_model  # noqa: E402
from stages import export  # noqa: E402


def ultralytics_val(params, rect: bool, work: Path) -> float:
    """Ultralytics' own mAP50-95 of the `.pt` on the baseline's split, with `rect` as given."""
    offline.ultralytics_settings_off()
    from ultralytics import YOLO

    dataset = load_dataset(params.model.dataset)
    data = ultralytics_yaml(dataset, work / "data.yaml")
    result = YOLO(params.model.weights).val(data=str(data), split=params.baseline.split, imgsz=params.model.imgsz,
                                            batch=8, rect=rect, plots=False, device="cpu", verbose=False,
                                            project=str(work), name=f"rect_{rect}")
    return float(result.box.map)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="a reference case folder (models/yolov8n.pt, data/coco128)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        params = load_params("params.yaml")
        if args.reference:
            params = reference_params(params, args.reference.resolve(), work)
            export.main(params)
        ours = evaluate_model(params, fp32_model(params), export_record(params)).value("map50_95")
        rows = [("ultralytics val(), rect=True (its default)", ultralytics_val(params, True, work)),
                ("ultralytics val(), rect=False", ultralytics_val(params, False, work)),
                ("qgate FP32 baseline (static exported IR)", ours)]
    print(f"\n{params.model.weights} at imgsz {params.model.imgsz}, split '{params.baseline.split}'")
    for name, value in rows:
        print(f"{name:<45} mAP50-95 {value:.4f}")


if __name__ == "__main__":
    main()
