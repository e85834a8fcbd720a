"""A block to paste under a section of params.yaml (autofix's scope block, tune's choice): comment lines that
say what was measured, wrapped to read in a PR or a terminal, then the settings as YAML."""

from __future__ import annotations

import textwrap

import yaml

WIDTH = 100  # a comment line's longest; GitHub shows about 120 characters of a code block without scrolling


def paste_block(header: str, settings: dict) -> str:
    """`header`'s comment lines ("# ..."), each wrapped at WIDTH (a longer word, an op name, stays whole), then
    `settings` (none: nothing to paste) as block YAML in their own order, indented two spaces to sit under a section
    key (`quantize:`)."""
    comments = [f"# {part}".rstrip() for line in header.splitlines()
                for part in textwrap.wrap(line.removeprefix("#").strip(), WIDTH - 2, break_long_words=False,
                                          break_on_hyphens=False) or [""]]
    body = yaml.safe_dump(settings, sort_keys=False, default_flow_style=False) if settings else ""
    return "".join(f"{line}\n" for line in comments) + "".join(f"  {line}\n" for line in body.splitlines())
