"""A work folder for the benchmarks: the stages write their fixed output paths there, never into the checkout."""

from __future__ import annotations

import dataclasses
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from qgate.params import ExportParams, Params

ROOT = Path(__file__).resolve().parent.parent


def rooted(params: Params, root: Path = ROOT) -> Params:
    """`params` with model.* paths absolute (relative ones are `root`'s: the checkout's, or another project's),
    so any folder can read them."""
    def absolute(path: str) -> str:
        return path if Path(path).is_absolute() else str((root / path).resolve())

    model = params.model
    return dataclasses.replace(params, model=dataclasses.replace(
        model, weights=absolute(model.weights), dataset=absolute(model.dataset), data_dir=absolute(model.data_dir)))


@contextmanager
def inside(work: Path, exported: Path | None = ROOT, links: tuple[str, ...] = (),
           root: Path = ROOT) -> Iterator[Path]:
    """The block runs in `work` (made), with `root`'s data (the checkout's, or another project's) and `exported`'s
    FP32 IR and export record.

    `exported` None: no export yet (the block runs the export stage itself). `links`: more of `root`'s outputs
    the block reads (e.g. models/int8), linked in.
    """
    work.mkdir(parents=True, exist_ok=True)
    for name in ("data", *links):  # dataset yamls may name their root relative to `root`
        if (root / name).exists() and not (work / name).exists():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).symlink_to((root / name).resolve())
    if exported is not None and (work / ExportParams.out_dir) != (exported / ExportParams.out_dir):
        (work / ExportParams.out_dir).parent.mkdir(parents=True, exist_ok=True)
        if not (work / ExportParams.out_dir).exists():
            (work / ExportParams.out_dir).symlink_to((exported / ExportParams.out_dir).resolve())
        (work / ExportParams.record).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(exported / ExportParams.record, work / ExportParams.record)
    previous = Path.cwd()
    os.chdir(work)
    try:
        yield work
    finally:
        os.chdir(previous)
