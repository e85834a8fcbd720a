"""Ultralytics dataset yaml -> image list, validated YOLO labels and COCO-format ground truth."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from qgate.errors import QgateError
from qgate.io import read_yaml


IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
COORD_TOLERANCE = 1e-6  # float noise in label files written by other tools


@dataclass(frozen=True)
class Dataset:
    """A parsed dataset yaml: resolved root, class names and the raw split entries."""

    yaml_path: Path
    root: Path
    names: tuple[str, ...]
    splits: dict[str, str]


def load_dataset(yaml_path: str | Path) -> Dataset:
    """Parse an Ultralytics dataset yaml; `path` resolves against the yaml's folder, then the cwd."""
    yaml_path = Path(yaml_path)
    spec = read_yaml(yaml_path, "dataset yaml not found; set model.dataset in params.yaml")
    names = spec.get("names")
    if isinstance(names, dict):
        names = _names_by_id(yaml_path, names)
    if not names:
        raise QgateError(f"{yaml_path}: no 'names' list; add the class names")
    return Dataset(yaml_path, _resolve_root(yaml_path, spec.get("path", ".")), tuple(map(str, names)),
                   {k: spec[k] for k in ("train", "val", "test", "calib") if spec.get(k)})


def kpt_oks_sigmas(yaml_path: str | Path, count: int) -> list[float]:
    """The dataset yaml's own OKS sigmas (`kpt_oks_sigmas`, one per keypoint, as Ultralytics reads them), or []."""
    sigmas = read_yaml(yaml_path, "dataset yaml not found; set model.dataset in params.yaml").get("kpt_oks_sigmas")
    if sigmas is None:
        return []
    if not (isinstance(sigmas, list) and len(sigmas) == count
            and all(isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0 for s in sigmas)):
        raise QgateError(f"{yaml_path}: kpt_oks_sigmas must be {count} positive numbers, one per keypoint of the "
                         f"model's kpt_shape; got {str(sigmas)[:80]}: fix the list or remove the key")
    return [float(s) for s in sigmas]


def _names_by_id(yaml_path: Path, names: dict) -> list[str]:
    """A `names` mapping as a list indexed by class id; ids must be 0..n-1, as label files and models count them.

    A gap ({0: a, 2: c}) would shift every later class onto its neighbour's name; Ultralytics refuses it too.
    """
    try:
        by_id = {int(key): value for key, value in names.items()}
    except (TypeError, ValueError) as exc:
        raise QgateError(f"{yaml_path}: 'names' keys must be class ids (0, 1, ...); fix that yaml") from exc
    missing = sorted(set(range(max(by_id, default=-1) + 1)) - set(by_id))
    if missing or min(by_id, default=0) < 0:
        raise QgateError(f"{yaml_path}: 'names' has no class id {', '.join(map(str, missing[:5])) or '< 0'}; class ids "
                         f"must run 0..{len(by_id) - 1} without gaps: add a name for each missing id (e.g. "
                         f"'{(missing or [0])[0]}: unused') or renumber the labels")
    return [by_id[i] for i in range(len(by_id))]


def _resolve_root(yaml_path: Path, path: str) -> Path:
    """`path` as an absolute folder; a relative one beside the yaml, or the yaml's own folder when that is the
    folder `path` names (data/demo/demo.yaml with `path: data/demo`, from any working directory), else in the cwd."""
    relative = Path(path)
    own = [yaml_path.parent] if relative.parts and yaml_path.resolve().parent.parts[-len(relative.parts):] == \
        relative.parts else []
    candidates = [relative] if relative.is_absolute() else [yaml_path.parent / path, *own, Path.cwd() / path]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    raise QgateError(f"{yaml_path}: dataset root '{path}' does not exist; fix 'path' in that yaml")


def split_images(dataset: Dataset, split: str) -> list[Path]:
    """Sorted image files of a split (a folder, or a .txt list of files); error when missing or empty."""
    entry = dataset.splits.get(split)
    if entry is None:
        raise QgateError(f"{dataset.yaml_path}: no '{split}' split; add '{split}: images/{split}' to that yaml")
    entries = entry if isinstance(entry, list) else [entry]
    images: list[Path] = []
    for item in entries:
        location = dataset.root / item
        if location.is_dir():
            images += [p for p in location.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES]
        elif location.is_file() and location.suffix == ".txt":
            images += [_list_entry(dataset.root, line) for line in location.read_text().split() if line]
        else:
            raise QgateError(f"{dataset.yaml_path}: '{split}' path {location} does not exist; fix that yaml")
    if not images:
        raise QgateError(f"{dataset.yaml_path}: '{split}' split has no images; add images or point it elsewhere")
    return sorted(images)


def _list_entry(root: Path, line: str) -> Path:
    path = Path(line)
    return path if path.is_absolute() else (root / path).resolve()


def label_path(image: Path) -> Path:
    """Ultralytics' convention: the last `/images/` of the path becomes `/labels/`, suffix `.txt`."""
    head, sep, tail = str(image).rpartition(f"{os.sep}images{os.sep}")
    if not sep:
        return image.with_suffix(".txt")
    return Path(f"{head}{os.sep}labels{os.sep}{tail}").with_suffix(".txt")


def read_labels(path: Path, num_classes: int) -> np.ndarray:
    """Rows (class, cx, cy, w, h) normalized; polygons become boxes; duplicates dropped like Ultralytics."""
    rows = [_box_row(values) for values in _label_values(path, num_classes)]
    if not rows:
        return np.zeros((0, 5), dtype=np.float64)
    return np.unique(np.array(rows, dtype=np.float64), axis=0)


def read_segments(path: Path, num_classes: int) -> list[tuple[int, np.ndarray]]:
    """(class, polygon [k, 2] normalized) per instance, duplicate lines dropped; a box line becomes its rectangle."""
    instances = {}
    for values in _label_values(path, num_classes):
        coords = np.array(values[1:])
        if len(coords) == 4:
            cx, cy, w, h = coords
            coords = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy - h / 2, cx + w / 2, cy + h / 2,
                               cx - w / 2, cy + h / 2])
        instances.setdefault(tuple(values), (int(values[0]), coords.reshape(-1, 2)))
    return list(instances.values())


def read_oriented(path: Path, num_classes: int) -> list[tuple[int, np.ndarray]]:
    """(class, corners [k, 2] normalized) per oriented box, duplicate lines dropped: DOTA's four corners
    (`class x1 y1 x2 y2 x3 y3 x4 y4`), or any polygon, which Ultralytics reads as its smallest rotated rectangle.
    A `class cx cy w h` line has no angle and is refused, naming it."""
    instances = {}
    for number, line in _label_lines(path):
        values = _parse_label_line(path, number, line, num_classes)
        if len(values) < 7:
            raise QgateError(f"{path}:{number}: an oriented-box label is 'class x1 y1 x2 y2 x3 y3 x4 y4' (DOTA's "
                             f"corners, normalized); got {len(values)} values, a box without an angle: an OBB model "
                             "is judged on an OBB dataset")
        instances.setdefault(tuple(values), (int(values[0]), np.array(values[1:]).reshape(-1, 2)))
    return list(instances.values())


def read_keypoints(path: Path, num_classes: int, kpt_shape: tuple[int, int]) -> list[tuple[int, np.ndarray,
                                                                                            np.ndarray]]:
    """(class, box cx cy w h, keypoints [k, 3] x y v) per instance, normalized; v 0 = unlabelled.

    A pose label line is `class cx cy w h` then k x (x y) or k x (x y v); without v a keypoint is labelled
    unless its x or y is negative (Ultralytics' rule), duplicate lines dropped.
    """
    count, dims = kpt_shape
    instances = {}
    for number, line in _label_lines(path):
        values = _numbers(path, number, line)
        if len(values) != 5 + count * dims:
            raise QgateError(f"{path}:{number}: expected 'class cx cy w h' and {count} keypoints of {dims} values "
                             f"(kpt_shape {list(kpt_shape)}); got {len(values)} values; fix that label line")
        _check_class(path, number, values[0], num_classes)
        points = np.array(values[5:]).reshape(count, dims)
        if dims == 2:
            points = np.c_[points, 2.0 * (points >= 0).all(1)]
        box = np.array(values[1:5])
        if box.min() < -COORD_TOLERANCE or max(box.max(), points[:, :2].max()) > 1 + COORD_TOLERANCE:
            raise QgateError(f"{path}:{number}: box and keypoint coordinates must be normalized to [0, 1]; "
                             "fix that label line")
        instances.setdefault(tuple(values), (int(values[0]), np.array(values[1:5]), points))
    return list(instances.values())


def _label_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every non-empty line of a label file; none when the file is missing (a background
    image)."""
    if not path.exists():
        return []
    return [(number, line) for number, line in enumerate(path.read_text().splitlines(), start=1) if line.strip()]


def _label_values(path: Path, num_classes: int) -> list[list[float]]:
    """The validated numbers of every non-empty line of a label file (none when the file is missing)."""
    return [_parse_label_line(path, number, line, num_classes) for number, line in _label_lines(path)]


def _box_row(values: list[float]) -> list[float]:
    """(class, cx, cy, w, h): a polygon becomes its bounding box."""
    if len(values) == 5:
        return values
    xs, ys = np.array(values[1::2]), np.array(values[2::2])
    return [values[0], (xs.min() + xs.max()) / 2, (ys.min() + ys.max()) / 2, xs.max() - xs.min(), ys.max() - ys.min()]


def _numbers(path: Path, number: int, line: str) -> list[float]:
    try:
        values = [float(v) for v in line.split()]
    except ValueError as exc:
        raise QgateError(f"{path}:{number}: not numbers ({line.strip()!r}); fix or delete that label line") from exc
    # float() takes 'nan' and 'inf', which no range check refuses (every comparison with NaN is false)
    if not all(math.isfinite(v) for v in values):
        raise QgateError(f"{path}:{number}: a value is not finite ({line.strip()!r}); fix or delete that label line")
    return values


def _check_class(path: Path, number: int, cls: float, num_classes: int) -> None:
    if cls != int(cls) or not 0 <= cls < num_classes:
        raise QgateError(f"{path}:{number}: class id {cls:g} is outside 0..{num_classes - 1}; "
                         "fix the label or the dataset's 'names'")


def _parse_label_line(path: Path, number: int, line: str, num_classes: int) -> list[float]:
    where = f"{path}:{number}"
    values = _numbers(path, number, line)
    if len(values) < 5 or (len(values) > 5 and len(values) % 2 == 0):
        raise QgateError(f"{where}: expected 'class cx cy w h' or a polygon; fix that label line")
    _check_class(path, number, values[0], num_classes)
    coords = np.array(values[1:])
    if coords.min() < -COORD_TOLERANCE or coords.max() > 1 + COORD_TOLERANCE:
        raise QgateError(f"{where}: coordinates must be normalized to [0, 1]; got {line.strip()!r}")
    return values


def orphan_labels(images: list[Path]) -> list[Path]:
    """Label files in the split's label folders that have no image (Ultralytics ignores them)."""
    expected = {label_path(image) for image in images}
    folders = {path.parent for path in expected}
    return sorted(p for folder in folders if folder.is_dir() for p in folder.glob("*.txt") if p not in expected)


def coco_ground_truth(images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
    """COCO instances dict for `images` (ids 0..n-1) with their (height, width); category id = class + 1."""
    gt_images, annotations = [], []
    for image_id, (image, (height, width)) in enumerate(zip(images, shapes)):
        gt_images.append({"id": image_id, "file_name": image.name, "height": height, "width": width})
        for cls, cx, cy, w, h in read_labels(label_path(image), len(names)):
            box = [(cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height]
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(cls) + 1,
                                "bbox": box, "area": box[2] * box[3], "iscrowd": 0})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(names)]
    return {"images": gt_images, "annotations": annotations, "categories": categories}


def coco_segment_truth(images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
    """COCO instances with polygons (pixels) and their bounding boxes: pycocotools rasterizes them for `segm`."""
    gt_images, annotations = [], []
    for image_id, (image, (height, width)) in enumerate(zip(images, shapes)):
        gt_images.append({"id": image_id, "file_name": image.name, "height": height, "width": width})
        for cls, polygon in read_segments(label_path(image), len(names)):
            xy = polygon * [width, height]
            low, high = xy.min(0), xy.max(0)
            box = [float(low[0]), float(low[1]), float(high[0] - low[0]), float(high[1] - low[1])]
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": cls + 1,
                                "bbox": box, "area": _polygon_area(xy), "iscrowd": 0,
                                "segmentation": [xy.ravel().tolist()]})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(names)]
    return {"images": gt_images, "annotations": annotations, "categories": categories}


def coco_keypoint_truth(images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...],
                        kpt_shape: tuple[int, int], kpt_sigmas: np.ndarray, area_share: float) -> dict:
    """COCO person-keypoint style instances (pixels; v 2 = labelled, 0 = not), with the OKS sigmas to score by.

    The area OKS scales distances by is the box's times `area_share`: pose labels carry no segment area.
    """
    gt_images, annotations = [], []
    for image_id, (image, (height, width)) in enumerate(zip(images, shapes)):
        gt_images.append({"id": image_id, "file_name": image.name, "height": height, "width": width})
        for cls, (cx, cy, w, h), points in read_keypoints(label_path(image), len(names), kpt_shape):
            box = [(cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height]
            labelled = points[:, 2] > 0
            triplets = np.c_[points[:, 0] * width, points[:, 1] * height, 2.0 * labelled] * labelled[:, None]
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": cls + 1,
                                "bbox": box, "area": box[2] * box[3] * area_share, "iscrowd": 0,
                                "keypoints": triplets.ravel().tolist(), "num_keypoints": int(labelled.sum())})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(names)]
    return {"images": gt_images, "annotations": annotations, "categories": categories,
            "kpt_oks_sigmas": [float(s) for s in kpt_sigmas]}


def _polygon_area(xy: np.ndarray) -> float:
    x, y = xy[:, 0], xy[:, 1]
    return float(abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))) / 2)


def ultralytics_yaml(dataset: Dataset, dest: Path) -> Path:
    """Write a copy of the dataset yaml with an absolute `path`, which Ultralytics needs."""
    spec = yaml.safe_load(dataset.yaml_path.read_text())
    spec["path"] = str(dataset.root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(spec, sort_keys=False))
    return dest
