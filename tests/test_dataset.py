"""Dataset yaml resolution, YOLO label validation and COCO ground truth conversion."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from qgate.dataset import (coco_ground_truth, label_path, load_dataset, orphan_labels, read_keypoints, read_labels,
                           read_segments, split_images)
from qgate.errors import QgateError


def _dataset(tmp_path: Path, labels: dict[str, str], names=("a", "b")) -> Path:
    (tmp_path / "images" / "val").mkdir(parents=True)
    (tmp_path / "labels" / "val").mkdir(parents=True)
    for stem, text in labels.items():
        (tmp_path / "images" / "val" / f"{stem}.jpg").write_bytes(b"")
        if text is not None:
            (tmp_path / "labels" / "val" / f"{stem}.txt").write_text(text)
    spec = {"path": ".", "val": "images/val", "names": list(names)}
    (tmp_path / "data.yaml").write_text(yaml.safe_dump(spec))
    return tmp_path / "data.yaml"


def test_root_resolves_against_yaml_folder(tmp_path, monkeypatch):
    yaml_path = _dataset(tmp_path, {"x": "0 0.5 0.5 0.2 0.2\n"})
    monkeypatch.chdir("/")
    dataset = load_dataset(yaml_path)
    assert dataset.root == tmp_path.resolve()
    assert [p.name for p in split_images(dataset, "val")] == ["x.jpg"]


def test_label_path_replaces_last_images_folder():
    assert label_path(Path("/d/images/x/images/val/a.jpg")) == Path("/d/images/x/labels/val/a.txt")


def test_labels_dedup_polygons_and_backgrounds(tmp_path):
    yaml_path = _dataset(tmp_path, {
        "dup": "0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n",
        "poly": "1 0.1 0.1 0.3 0.1 0.3 0.5\n",
        "empty": "",
        "nolabel": None,
    })
    images = split_images(load_dataset(yaml_path), "val")
    counts = {p.stem: len(read_labels(label_path(p), 2)) for p in images}
    assert counts == {"dup": 1, "poly": 1, "empty": 0, "nolabel": 0}
    cls, cx, cy, w, h = read_labels(label_path(images[[p.stem for p in images].index("poly")]), 2)[0]
    assert (cls, cx, cy, w, h) == pytest.approx((1, 0.2, 0.3, 0.2, 0.4))


def test_coco_ground_truth_pixels(tmp_path):
    yaml_path = _dataset(tmp_path, {"a": "1 0.5 0.25 0.5 0.5\n"})
    images = split_images(load_dataset(yaml_path), "val")
    gt = coco_ground_truth(images, [(200, 100)], ("a", "b"))
    assert gt["images"] == [{"id": 0, "file_name": "a.jpg", "height": 200, "width": 100}]
    ann = gt["annotations"][0]
    assert ann["category_id"] == 2 and ann["bbox"] == pytest.approx([25, 0, 50, 100]) and ann["iscrowd"] == 0


def test_orphan_label_is_found_not_loaded(tmp_path):
    yaml_path = _dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n"})
    (tmp_path / "labels" / "val" / "ghost.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    images = split_images(load_dataset(yaml_path), "val")
    assert [p.name for p in orphan_labels(images)] == ["ghost.txt"] and [p.name for p in images] == ["a.jpg"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("2 0.5 0.5 0.1 0.1", "a.txt:1: class id 2 is outside 0..1", id="class-id-too-big"),
        pytest.param("-1 0.5 0.5 0.1 0.1", "class id -1 is outside 0..1", id="class-id-negative"),
        pytest.param("0 1.5 0.5 0.1 0.1", "a.txt:1: coordinates must be normalized to [0, 1]", id="coord-above-1"),
        pytest.param("0 0.5 -0.2 0.1 0.1", "coordinates must be normalized to [0, 1]", id="coord-below-0"),
        pytest.param("0 0.5 0.5 0.1", "expected 'class cx cy w h' or a polygon", id="too-few-values"),
        pytest.param("x 0.5 0.5 0.1 0.1", "not numbers", id="not-numbers"),
        pytest.param("0 nan 0.5 0.1 0.1", "a.txt:1: a value is not finite", id="nan-coordinate"),
        pytest.param("nan 0.5 0.5 0.1 0.1", "a value is not finite", id="nan-class-id"),
        pytest.param("0 0.5 0.5 inf 0.1", "a value is not finite", id="inf-coordinate"),
        pytest.param("0.5 0.5 0.5 0.1 0.1", "class id 0.5 is outside 0..1", id="fractional-class-id"),
    ],
)
def test_bad_label_lines(tmp_path, line, expected):
    yaml_path = _dataset(tmp_path, {"a": line + "\n"})
    with pytest.raises(QgateError, match="a.txt:1") as info:
        read_labels(label_path(split_images(load_dataset(yaml_path), "val")[0]), 2)
    assert expected in str(info.value)


def test_a_yaml_inside_the_folder_its_path_names_is_found_from_any_cwd(tmp_path, monkeypatch):
    """The demo's yaml (data/demo/demo.yaml, `path: data/demo`) read from another checkout's root, which has a
    data/demo of its own: the yaml's folder is the root, not the cwd's folder of the same name."""
    ours = _dataset(tmp_path / "project" / "data" / "demo", {"a": "0 0.5 0.5 0.2 0.2\n"})
    spec = yaml.safe_load(ours.read_text()) | {"path": "data/demo"}
    ours.write_text(yaml.safe_dump(spec))
    (tmp_path / "elsewhere" / "data" / "demo").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert load_dataset(ours).root == (tmp_path / "project" / "data" / "demo").resolve()


def test_missing_root_names_the_yaml(tmp_path):
    (tmp_path / "data.yaml").write_text(yaml.safe_dump({"path": "nowhere", "val": "images/val", "names": ["a"]}))
    with pytest.raises(QgateError, match=r"data.yaml: dataset root 'nowhere' does not exist"):
        load_dataset(tmp_path / "data.yaml")


def test_missing_split_folder(tmp_path):
    (tmp_path / "data.yaml").write_text(yaml.safe_dump({"path": ".", "val": "images/val", "names": ["a"]}))
    with pytest.raises(QgateError, match=r"'val' path .*images/val does not exist"):
        split_images(load_dataset(tmp_path / "data.yaml"), "val")


def test_empty_split(tmp_path):
    (tmp_path / "images" / "val").mkdir(parents=True)
    (tmp_path / "data.yaml").write_text(yaml.safe_dump({"path": ".", "val": "images/val", "names": ["a"]}))
    with pytest.raises(QgateError, match="'val' split has no images"):
        split_images(load_dataset(tmp_path / "data.yaml"), "val")


def test_no_names(tmp_path):
    (tmp_path / "data.yaml").write_text(yaml.safe_dump({"path": ".", "val": "images/val"}))
    with pytest.raises(QgateError, match="no 'names' list"):
        load_dataset(tmp_path / "data.yaml")


def test_names_as_a_dict_in_any_key_order(tmp_path):
    yaml_path = _dataset(tmp_path, {"x": "2 0.5 0.5 0.2 0.2\n"})
    spec = yaml.safe_load(yaml_path.read_text())
    yaml_path.write_text(yaml.safe_dump({**spec, "names": {2: "c", 0: "a", 1: "b"}}))
    assert load_dataset(yaml_path).names == ("a", "b", "c")


def test_names_with_a_gap_is_an_error_naming_the_missing_id(tmp_path):
    yaml_path = _dataset(tmp_path, {"x": "2 0.5 0.5 0.2 0.2\n"})
    spec = yaml.safe_load(yaml_path.read_text())
    yaml_path.write_text(yaml.safe_dump({**spec, "names": {0: "a", 2: "c"}}))
    with pytest.raises(QgateError, match=r"data.yaml: 'names' has no class id 1; .*'1: unused'"):
        load_dataset(yaml_path)


@pytest.mark.parametrize("shape, dtype", [((37, 50), "uint8"), ((37, 50, 4), "uint8"), ((37, 50, 3), "uint16"),
                                          ((37, 50), "uint16")], ids=["gray", "rgba", "rgb16", "gray16"])
def test_odd_image_formats_load_as_8bit_bgr_like_ultralytics(tmp_path, shape, dtype):
    """Grayscale, RGBA and 16-bit PNGs decode to the same 8-bit BGR pixels Ultralytics' val loader reads."""
    import cv2
    import numpy as np
    from ultralytics.utils.patches import imread

    from qgate.preprocess import load_image

    pixels = np.random.default_rng(0).integers(0, np.iinfo(dtype).max, shape, dtype=dtype)
    path = tmp_path / "odd.png"
    cv2.imwrite(str(path), pixels)
    ours, hw0, _ = load_image(path, 50)  # long side already 50: no resize, the decoded pixels themselves
    theirs = imread(str(path), flags=cv2.IMREAD_COLOR)  # what the val dataset's cv2_flag is for 3-channel models
    assert ours.dtype == np.uint8 and ours.shape == (37, 50, 3) and hw0 == (37, 50)
    assert np.array_equal(ours, theirs)


FUZZ_TOKENS = ["0", "1", "2", "-1", "0.5", "1.0000001", "-0.0", "1e-9", "1e309", "-1e309", "nan", "NaN", "inf",
               "-inf", "0x1p-1", "1_0", "0.5.5", "", "x", "--1", "+0.5", "1e", "٠", "0.25", "3.0", "999999999999"]


def _fuzz_lines(count: int, seed: int) -> list[str]:
    """Label lines of 0 to 12 tokens drawn from numbers, edge values and junk; reproducible from the seed."""
    rng = random.Random(seed)
    separators = [" ", "  ", "\t", " \t "]
    return [rng.choice(separators).join(rng.choice(FUZZ_TOKENS) for _ in range(rng.randint(0, 12)))
            for _ in range(count)]


@pytest.mark.parametrize("seed", range(3))
def test_fuzzed_label_lines_give_labels_in_range_or_one_line_errors(tmp_path, seed):
    """A few hundred generated malformed lines through every label reader: each is read into finite values in
    [0, 1] or refused with a QgateError naming the file and line, never another exception."""
    path = tmp_path / "a.txt"
    readers = [lambda: read_labels(path, 2)[:, 1:], lambda: [p for _, p in read_segments(path, 2)],
               lambda: [np.r_[points[points[:, 2] > 0, :2].ravel(), box]  # a negative keypoint is an unlabelled one
                       for _, box, points in read_keypoints(path, 2, (1, 2))]]
    refused = read = 0
    for line in _fuzz_lines(150, seed):
        path.write_text(line + "\n")
        for reader in readers:
            try:
                arrays = reader()
            except QgateError as exc:
                refused += 1
                assert str(exc).startswith(f"{path}:1: ") and "\n" not in str(exc), str(exc)
                continue
            read += 1
            for coords in arrays if isinstance(arrays, list) else [arrays]:
                assert np.isfinite(coords).all() and (coords >= -1e-6).all() and (coords <= 1 + 1e-6).all(), line
    assert refused > 300 and read > 0  # the generator reaches both outcomes, so each branch above is exercised
