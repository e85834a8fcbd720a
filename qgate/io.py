"""Atomic writers (JSON, CSV, text) and file hashing shared by all stages."""

from __future__ import annotations

import csv
import glob
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

STAGING_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


def _follow_umask(path: Path, mode: int) -> None:
    # mkstemp and mkdtemp create 0600/0700 whatever the umask: a report a web server or another CI user
    # cannot read. What `open()` or `mkdir` would have made (0644/0755 for the usual 022) is what users expect.
    path.chmod(mode & ~_umask())


def _staging_prefix(path: Path) -> str:
    """`.name.<pid>.`: a staging file or folder names its process, so a later run knows when it is orphaned."""
    return f".{path.name}.{os.getpid()}."


def staging_leftovers(path: str | Path, orphaned_only: bool = True) -> list[Path]:
    """The staging files and folders beside `path` (of a process no longer running, with `orphaned_only`)."""
    path = Path(path)
    found = []
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*{STAGING_SUFFIX}"):
        pid = leftover.name[len(path.name) + 2:].split(".", 1)[0]
        if not orphaned_only or (pid.isdigit() and not _running(int(pid))):
            found.append(leftover)
    return found


def remove(path: Path) -> None:
    """Delete a file or a folder tree (a symlink itself, never what it points at)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _staging_beside(path: Path) -> Path:
    """Where a write to `path` is staged; a killed run's leftovers beside it are removed first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in staging_leftovers(path):
        remove(leftover)
    return path.parent


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    The file ends up with the mode `open()` would give it under the process umask.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=_staging_prefix(path), suffix=STAGING_SUFFIX, dir=_staging_beside(path))
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
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(path), suffix=STAGING_SUFFIX, dir=_staging_beside(path)))
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
        raise QgateError(yaml_error(path, exc)) from None


def yaml_error(path: str | Path, exc: yaml.YAMLError) -> str:
    """One line for a YAML error: the file, line and column, and a refused tag called refused, not a syntax error."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    problem = " ".join(str(getattr(exc, "problem", "") or exc).split())
    if isinstance(exc, yaml.constructor.ConstructorError) and "tag" in problem:
        tag = problem.split("tag", 1)[1].strip(" :'\"")
        return (f"{where}: the tag '{tag}' is refused for safety (qgate reads YAML as plain data; such a tag builds "
                "Python objects, which can run code); remove it")
    return f"{where}: not valid YAML ({problem}); fix that line"
