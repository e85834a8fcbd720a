"""Atomic writers (JSON, CSV, text) and file hashing shared by all stages."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from qgate.errors import QgateError


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


def _follow_umask(path: Path, mode: int) -> None:
    # mkstemp and mkdtemp create 0600/0700 whatever the umask: a report a web server or another CI user
    # cannot read. What `open()` or `mkdir` would have made (0644/0755 for the usual 022) is what users expect.
    path.chmod(mode & ~_umask())


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    The file ends up with the mode `open()` would give it under the process umask.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():
            _follow_umask(tmp_path, 0o666)
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty staging folder beside `path`; it replaces `path` whole only if the block succeeds.

    Readers never see a half-written folder, and a failure leaves the old one (or none) in place.
    The folder gets the mode `mkdir` would give it under the process umask.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield staging
        _follow_umask(staging, 0o777)
        shutil.rmtree(path, ignore_errors=True)
        staging.rename(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_json(path: str | Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_text(path: str | Path, text: str) -> None:
    """Write `text`, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data`, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_csv(path: str | Path, rows: Iterable[dict[str, Any]], fieldnames: list[str]) -> None:
    """Write dict rows as CSV with a header, atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)


def read_json(path: str | Path) -> Any:
    """Read a JSON file."""
    with open(path) as handle:
        return json.load(handle)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_yaml(path: str | Path, missing: str) -> Any:
    """Parse a YAML file; QgateError naming the file when it is absent (`missing` says what to do) or broken."""
    path = Path(path)
    if not path.is_file():
        raise QgateError(f"{path}: {missing}")
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise QgateError(f"{path}: not valid YAML ({exc.__class__.__name__}); fix its syntax") from exc
