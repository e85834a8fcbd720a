"""Quantizer groups: the unit sensitivity ranks, autofix puts back in float and the ignored scope names (any runtime).

Which quantizers form a group, and how one is reverted, is the runtime's (`Runtime.quantizer_groups`, `revert`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """Activation quantizers and the ops that read their int8 outputs; `weighted` are those ops with int8 weights."""

    quantizers: tuple[str, ...]
    ops: tuple[str, ...]
    weighted: tuple[str, ...]


def ignored_names(groups: list[Group], selected: set[int]) -> list[str]:
    """The op names to add to `quantize.ignored_scope.names` for the selected groups, in graph order."""
    return list(dict.fromkeys(name for i, group in enumerate(groups) if i in selected for name in group.ops))


def union_find(sets) -> Callable[[str], str]:
    """Union-find over names: `root(name)` is the same for every name linked through a shared set."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        parent.setdefault(name, name)
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for names in sets:
        first = root(names[0])
        for name in names[1:]:
            other = root(name)
            if other != first:
                parent[other] = first
    return root


def joined_by_readers(readers: dict[str, list[str]], weighted: set[str]) -> list[Group]:
    """Groups from each op's quantizers (`readers`, ops in graph order): quantizers read by a common op share one,
    as an op runs in float only once all its inputs are. `weighted`: the ops whose weights are int8."""
    root = union_find(readers.values())
    members: dict[str, list[str]] = {}
    for quantizers in readers.values():
        for fq in quantizers:
            members.setdefault(root(fq), [])
            if fq not in members[root(fq)]:
                members[root(fq)].append(fq)
    ops: dict[str, list[str]] = {}
    for name, quantizers in readers.items():
        ops.setdefault(root(quantizers[0]), []).append(name)
    return [Group(tuple(members[r]), tuple(ops[r]), tuple(n for n in ops[r] if n in weighted)) for r in members]
