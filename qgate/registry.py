"""The model registry kept in git tags by GTO: versions `<name>@vX.Y.Z`, stages `<name>#<stage>#N`, their messages.

Reading goes through git (`for-each-ref`, one call, every message); writing through the `gto` CLI, so the
tags are GTO's own and `gto show`, `dvc artifacts get --rev/--stage` and GitHub read them as usual.
A tag message is the verdict as `key: value` lines, so what passed can be read back from the tag alone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from qgate.errors import QgateError

VERSION_TAG = re.compile(r"(?P<name>.+)@v(?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)")
BUMPS = ("major", "minor", "patch")


@dataclass(frozen=True)
class Version:
    """One registered version: its tag, semver numbers, the commit it names and its message's fields."""

    tag: str
    number: tuple[int, int, int]
    commit: str
    fields: dict[str, str]

    @property
    def text(self) -> str:
        """'v0.1.2'."""
        return "v{}.{}.{}".format(*self.number)


def git(repo: Path, *args: str) -> str:
    """A git command's stdout; its own error as a one-line QgateError."""
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode:
        message = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise QgateError(f"{repo}: git {args[0]} failed: {message[-1] if message else f'exit {done.returncode}'}")
    return done.stdout


def tool(name: str) -> str:
    """The command-line tool installed beside this Python (the project's .venv), else the one on PATH."""
    executable = Path(sys.executable).parent / name
    return str(executable) if executable.exists() else (shutil.which(name) or name)


def gto(repo: Path, *args: str) -> str:
    """A gto command (the one installed beside this Python); its error as a one-line QgateError."""
    done = subprocess.run([tool("gto"), *args], cwd=repo, capture_output=True, text=True)
    if done.returncode:
        lines = [line.strip("❌ ").strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise QgateError(f"{repo}: gto {args[0]} failed: {lines[-1] if lines else f'exit {done.returncode}'}")
    return done.stdout


def fields(message: str) -> dict[str, str]:
    """The `key: value` lines of a tag message."""
    pairs = (line.split(":", 1) for line in message.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def versions(repo: Path, name: str) -> list[Version]:
    """Every registered version of `name`, lowest first."""
    out = git(repo, "for-each-ref", f"refs/tags/{name}@*", "--format=%(refname:strip=2)%00%(*objectname)%00"
              "%(objectname)%00%(contents)%01")
    found = []
    for record in filter(str.strip, out.split("\x01")):
        tag, peeled, target, message = record.lstrip("\n").split("\x00", 3)
        match = VERSION_TAG.fullmatch(tag)
        if match and match["name"] == name:
            number = (int(match["major"]), int(match["minor"]), int(match["patch"]))
            found.append(Version(tag, number, peeled or target, fields(message)))
    return sorted(found, key=lambda v: v.number)


def stage_tags(repo: Path, name: str, stage: str) -> list[tuple[str, str]]:
    """(tag, commit) of every assignment of `stage` to a version of `name`, newest first."""
    out = git(repo, "for-each-ref", "--sort=-creatordate", f"refs/tags/{name}#{stage}#*",
              "--format=%(refname:strip=2)%00%(*objectname)%00%(objectname)")
    rows = [line.split("\x00") for line in out.splitlines() if line]
    return [(tag, peeled or target) for tag, peeled, target in rows]


def in_stage(repo: Path, name: str, stage: str) -> str | None:
    """The version `stage` points at now (GTO's rule: the newest assignment), or None."""
    try:
        return gto(repo, "show", f"{name}#{stage}", "--version").strip() or None
    except QgateError:
        return None


def next_version(existing: list[Version], model_sha256: str, bump: str, bump_new_model: str) -> str:
    """v0.0.1 first; then the highest version bumped by `bump`, or by `bump_new_model` when the FP32 model changed."""
    if not existing:
        return "v0.0.1"
    latest = existing[-1]
    rule = bump if latest.fields.get("model_sha256") == model_sha256 else bump_new_model
    major, minor, patch = latest.number
    bumped = {"major": (major + 1, 0, 0), "minor": (major, minor + 1, 0), "patch": (major, minor, patch + 1)}[rule]
    return "v{}.{}.{}".format(*bumped)
