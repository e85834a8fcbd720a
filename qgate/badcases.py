"""Bad-case pictures: an image's FP32 and INT8 detections drawn side by side, for the report."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from qgate.dataset import load_dataset, split_images
from qgate.errors import QgateError
from qgate.params import Params

FP32_COLOR, INT8_COLOR = (164, 101, 52), (0, 121, 245)  # BGR: the report's blue and orange
PANEL_WIDTH = 320


def draw_bad_cases(params: Params, rows: list[dict]) -> list[tuple[str, str, bytes]]:
    """(caption, '', JPEG bytes) per bad-case row; empty when the images or detections are not on disk."""
    try:
        dataset = load_dataset(params.model.dataset)
        by_name = {p.name: p for p in split_images(dataset, params.baseline.split)}
        fp32 = _by_image(params.baseline.detections)
        int8 = _by_image(params.int8_eval.detections)
    except (QgateError, OSError, ValueError):
        return []
    conf, figures = params.int8_eval.bad_case_conf, []
    for row in rows:
        path = by_name.get(row["file_name"])
        image = cv2.imread(str(path)) if path else None
        if image is None:
            continue
        image_id = int(row["image_id"])
        scale = PANEL_WIDTH / image.shape[1]  # every panel the same width, so boxes and labels read alike
        image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        left = _draw(image, fp32.get(image_id, []), conf, dataset.names, FP32_COLOR, "FP32", scale)
        right = _draw(image, int8.get(image_id, []), conf, dataset.names, INT8_COLOR, "INT8", scale)
        panel = np.hstack([left, np.full((image.shape[0], 8, 3), 255, np.uint8), right])
        ok, jpeg = cv2.imencode(".jpg", panel, [cv2.IMWRITE_JPEG_QUALITY, 85])
        if ok:
            figures.append((f"#{row['rank']} {row['file_name']}: disagreement {row['disagreement']} "
                            f"(FP32 left, INT8 right)", "", jpeg.tobytes()))
    return figures


def _by_image(path: str) -> dict[int, list[dict]]:
    detections: dict[int, list[dict]] = {}
    for det in json.loads(Path(path).read_text()):
        detections.setdefault(int(det["image_id"]), []).append(det)
    return detections


def _draw(image: np.ndarray, detections: list[dict], conf: float, names: tuple[str, ...], color, title: str,
          scale: float) -> np.ndarray:
    canvas = image.copy()
    for det in detections:
        if det["score"] < conf:
            continue
        x, y, w, h = (int(round(v * scale)) for v in det["bbox"])
        if "poly" in det:  # an oriented box: its corners
            corners = np.round(np.reshape(det["poly"], (-1, 2)) * scale).astype(np.int32)
            cv2.polylines(canvas, [corners], True, color, 2)
        else:
            cv2.rectangle(canvas, (x, y), (x + w, y + h), color, 2)
        _label(canvas, f"{names[det['category_id'] - 1]} {det['score']:.2f}", (x, y), color)
    _label(canvas, title, (0, 22), (40, 40, 40), font_scale=0.6)
    return canvas


def _label(canvas: np.ndarray, text: str, corner: tuple[int, int], color, font_scale: float = 0.45) -> None:
    """White text on a filled box of `color`, just above `corner` (inside the image when at the top edge)."""
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 1)
    x, y = corner[0], max(corner[1], h + base + 2)
    cv2.rectangle(canvas, (x, y - h - base - 2), (x + w + 4, y), color, -1)
    cv2.putText(canvas, text, (x + 2, y - base), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (255, 255, 255), 1,
                cv2.LINE_AA)
