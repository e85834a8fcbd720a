"""`make tune`'s page: what it chose, speed-up against drop with the gate's limit (Pareto), every candidate."""

from __future__ import annotations

from pathlib import Path

from qgate.deploy import RUNTIMES
from qgate.deployment_checks import candidate_checks
from qgate.io import write_bytes, write_csv, write_text
from qgate.page import Section, figure, render_html, render_markdown
from qgate.params import Params
from qgate.plots import pareto_figure
from qgate.racing import PASSED, Candidate, Fastest

SCOPE_KEY = "ignored_scope"  # the quantize key only autofix's candidate sets (tune.csv: float_scope)

PARETO_COLUMNS = ["candidate", "status", "speedup", "speedup_ci_low", "speedup_ci_high", "drop", "drop_ci_low",
                  "drop_ci_high", "limit", "pareto", "chosen", "beaten_by"]


def pareto_rows(params: Params, task, candidates: list[Candidate], first_round: dict[str, float],
                result: Fastest | None) -> list[dict]:
    """tune_pareto.csv: every benchmarked candidate's speed-up (failed and dropped ones: first round; passing
    ones: over the rounds they ran, with its interval unless a screen cut to one round left it out) and its drop
    in the task's own metric, the gate's limit, and whether it is on the Pareto front."""
    own = task.metrics.primary
    limit = params.gates.max_drop[own.main.key]
    rows = []
    for c in (c for c in candidates if c.name in first_round):
        row = {"candidate": c.name, "status": c.status, "speedup": round(first_round[c.name], 3),
               **c.drops[own.main.key].fields("drop", 5), "limit": limit,
               "chosen": int(bool(result) and c.name == result.chosen),
               "beaten_by": result.beaten_by.get(c.name, "") if result else ""}
        if result and c.name in result.speedups:
            row |= result.speedups[c.name].fields("speedup", 3)
        rows.append(row)
    for row in rows:
        row["pareto"] = int(not any(_dominates(other, row) for other in rows))
    return rows


def _dominates(a: dict, b: dict) -> bool:
    """`a` is at least as fast with at most the drop of `b`, and better in one of them (point values)."""
    return (a["speedup"] >= b["speedup"] and a["drop"] <= b["drop"]
            and (a["speedup"] > b["speedup"] or a["drop"] < b["drop"]))


def write_page(params: Params, task, candidates: list[Candidate], rows: list[dict], block: str,
               metrics: dict) -> None:
    """reports/tune_pareto.csv (the DVC plot's data), reports/tune.md (+ its PNG) and reports/tune.html."""
    cfg = params.tune
    write_csv(cfg.pareto_csv, rows, PARETO_COLUMNS)
    verdict = headline(metrics)
    sections = [_choice(metrics, block), _pareto(params, task, rows), _candidates(params, task, candidates, rows)]
    text, files = render_markdown(verdict, sections, page_files(params), title="qgate tune")
    for name, data in files.items():
        write_bytes(page_files(params) / name, data)
    write_text(cfg.page_md, text)
    write_text(cfg.page_html, render_html(verdict, sections, title="qgate tune"))


def page_files(params: Params) -> Path:
    """The directory of the page's PNGs, beside reports/tune.md (as report_files is beside report.md)."""
    md_path = Path(params.tune.page_md)
    return md_path.with_name(md_path.stem + "_files")


def headline(metrics: dict) -> str:
    """The page's one line: what tune chose and at what speed-up, or that nothing passed."""
    if not metrics["chosen"]:
        return "FAIL: no candidate passes the accuracy gates"
    current = metrics["by_candidate"].get("c0", {}).get("status")
    if metrics["chosen"] == "c0":
        kept = "current settings kept"
    elif current == PASSED:
        kept = "faster settings found"
    else:  # nothing faster was needed: the current settings do not pass, this one does
        kept = f"passes; your current settings (c0): {current}"
    return (f"{metrics['chosen']} ({kept}), speed-up {metrics['chosen_speedup']:.2f}x "
            f"[{metrics['chosen_speedup_ci_low']:.2f}, {metrics['chosen_speedup_ci_high']:.2f}]")


def _choice(metrics: dict, block: str) -> Section:
    counted = ", ".join(f"{metrics[key]} {key.replace('_', ' ')}" for key in
                        ("passed", "failed", "dropped", "same_model", "unfinished") if metrics[key])
    rounds = (f", benchmark rounds: {metrics['screen_rounds']} of every passing candidate, "
              f"{metrics['benchmark_rounds']} in all of the finalists") if metrics["chosen"] else ""
    text = [f"{metrics['candidates']} candidates ({counted}), {metrics['evaluations']} scorings on val subsets"
            f"{rounds}, {metrics['seconds']:.0f} s on {metrics['cpu_model']} ({metrics['cpu_isa']}). The block "
            "below is `reports/tune_quantize.yaml`: paste it under `quantize:` in params.yaml, then `make gate`."]
    return Section("Choice", text, code=block)


def _pareto(params: Params, task, rows: list[dict]) -> Section:
    own = task.metrics.primary
    if not rows:
        return Section("Speed-up against drop", ["No candidate was scored: nothing to plot."])
    level = f"{params.benchmark.ci_level:.0%}"
    text = [f"Every scored candidate: its {own.main.title} drop on the images it was scored on (bar: its "
            f"{params.int8_eval.ci_level:.0%} paired interval) against its speed-up over FP32 from one interleaved "
            f"round of {RUNTIMES[params.deploy.runtime].timer}; a passing candidate's is over every round it ran, with its {level} interval. "
            "The front joins point values; a candidate is preferred only when it is faster beyond that noise, "
            "and passes when the gate would pass it (`gates.inconclusive` decides an interval across the limit)."]
    fig = pareto_figure(rows, rows[0]["limit"], own.main.title, params.benchmark.hint)
    return Section("Speed-up against drop", text,
                   figures=[figure(fig, f"Speed-up against {own.main.title} drop, gate limit dashed")])


def scope_change(params: Params, settings: dict) -> str:
    """What a candidate's float scope adds to the current `quantize.ignored_scope` ('' when nothing: only
    autofix's candidate carries a scope of its own, the current one with names added)."""
    scope = settings.get(SCOPE_KEY)
    if scope is None:
        return ""
    return f"autofix's adds {len(scope['names']) - len(params.quantize.ignored_scope.names)} ops float"


def _candidates(params: Params, task, candidates: list[Candidate], rows: list[dict]) -> Section:
    speed = {r["candidate"]: r for r in rows}
    checks = candidate_checks(params, task.metrics)  # the gates beyond the clean drop
    header = ["candidate", "changed from c0", "status", "images",
              *(f"{f.main.title} drop" for f in task.metrics.scored), *(f"{c.title} drop" for c in checks), "speed-up",
              "why"]
    current = candidates[0].settings if candidates else {}
    table = []
    for c in candidates:
        changes = [f"{k} {v}" for k, v in c.settings.items() if k != SCOPE_KEY and current.get(k) != v]
        changed = ", ".join(filter(None, [*changes, scope_change(params, c.settings)])) or "-"
        drops = [c.drops[key].text() if key in c.drops else "-"
                 for key in [*(f.main.key for f in task.metrics.scored), *(check.key for check in checks)]]
        table.append([c.name, changed, c.status, str(c.images or "-"), *drops, _speed(speed.get(c.name)),
                      c.why or "-"])
    return Section("Candidates", ["`reports/tune.csv` holds the same rows with every setting."],
                   tables=[(header, table)])


def _speed(row: dict | None) -> str:
    if row is None:
        return "-"
    if row.get("speedup_ci_low") is None:
        return f"{row['speedup']:.2f}x (one round)"
    return f"{row['speedup']:.2f}x [{row['speedup_ci_low']:.2f}, {row['speedup_ci_high']:.2f}]"

