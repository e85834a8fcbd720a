"""qgate.shifts: each shift against its ImageNet-C formula on small arrays, and the same pixels on every run."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import cv2
import numpy as np
import pytest

from qgate import shifts
from qgate.shifts import SEVERITIES, SHIFTS, Shift
from qgate.params_check import SHIFT_NAMES
from tests.conftest import ROOT


def _image(seed: int = 0, shape=(24, 32, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _gray(value: int) -> np.ndarray:
    return np.full((4, 5, 3), value, np.uint8)


@pytest.mark.parametrize("severity", SEVERITIES)
def test_brightness_moves_the_hsv_value_by_c(severity):
    """On gray pixels HSV value is the pixel itself: bright adds c, dark takes it, both clipped to [0, 1]."""
    c = shifts.BRIGHTNESS[severity - 1]
    rng = np.random.default_rng(0)
    for value in (0, 40, 128, 230, 255):  # within 1 of the rounded value: float32 arithmetic
        assert np.abs(shifts.bright(_gray(value), severity, rng) - min(value / 255 + c, 1) * 255).max() <= 0.5 + 1e-3
        assert np.abs(shifts.dark(_gray(value), severity, rng) - max(value / 255 - c, 0) * 255).max() <= 0.5 + 1e-3
    colour = _image()
    hsv = cv2.cvtColor(colour.astype(np.float32) / 255, cv2.COLOR_BGR2HSV)
    brighter = cv2.cvtColor(shifts.bright(colour, severity, rng).astype(np.float32) / 255, cv2.COLOR_BGR2HSV)
    assert np.abs(brighter[..., 2] - np.clip(hsv[..., 2] + c, 0, 1)).max() <= 1 / 255 + 1e-6  # rounding to uint8


@pytest.mark.parametrize("severity", SEVERITIES)
def test_contrast_keeps_c_of_each_pixel_s_distance_to_its_channel_mean(severity):
    image, c = _image(), shifts.CONTRAST[severity - 1]
    x = image / 255.0
    mean = x.reshape(-1, 3).mean(0)
    expected = np.clip(np.rint(((x - mean) * c + mean) * 255), 0, 255)
    assert np.abs(shifts.low_contrast(image, severity, None).astype(int) - expected).max() <= 1  # float32 vs 64


@pytest.mark.parametrize("severity", SEVERITIES)
def test_gaussian_noise_adds_seeded_noise_of_deviation_c(severity):
    image, c = _image(), shifts.GAUSSIAN_NOISE[severity - 1]
    noise = np.random.default_rng([7, 3]).normal(0, c, image.shape).astype(np.float32)
    expected = np.clip(np.rint((image.astype(np.float32) / 255 + noise) * 255), 0, 255)
    assert (Shift("gaussian_noise", severity, seed=7)(image, 3) == expected).all()
    if severity <= 3:  # mid-gray clips little up to c = 0.18
        flat = shifts.gaussian_noise(_gray(128).repeat(100, 0).repeat(100, 1), severity, np.random.default_rng(0))
        assert abs(flat.std() / 255 - c) < 0.05 * c


def test_defocus_kernel_is_imagenet_c_s_disk():
    for radius, sigma in shifts.DEFOCUS:
        kernel = shifts.disk_kernel(radius, sigma)
        assert kernel.shape == (17, 17) or kernel.shape == (2 * radius + 1,) * 2
        # normalised before the anti-aliasing blur, which (as in ImageNet-C) reflects at the grid's border: a disk
        # that touches it (radius 8 and 10) gains about 1%
        assert kernel.sum() == pytest.approx(1.0, abs=1e-5 if radius < 8 else 0.02)
        centre = kernel.shape[0] // 2
        rows, cols = np.nonzero(kernel > 1e-6)
        assert np.hypot(rows - centre, cols - centre).max() <= radius + 2 * np.sqrt(2)  # a disk, blurred at its edge
    flat = _gray(90).repeat(8, 0).repeat(8, 1)
    assert (shifts.defocus_blur(flat, 3, None) == 90).all()  # blur keeps a constant image


@pytest.mark.parametrize("angle", [-45.0, 0.0, 30.0])
def test_motion_kernel_is_a_line_of_gaussian_weights(angle):
    kernel = shifts.motion_kernel(10, 3, angle)
    assert kernel.sum() == pytest.approx(1.0)
    rows, cols = np.nonzero(kernel)
    radius = 10
    far = np.hypot(rows - radius, cols - radius) >= 4  # nearer taps are on the pixel grid's nearest cell
    directions = np.arctan2(radius - rows, cols - radius)[far]
    assert far.sum() >= 4 and np.allclose(np.rad2deg(directions), angle, atol=8)  # every tap on the line
    flat = _gray(200).repeat(8, 0).repeat(8, 1)
    assert (Shift("motion_blur", 2)(flat, 0) == 200).all()


def test_jpeg_is_an_encode_decode_at_the_quality_and_worse_with_severity():
    image = cv2.resize(_image(1, (16, 16, 3)), (64, 64), interpolation=cv2.INTER_CUBIC)
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, shifts.JPEG_QUALITY[0]])
    assert (shifts.jpeg(image, 1, None) == cv2.imdecode(data, cv2.IMREAD_COLOR)).all()
    errors = [np.abs(shifts.jpeg(image, s, None).astype(int) - image).mean() for s in SEVERITIES]
    assert errors == sorted(errors) and errors[0] < errors[-1]


def _digest(name: str, severity: int) -> str:
    return hashlib.sha256(Shift(name, severity, seed=0)(_image(2, (40, 56, 3)), 11).tobytes()).hexdigest()


def test_every_shift_gives_the_same_pixels_on_every_run():
    """Seeded by seed and image index only: twice here, and in a new process, the same bytes; another index or seed
    other pixels (for the random ones)."""
    here = {(name, s): _digest(name, s) for name in SHIFTS for s in (1, 5)}
    assert here == {(name, s): _digest(name, s) for name in SHIFTS for s in (1, 5)}
    code = ("from tests.test_shifts import _digest; from qgate.shifts import SHIFTS; "
            "print(*(_digest(n, s) for n in SHIFTS for s in (1, 5)))")
    other = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert other.stdout.split() == list(here.values())
    image = _image(2, (40, 56, 3))
    for name in ("gaussian_noise", "motion_blur"):
        assert not (Shift(name, 3)(image, 0) == Shift(name, 3)(image, 1)).all()
        assert not (Shift(name, 3, seed=1)(image, 0) == Shift(name, 3)(image, 0)).all()
    for name in SHIFTS:  # every shift changes the image
        assert not (Shift(name, 3)(image, 0) == image).all(), name


def test_params_check_knows_every_shift_by_name():
    """params_check lists the names without importing OpenCV: the two lists are one."""
    assert SHIFT_NAMES == tuple(SHIFTS)
