"""Synthetic shapes dataset (seeded) -> Ultralytics layout with train / calib / val splits.

`demo.task` picks the labels: boxes (detect), each shape's own outline (segment), four keypoints at the
shape's extreme points, top / right / bottom / left (pose), or the oriented box of a shape drawn at a random angle
(obb), in label files with a dataset yaml; or, for classify, one large shape per image filed in its class's folder
(Ultralytics' classification layout, no yaml).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import yaml

from qgate.cli import run_stage
from qgate.io import atomic_dir, write_text
from qgate.params import DemoParams, Params

log = logging.getLogger(__name__)

SPLITS = ("train", "calib", "val")
IMAGE_SHAPES = ((320, 320), (240, 320), (320, 256), (288, 320))  # (h, w): exercise letterboxing
KEYPOINTS = ("top", "right", "bottom", "left")  # a pose demo's keypoints: the shape's extreme points


@dataclass(frozen=True)
class DemoLabels:
    """How the demo labels one task of objects: the label line of a drawn shape, how far shapes may overlap, yaml
    keys. Images under images/<split>, their label files under labels/<split>, and demo.yaml."""

    line: Callable[[tuple, np.ndarray], str]  # (class, pixel box, outline), (w, h) -> one YOLO label line
    max_overlap: float  # IoU of the shapes' squares above which a shape is not drawn
    yaml: dict
    rotated: bool = False  # shapes drawn at a random angle (inside their square)

    def write_split(self, root: Path, split: str, count: int, demo: DemoParams, rng: np.random.Generator) -> int:
        """Write `count` images of `split` and their labels under `root`; return the number of objects labelled."""
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        instances = 0
        for i in range(count):
            image, shapes = draw_image(rng, len(demo.classes), demo.max_objects, self.max_overlap, self.rotated)
            stem = f"{split}_{i:05d}"
            cv2.imwrite(str(root / "images" / split / f"{stem}.jpg"), image, JPEG)
            lines = [self.line(shape, np.array(image.shape[1::-1])) for shape in shapes]
            if lines:  # no label file: a background image, as Ultralytics expects
                (root / "labels" / split / f"{stem}.txt").write_text("\n".join(lines) + "\n")
            instances += len(lines)
        return instances

    def write_index(self, root: Path, final: Path, demo: DemoParams) -> None:
        """demo.yaml: its `path` is the final location relative to the project root, where Ultralytics resolves it
        too."""
        spec = {"path": final.as_posix(), **{s: f"images/{s}" for s in SPLITS},
                "names": dict(enumerate(demo.classes)), **self.yaml}
        write_text(root / "demo.yaml", yaml.safe_dump(spec, sort_keys=False))


class ClassFolders:
    """The classify demo: one large shape per image, inside the centre square a classifier's crop keeps, filed under
    <split>/<class>/ (every class has its folder, as torchvision's ImageFolder numbers classes by them)."""

    def write_split(self, root: Path, split: str, count: int, demo: DemoParams, rng: np.random.Generator) -> int:
        """Write `count` images of `split` under `root`, each in its class's folder; return `count`."""
        for name in demo.classes:
            (root / split / name).mkdir(parents=True)
        for i in range(count):
            image, cls, _ = draw_centred_shape(rng, len(demo.classes))
            cv2.imwrite(str(root / split / demo.classes[cls] / f"{split}_{i:05d}.jpg"), image, JPEG)
        return count

    def write_index(self, root: Path, final: Path, demo: DemoParams) -> None:
        """Nothing: the folders are the index (`model.dataset` names demo.data_dir)."""


def _box_line(shape: tuple, size: np.ndarray) -> str:
    cls, (x1, y1, x2, y2), _ = shape
    w, h = size
    return f"{cls} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}"


def _outline_line(shape: tuple, size: np.ndarray) -> str:
    return " ".join([str(shape[0]), *(f"{v:.6f}" for v in (shape[2] / size).ravel())])


def _pose_line(shape: tuple, size: np.ndarray) -> str:
    return _box_line(shape, size) + "".join(f" {x:.6f} {y:.6f} 2" for x, y in extreme_points(shape[2]) / size)


def _oriented_line(shape: tuple, size: np.ndarray) -> str:
    """DOTA-style: the four corners of the outline's smallest rotated rectangle (OpenCV's, as Ultralytics reads
    oriented boxes), normalized."""
    corners = cv2.boxPoints(cv2.minAreaRect(shape[2].astype(np.float32)))
    return " ".join([str(shape[0]), *(f"{v:.6f}" for v in (corners / size).clip(0, 1).ravel())])


# outlines and keypoints are labelled whole: no shape of those tasks may hide part of another
DEMO_LABELS = {
    "detect": DemoLabels(_box_line, 0.2, {}),
    "segment": DemoLabels(_outline_line, 0.0, {}),
    # a left-right flip swaps the right and left points (Ultralytics' flip_idx)
    "pose": DemoLabels(_pose_line, 0.0, {"kpt_shape": [len(KEYPOINTS), 3], "flip_idx": [0, 3, 2, 1]}),
    "obb": DemoLabels(_oriented_line, 0.0, {}, rotated=True),
}
DEMO_LAYOUTS = {**DEMO_LABELS, "classify": ClassFolders()}  # how each demo task writes its dataset
JPEG = [cv2.IMWRITE_JPEG_QUALITY, 92]
CENTRED_SIZE = (0.45, 0.85)  # a classify demo shape's side, as a share of the image's shorter side
ROTATED_REACH = 0.7  # a rotated shape's half-size, as a share of its square's: any angle keeps it inside (< 1/sqrt 2)


def main(params: Params) -> dict:
    """Write the dataset under `demo.data_dir` (replaced whole, atomically) and return its counts."""
    demo = params.demo
    out = Path(demo.data_dir)
    counts = {}
    layout = DEMO_LAYOUTS[demo.task]
    with atomic_dir(out) as tmp:
        for index, split in enumerate(SPLITS):
            rng = np.random.default_rng([demo.seed, index])
            count = getattr(demo, f"{split}_images")
            counts[f"{split}_images"] = count
            counts[f"{split}_instances"] = layout.write_split(tmp, split, count, demo, rng)
        layout.write_index(tmp, out, demo)
    log.info("demo_data: %s", counts)
    return counts


def label_line(shape: tuple, task: str, size: tuple[int, int]) -> str:
    """One YOLO label line of a drawn shape (class, pixel box, outline) for `task`, normalized by `size` (h, w)."""
    return DEMO_LABELS[task].line(shape, np.array(size[::-1]))


def extreme_points(outline: np.ndarray) -> np.ndarray:
    """The outline's top, right, bottom and left points (the mean of tied vertices, e.g. a rectangle's edge)."""
    xs, ys = outline[:, 0], outline[:, 1]
    return np.array([outline[ys == ys.min()].mean(axis=0), outline[xs == xs.max()].mean(axis=0),
                     outline[ys == ys.max()].mean(axis=0), outline[xs == xs.min()].mean(axis=0)])


def draw_image(rng: np.random.Generator, num_classes: int, max_objects: int,
               max_overlap: float = 0.2, rotated: bool = False) -> tuple[np.ndarray, list]:
    """One cluttered BGR image with up to `max_objects` shapes, each (class, tight pixel box, outline polygon);
    shapes whose squares overlap more than `max_overlap` (IoU) are not drawn; `rotated`: each at a random angle."""
    h, w = IMAGE_SHAPES[rng.integers(len(IMAGE_SHAPES))]
    image = _background(rng, h, w)
    boxes: list[tuple[int, int, int, int]] = []
    shapes = []
    for _ in range(rng.integers(1, max_objects + 1) if rng.random() > 0.05 else 0):
        cls = int(rng.integers(num_classes))
        size = int(rng.integers(min(h, w) // 5, min(h, w) // 2))
        x0, y0 = int(rng.integers(0, w - size)), int(rng.integers(0, h - size))
        box = (x0, y0, x0 + size, y0 + size)
        if any(_iou(box, other) > max_overlap for other in boxes):
            continue
        colour = _contrasting_colour(rng, image[y0:y0 + size, x0:x0 + size].mean(axis=(0, 1)))
        tight, outline = _draw_shape(image, cls, box, colour, rng, rng.uniform(0, 180) if rotated else None)
        boxes.append(box)
        shapes.append((cls, tight, outline))
    return _with_noise(rng, image), shapes


def _with_noise(rng: np.random.Generator, image: np.ndarray) -> np.ndarray:
    """`image` with the demo's sensor noise, as uint8."""
    return np.clip(image + rng.normal(0, 6, image.shape), 0, 255).astype(np.uint8)


def draw_centred_shape(rng: np.random.Generator, num_classes: int) -> tuple[np.ndarray, int, tuple]:
    """One BGR image of one large shape inside its centre square (what a classifier's centre crop keeps), on the
    detection demo's cluttered background; its class and its tight pixel box (x1, y1, x2, y2)."""
    h, w = IMAGE_SHAPES[rng.integers(len(IMAGE_SHAPES))]
    image = _background(rng, h, w)
    side = min(h, w)
    size = int(rng.integers(int(side * CENTRED_SIZE[0]), int(side * CENTRED_SIZE[1])))
    left, top = (w - side) // 2, (h - side) // 2
    x0, y0 = left + int(rng.integers(0, side - size + 1)), top + int(rng.integers(0, side - size + 1))
    cls = int(rng.integers(num_classes))
    colour = _contrasting_colour(rng, image[y0:y0 + size, x0:x0 + size].mean(axis=(0, 1)))
    tight, _ = _draw_shape(image, cls, (x0, y0, x0 + size, y0 + size), colour, rng)
    return _with_noise(rng, image), cls, tight


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    top, bottom = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    ramp = np.linspace(0, 1, h)[:, None, None]
    image = (top * (1 - ramp) + bottom * ramp) * np.ones((h, w, 3))
    for _ in range(rng.integers(2, 7)):  # clutter: lines and small blobs that are not objects
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        p1 = (int(rng.integers(0, w)), int(rng.integers(0, h)))
        if rng.random() < 0.6:
            p2 = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            cv2.line(image, p1, p2, colour, int(rng.integers(1, 3)))
        else:
            cv2.ellipse(image, p1, (int(rng.integers(2, 8)), int(rng.integers(2, 8))), 0, 0, 360, colour, -1)
    return image


def _contrasting_colour(rng: np.random.Generator, under: np.ndarray) -> tuple[int, int, int]:
    for _ in range(20):
        colour = rng.integers(0, 256, 3)
        if np.abs(colour - under).sum() > 180:
            break
    return tuple(int(c) for c in colour)


def _draw_shape(image: np.ndarray, cls: int, box: tuple, colour: tuple, rng: np.random.Generator,
                angle: float | None = None) -> tuple:
    """Draw class `cls` inside `box` (turned by `angle` degrees about its centre, if given); return its tight box
    (x1, y1, x2, y2) and its outline ([n, 2]) in pixels."""
    x0, y0, x1, y1 = box
    size = x1 - x0
    cx, cy, r = x0 + size / 2, y0 + size / 2, size / 2
    if angle is not None:
        r *= ROTATED_REACH
        x0, y0, x1, y1 = cx - r, cy - r, cx + r, cy + r
    kind = cls % 4
    if kind == 0:  # ellipse, aspect varies
        rx, ry = r, r * rng.uniform(0.6, 1.0)
        centre, axes = (int(cx), int(cy)), (int(rx), int(ry))
        if angle is not None:
            outline = cv2.ellipse2Poly(centre, axes, int(angle), 0, 360, 5)[:-1]
            cv2.fillPoly(image, [outline], colour)
            return _tight(outline), outline.astype(float)
        cv2.ellipse(image, centre, axes, 0, 0, 360, colour, -1)
        outline = cv2.ellipse2Poly(centre, axes, 0, 0, 360, 5)[:-1].astype(float)  # the last point repeats the first
        return (cx - int(rx), cy - int(ry), cx + int(rx) + 1, cy + int(ry) + 1), outline
    if kind == 1:  # rectangle
        ry = r * rng.uniform(0.5, 1.0)
        points = np.array([[x0, cy - ry], [x1, cy - ry], [x1, cy + ry], [x0, cy + ry]])
    elif kind == 2:  # triangle
        points = np.array([[cx, y0], [x1, y1], [x0, y1]])
    else:  # star
        angles = np.arange(10) * np.pi / 5 - np.pi / 2
        radii = np.where(np.arange(10) % 2 == 0, r, r * 0.45)
        points = np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1)
    if angle is not None:
        turn = np.deg2rad(angle)
        rotation = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
        points = (points - (cx, cy)) @ rotation.T + (cx, cy)
    points = np.round(points).astype(np.int32)
    cv2.fillPoly(image, [points], colour)
    return _tight(points), points.astype(float)


def _tight(points: np.ndarray) -> tuple:
    """The tight pixel box (x1, y1, x2, y2) of a filled polygon's integer vertices."""
    return points[:, 0].min(), points[:, 1].min(), points[:, 0].max() + 1, points[:, 1].max() + 1


def _iou(a: tuple, b: tuple) -> float:
    iw = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


if __name__ == "__main__":
    run_stage(main, __doc__)
