"""Shifted inputs: the darker, brighter, noisier, blurrier and more compressed images a deployed detector sees.

Formulas and severities 1-5 follow ImageNet-C (Hendrycks & Dietterich, 2019; COCO-C applies the same ones),
written with NumPy and OpenCV: the `imagecorruptions` package is unmaintained and crashes on current
scikit-image. A shift runs on the decoded image at its original size, before the resize and letterbox, as a
camera would deliver it. Its randomness (noise, the blur's direction) comes from `seed` and the image's index
in the split only: the same image gets the same pixels on every run, machine and executor shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

# ImageNet-C's constants per severity 1..5
BRIGHTNESS = (0.1, 0.2, 0.3, 0.4, 0.5)  # added to (bright) or taken from (dark) HSV value, in [0, 1]
CONTRAST = (0.4, 0.3, 0.2, 0.1, 0.05)  # distance to the image's mean kept
GAUSSIAN_NOISE = (0.08, 0.12, 0.18, 0.26, 0.38)  # standard deviation, in [0, 1]
DEFOCUS = ((3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5))  # disk radius, anti-aliasing sigma (pixels)
MOTION = ((10, 3), (15, 5), (15, 8), (15, 12), (20, 15))  # kernel radius, sigma of its weights (pixels)
JPEG_QUALITY = (25, 18, 15, 10, 7)
SEVERITIES = range(1, 6)


def _unit(image: np.ndarray) -> np.ndarray:
    return image.astype(np.float32) / 255.0


def _uint8(image: np.ndarray) -> np.ndarray:
    """[0, 1] floats back to uint8 pixels, clipped and rounded as ImageNet-C saves them."""
    return np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)


def _value_shift(image: np.ndarray, delta: float) -> np.ndarray:
    hsv = cv2.cvtColor(_unit(image), cv2.COLOR_BGR2HSV)  # float input: V in [0, 1]
    hsv[..., 2] = np.clip(hsv[..., 2] + delta, 0, 1)
    return _uint8(cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR))


def bright(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageNet-C brightness: HSV value + c."""
    return _value_shift(image, BRIGHTNESS[severity - 1])


def dark(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Brightness the other way (COCO-C's low light is the same formula): HSV value - c."""
    return _value_shift(image, -BRIGHTNESS[severity - 1])


def low_contrast(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageNet-C contrast: (x - mean) * c + mean, the mean of each channel over the image."""
    x = _unit(image)
    mean = x.mean(axis=(0, 1), keepdims=True)
    return _uint8((x - mean) * CONTRAST[severity - 1] + mean)


def gaussian_noise(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageNet-C Gaussian noise: x + N(0, c^2) per pixel and channel."""
    x = _unit(image)
    return _uint8(x + rng.normal(0.0, GAUSSIAN_NOISE[severity - 1], x.shape).astype(np.float32))


def disk_kernel(radius: float, sigma: float) -> np.ndarray:
    """ImageNet-C's defocus kernel: a disk of `radius` on a grid of at least 17 x 17, normalised, then Gaussian-blurred
    by `sigma` (anti-aliasing; a 3 x 3 blur up to radius 8, 5 x 5 above)."""
    half, blur = (8, 3) if radius <= 8 else (int(radius), 5)
    span = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(span, span)
    kernel = (xx ** 2 + yy ** 2 <= radius ** 2).astype(np.float32)
    kernel /= kernel.sum()
    return cv2.GaussianBlur(kernel, ksize=(blur, blur), sigmaX=sigma)


def defocus_blur(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageNet-C defocus blur: each channel convolved with the anti-aliased disk."""
    return _uint8(cv2.filter2D(_unit(image), -1, disk_kernel(*DEFOCUS[severity - 1]),
                               borderType=cv2.BORDER_REFLECT))


def motion_kernel(radius: int, sigma: float, angle: float) -> np.ndarray:
    """A one-sided line of Gaussian weights (ImageMagick's motion blur, which ImageNet-C calls) at `angle` degrees."""
    weights = np.exp(-np.arange(radius + 1) ** 2 / (2 * sigma ** 2))
    kernel = np.zeros((2 * radius + 1, 2 * radius + 1), np.float32)
    theta = np.deg2rad(angle)
    for step, weight in enumerate(weights):
        row, col = int(round(radius - step * np.sin(theta))), int(round(radius + step * np.cos(theta)))
        kernel[row, col] += weight
    return kernel / kernel.sum()


def motion_blur(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageNet-C motion blur: a line kernel of Gaussian weights in a direction drawn in [-45, 45] degrees."""
    radius, sigma = MOTION[severity - 1]
    kernel = motion_kernel(radius, sigma, float(rng.uniform(-45, 45)))
    return _uint8(cv2.filter2D(_unit(image), -1, kernel, borderType=cv2.BORDER_REFLECT))


def jpeg(image: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """ImageNet-C JPEG compression: encoded at quality c and decoded."""
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY[severity - 1]])
    return cv2.imdecode(data, cv2.IMREAD_COLOR)


SHIFTS = {f.__name__: f for f in (dark, bright, low_contrast, gaussian_noise, defocus_blur, motion_blur, jpeg)}


@dataclass(frozen=True)
class Shift:
    """One shift at one severity: what an evaluation applies to every image it loads (picklable, for Ray workers)."""

    name: str
    severity: int
    seed: int = 0

    @property
    def label(self) -> str:
        """'gaussian_noise_3': the metrics' key prefix."""
        return f"{self.name}_{self.severity}"

    def __call__(self, image: np.ndarray, index: int) -> np.ndarray:
        """The shifted copy of BGR uint8 `image`, the `index`-th of its split (its randomness: seed and index)."""
        rng = np.random.default_rng([self.seed, index])
        return SHIFTS[self.name](image, self.severity, rng)

