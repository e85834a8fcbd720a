"""Settings as YAML lines to paste under a section of params.yaml (autofix's scope block, tune's choice)."""

from __future__ import annotations

import yaml


def paste_lines(settings: dict) -> str:
    """`settings` as block YAML in their own order, indented two spaces to sit under a section key (`quantize:`)."""
    body = yaml.safe_dump(settings, sort_keys=False, default_flow_style=False)
    return "".join(f"  {line}\n" for line in body.splitlines())
