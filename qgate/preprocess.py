"""How an image becomes a model's input, as Ultralytics prepares it per task: decoded (and shifted), then
letterboxed (detection, segmentation, pose) or centre-cropped (classification); a remote worker gets the bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from qgate.errors import QgateError

PAD_VALUE = 114


@dataclass(frozen=True)
class EncodedImage:
    """An image file's name and bytes: what a remote worker decodes, with no shared file system."""

    name: str
    data: bytes


@dataclass(frozen=True)
class Letterbox:
    """How an image became the model's input: original (h, w), resized (h, w), and the padding (left, top)."""

    hw0: tuple[int, int]
    hw: tuple[int, int]
    pad: tuple[int, int]


def read_bytes(path: Path) -> bytes:
    """An image file's bytes; a clear error naming an unreadable one."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise QgateError(f"{path}: cannot read the image ({exc.strerror}); fix it or remove it from the split") \
            from None


def decode(source: Path | EncodedImage, shift=None, index: int = 0) -> np.ndarray:
    """The BGR image at its original size, shifted by `shift` (`qgate.shifts.Shift`) as the `index`-th of its split.

    Decoded from the file's bytes, as Ultralytics' `imread` does, so a path and its bytes give the same pixels.
    """
    name, data = (source.name, source.data) if isinstance(source, EncodedImage) else (source, read_bytes(source))
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise QgateError(f"{name}: unreadable image; replace it or remove it from the split")
    return image if shift is None else shift(image, index)


def resize_long_side(image: np.ndarray, imgsz: int) -> np.ndarray:
    """The long side resized to imgsz (up or down) like Ultralytics' detection datasets."""
    h0, w0 = image.shape[:2]
    ratio = imgsz / max(h0, w0)
    if ratio == 1:
        return image
    size = (min(math.ceil(w0 * ratio), imgsz), min(math.ceil(h0 * ratio), imgsz))
    return cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)


def load_image(source: Path | EncodedImage, imgsz: int, shift=None,
               index: int = 0) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
    """Decode (`decode`) and resize the long side to imgsz; return (image, hw0, hw)."""
    original = decode(source, shift, index)
    image = resize_long_side(original, imgsz)
    return image, original.shape[:2], image.shape[:2]


def letterbox(image: np.ndarray, imgsz: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Pad (never upscale) to imgsz x imgsz, centred; return the uint8 BGR image and (left, top)."""
    h, w = image.shape[:2]
    ratio = min(imgsz / h, imgsz / w, 1.0)
    new_w, new_h = max(round(w * ratio), 1), max(round(h * ratio), 1)
    if (new_w, new_h) != (w, h):
        image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    dw, dh = (imgsz - new_w) / 2, (imgsz - new_h) / 2
    top, bottom, left, right = round(dh - 0.1), round(dh + 0.1), round(dw - 0.1), round(dw + 0.1)
    image = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(PAD_VALUE,) * 3)
    return image, (left, top)


def letterboxed(image: np.ndarray, imgsz: int) -> tuple[np.ndarray, Letterbox]:
    """A detection model's input from the original BGR image: long side to imgsz, then letterboxed; its geometry."""
    resized = resize_long_side(image, imgsz)
    padded, pad = letterbox(resized, imgsz)
    return padded, Letterbox(image.shape[:2], resized.shape[:2], pad)


def center_cropped(image: np.ndarray, imgsz: int) -> tuple[np.ndarray, None]:
    """A classifier's input from the original BGR image, as Ultralytics' `classify_transforms` makes it: the short
    side resized to imgsz (PIL bilinear with antialiasing, torchvision's resize of a PIL image), then the centred
    imgsz x imgsz crop (no mean or scale beyond /255: Ultralytics' defaults); uint8 BGR, and no geometry to undo."""
    from PIL import Image

    h, w = image.shape[:2]
    # torchvision's shortest-edge size: the long side truncated, not rounded
    size = (imgsz, int(imgsz * h / w)) if w <= h else (int(imgsz * w / h), imgsz)
    rgb = Image.fromarray(np.ascontiguousarray(image[:, :, ::-1]))
    if size != (w, h):
        rgb = rgb.resize(size, Image.Resampling.BILINEAR)
    top, left = int(round((size[1] - imgsz) / 2.0)), int(round((size[0] - imgsz) / 2.0))
    return np.ascontiguousarray(np.asarray(rgb)[top:top + imgsz, left:left + imgsz, ::-1]), None


def to_tensor(image: np.ndarray) -> np.ndarray:
    """A prepared uint8 BGR HWC image -> the float32 RGB NCHW tensor in [0, 1] that the plain IR takes."""
    return np.ascontiguousarray(image[:, :, ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 255.0)


def image_tensor(source: Path | EncodedImage, imgsz: int, shift=None, index: int = 0,
                 prepare=letterboxed) -> np.ndarray:
    """One image as the float tensor the plain IR takes (calibration, capture), prepared by `prepare` (the task's:
    `letterboxed` for detection); shifted first by `shift`, as the `index`-th image of its split (`decode`)."""
    return to_tensor(prepare(decode(source, shift, index), imgsz)[0])
