"""Synthetic shapes dataset (seeded) -> Ultralytics layout with train / calib / val splits and a yaml."""

from __future__ import annotations

import logging
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


def main(params: Params) -> dict:
    """Write the dataset under `demo.data_dir` (replaced whole, atomically) and return its counts."""
    demo = params.demo
    out = Path(demo.data_dir)
    counts = {}
    with atomic_dir(out) as tmp:
        for index, split in enumerate(SPLITS):
            rng = np.random.default_rng([demo.seed, index])
            count = getattr(demo, f"{split}_images")
            counts[f"{split}_images"] = count
            counts[f"{split}_instances"] = _write_split(tmp, split, count, demo, rng)
        _write_yaml(tmp, out, demo)
    log.info("demo_data: %s", counts)
    return counts


def _write_split(root: Path, split: str, count: int, demo: DemoParams, rng: np.random.Generator) -> int:
    (root / "images" / split).mkdir(parents=True)
    (root / "labels" / split).mkdir(parents=True)
    instances = 0
    for i in range(count):
        image, labels = draw_image(rng, len(demo.classes), demo.max_objects)
        stem = f"{split}_{i:05d}"
        cv2.imwrite(str(root / "images" / split / f"{stem}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 92])
        lines = [f"{c} {x:.6f} {y:.6f} {w:.6f} {h:.6f}" for c, x, y, w, h in labels]
        if lines:  # no label file: a background image, as Ultralytics expects
            (root / "labels" / split / f"{stem}.txt").write_text("\n".join(lines) + "\n")
        instances += len(lines)
    return instances


def _write_yaml(root: Path, final: Path, demo: DemoParams) -> None:
    # `path` is the final location relative to the project root, where Ultralytics resolves it too.
    spec = {"path": final.as_posix(), **{s: f"images/{s}" for s in SPLITS},
            "names": dict(enumerate(demo.classes))}
    write_text(root / "demo.yaml", yaml.safe_dump(spec, sort_keys=False))


def draw_image(rng: np.random.Generator, num_classes: int, max_objects: int) -> tuple[np.ndarray, list]:
    """One cluttered BGR image with up to `max_objects` shapes; labels are (class, cx, cy, w, h) normalized."""
    h, w = IMAGE_SHAPES[rng.integers(len(IMAGE_SHAPES))]
    image = _background(rng, h, w)
    boxes: list[tuple[int, int, int, int]] = []
    labels = []
    for _ in range(rng.integers(1, max_objects + 1) if rng.random() > 0.05 else 0):
        cls = int(rng.integers(num_classes))
        size = int(rng.integers(min(h, w) // 5, min(h, w) // 2))
        x0, y0 = int(rng.integers(0, w - size)), int(rng.integers(0, h - size))
        box = (x0, y0, x0 + size, y0 + size)
        if any(_iou(box, other) > 0.2 for other in boxes):
            continue
        colour = _contrasting_colour(rng, image[y0:y0 + size, x0:x0 + size].mean(axis=(0, 1)))
        x1, y1, x2, y2 = _draw_shape(image, cls, box, colour, rng)
        boxes.append(box)
        labels.append((cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h))
    noise = rng.normal(0, 6, image.shape)
    return np.clip(image + noise, 0, 255).astype(np.uint8), labels


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


def _draw_shape(image: np.ndarray, cls: int, box: tuple, colour: tuple, rng: np.random.Generator) -> tuple:
    """Draw class `cls` inside `box`; return the shape's tight box (x1, y1, x2, y2) in pixels."""
    x0, y0, x1, y1 = box
    size = x1 - x0
    cx, cy, r = x0 + size / 2, y0 + size / 2, size / 2
    kind = cls % 4
    if kind == 0:  # ellipse, aspect varies
        rx, ry = r, r * rng.uniform(0.6, 1.0)
        cv2.ellipse(image, (int(cx), int(cy)), (int(rx), int(ry)), 0, 0, 360, colour, -1)
        return cx - int(rx), cy - int(ry), cx + int(rx) + 1, cy + int(ry) + 1
    if kind == 1:  # rectangle
        ry = r * rng.uniform(0.5, 1.0)
        points = np.array([[x0, cy - ry], [x1, cy - ry], [x1, cy + ry], [x0, cy + ry]])
    elif kind == 2:  # triangle
        points = np.array([[cx, y0], [x1, y1], [x0, y1]])
    else:  # star
        angles = np.arange(10) * np.pi / 5 - np.pi / 2
        radii = np.where(np.arange(10) % 2 == 0, r, r * 0.45)
        points = np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1)
    points = np.round(points).astype(np.int32)
    cv2.fillPoly(image, [points], colour)
    return points[:, 0].min(), points[:, 1].min(), points[:, 0].max() + 1, points[:, 1].max() + 1


def _iou(a: tuple, b: tuple) -> float:
    iw = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


if __name__ == "__main__":
    run_stage(main, __doc__)
