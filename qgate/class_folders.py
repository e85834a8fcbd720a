"""A classification dataset in Ultralytics' layout: a split folder (`train/`, `val/`, ...) holding a folder per class.

The class names are the class folders of the first split found, sorted (torchvision's ImageFolder, which
Ultralytics' ClassificationDataset wraps, numbers classes so); an image's class is the folder it sits in.
"""

from __future__ import annotations

from pathlib import Path

from qgate.dataset import IMAGE_SUFFIXES, Dataset
from qgate.errors import QgateError

# Ultralytics' names for the split a model is validated on (`check_cls_dataset`), first found wins
SPLIT_FOLDERS = {"train": ("train",), "val": ("val", "validation", "valid"), "test": ("test",), "calib": ("calib",)}


def load_class_folders(folder: str | Path) -> Dataset:
    """The dataset of a folder of split folders of class folders; a clear error when it is not laid out so."""
    root = Path(folder).resolve()
    found = {split: next((name for name in names if (root / name).is_dir()), None)
             for split, names in SPLIT_FOLDERS.items()}
    splits = {split: name for split, name in found.items() if name}
    if not splits:
        raise QgateError(f"{folder}: no train/ or val/ folder; a classification dataset is <folder>/train/<class>/"
                         "<image> and <folder>/val/<class>/<image> (Ultralytics' layout)")
    first = root / splits.get("train", next(iter(splits.values())))
    names = tuple(sorted(p.name for p in first.iterdir() if p.is_dir()))
    if not names:
        raise QgateError(f"{first}: no class folder; put each class's images in {first}/<class name>/")
    for name in splits.values():
        _check_split(root / name, names)
    return Dataset(root, root, names, splits)


def _check_split(split: Path, names: tuple[str, ...]) -> None:
    """Every image of a split sits in a class folder of the dataset's classes, directly."""
    for path in sorted(split.rglob("*")):
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            continue
        parts = path.relative_to(split).parts
        if len(parts) != 2:
            raise QgateError(f"{path}: not directly in a class folder of {split}; move it to {split}/<class name>/")
        if parts[0] not in names:
            raise QgateError(f"{split / parts[0]}: class '{parts[0]}' is not among the {len(names)} classes of the "
                             f"dataset's first split ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); "
                             "rename the folder or add it there too")


def class_of(image: Path, names: tuple[str, ...]) -> int:
    """The class id of an image: its folder's name among `names`; a clear error naming it otherwise."""
    try:
        return names.index(image.parent.name)
    except ValueError:
        raise QgateError(f"{image}: its folder '{image.parent.name}' is not one of the model's "
                         f"{len(names)} classes; move the image to a folder named after its class") from None


def class_ground_truth(images: list[Path], shapes: list[tuple[int, int]], names: tuple[str, ...]) -> dict:
    """COCO-style records of `images` (ids 0..n-1): one annotation per image, its class (category id = class + 1)."""
    return {"images": [{"id": i, "file_name": image.name, "height": h, "width": w}
                       for i, (image, (h, w)) in enumerate(zip(images, shapes))],
            "annotations": [{"id": i + 1, "image_id": i, "category_id": class_of(image, names) + 1}
                            for i, image in enumerate(images)],
            "categories": [{"id": i + 1, "name": name} for i, name in enumerate(names)]}
