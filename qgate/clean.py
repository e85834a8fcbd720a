"""`make clean`: delete the pipeline's outputs that git does not track; committed results and your files stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from qgate.io import remove, staging_leftovers

CACHES = (".cache",)  # qgate's own scratch (Ultralytics config, fonts): never a user's file


def pipeline_outputs(root: Path) -> list[Path]:
    """Every output the stages of dvc.yaml declare, with params.yaml's values filled in (DVC resolves them)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return sorted({Path(str(out.fs_path)) for stage in repo.index.stages for out in stage.outs})


def tracked(root: Path, path: Path) -> bool:
    """Whether git tracks `path` or anything under it (committed metrics and reports are results, not scratch)."""
    listed = subprocess.run(["git", "ls-files", "--", str(path)], cwd=root, capture_output=True, text=True)
    return bool(listed.stdout.strip())


def main(root: Path = Path(".")) -> list[Path]:
    """Delete untracked pipeline outputs and qgate's caches under `root`; return what was deleted."""
    root = root.resolve()
    removed = []
    outputs = pipeline_outputs(root)
    for path in [*outputs, *(root / name for name in CACHES)]:
        if path.exists() and path.is_relative_to(root) and not tracked(root, path):
            remove(path)
            removed.append(path.relative_to(root))
    for path in outputs:  # what a stage killed mid-write left beside its output
        for leftover in staging_leftovers(path, orphaned_only=False):
            if leftover.is_relative_to(root):
                remove(leftover)
                removed.append(leftover.relative_to(root))
    return removed


if __name__ == "__main__":
    for path in main():
        print(f"removed {path}")
    sys.exit(0)
