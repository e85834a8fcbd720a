"""The verdicts in words: the terminal's table, what to do per failed or undecided gate, and the headline."""

from __future__ import annotations

from qgate.cpu import describe
from qgate.gates import Metrics, MetricsUnavailable, Verdict
from qgate.verdicts import INCONCLUSIVE

INDENT = "    "


def headline(verdicts: list[Verdict]) -> str:
    """'PASS: all 15 gates passed', 'PASS (1 inconclusive: g): ...' or 'FAIL: 1 of 15 gates failed (g)'."""
    failed = [v.gate for v in verdicts if not v.passed]
    undecided = [v.gate for v in verdicts if v.state == INCONCLUSIVE]
    note = f"{len(undecided)} inconclusive: {', '.join(undecided)}" if undecided else ""
    if failed:
        text = f"FAIL: {len(failed)} of {len(verdicts)} gates failed ({', '.join(failed)})"
        return text + (f"; {note}" if note else "")
    return f"PASS ({note}): all {len(verdicts)} gates passed" if note else f"PASS: all {len(verdicts)} gates passed"


def result_text(verdict: Verdict) -> str:
    """'pass', 'FAIL', or 'inconclusive (pass)' / 'inconclusive (FAIL)' as the gates.inconclusive policy counted it."""
    outcome = "pass" if verdict.passed else "FAIL"
    return f"inconclusive ({outcome})" if verdict.state == INCONCLUSIVE else outcome


def verdict_table(verdicts: list[Verdict]) -> str:
    """The verdicts as a fixed-width text table for the terminal, the result last."""
    rows = [("gate", "measures", "value", "interval", "limit", "result")] + [
        (v.gate, v.label, v.value, v.interval, v.limit, result_text(v)) for v in verdicts]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def needs_attention(verdicts: list[Verdict]) -> list[Verdict]:
    """The gates a person should act on: failed ones, and those the data could not decide."""
    return [v for v in verdicts if not v.passed or v.state == INCONCLUSIVE]


def actions(verdicts: list[Verdict]) -> str:
    """For each failed or inconclusive gate: what it measured against which limit, and the next thing to do."""
    blocks = []
    for v in needs_attention(verdicts):
        measured = f"{v.label or v.metric} {v.value}" + (f" {v.interval}" if v.interval else "")
        lines = [f"{result_text(v)}  {v.gate}: {measured}, limit {v.limit}"]
        lines += [f"{INDENT}{text}" for text in (v.undecided, v.caveat) if text]
        first, *block = v.hint.splitlines() or [""]
        look, *then = first.split(". ")  # one line per sentence: where to look, then autofix's suggestion
        lines.append(f"{INDENT}look at: {look}")
        lines += [f"{INDENT}{sentence}" for sentence in then] + [f"{INDENT * 2}{line}" for line in block]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def measured_on(m: Metrics) -> str:
    """The line under the verdict table naming the CPU the speed was measured on (another CPU, another ratio)."""
    try:
        path = m.params.benchmark.metrics
        return f"speed measured on {describe({key: m.value(path, key) for key in ('cpu_model', 'cpu_isa')})}"
    except MetricsUnavailable as exc:
        return f"speed: {exc}"


def terminal(m: Metrics, verdicts: list[Verdict]) -> str:
    """What `make gate` prints: the table, the CPU line, what to do per gate, then the headline."""
    parts = [verdict_table(verdicts), measured_on(m)]
    todo = actions(verdicts)
    if todo:
        parts.append("\nWhat to do:\n\n" + todo)
    return "\n".join(parts) + f"\n\n{headline(verdicts)}"
