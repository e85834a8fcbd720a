"""Figures shared by stages and the report (matplotlib, headless, no fonts fetched)."""

from __future__ import annotations

import io


def sensitivity_figure(rows: list[dict]):
    """Horizontal bars: share of the INT8 detection error removed when each group is float (bar: the low
    quantile the ranking uses; dot: over all the ranking images)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.28 * max(len(rows), 4) + 1))
    labels = [f"{r['first_op']} (+{int(r['ops']) - 1})" if int(r["ops"]) > 1 else r["first_op"] for r in rows]
    ax.barh(range(len(rows)), [float(r["error_removed_low"]) for r in rows], color="#f57900",
            label="low quantile over resamples of the images (ranks)")
    ax.plot([float(r["error_removed"]) for r in rows], range(len(rows)), "o", color="#204a87", markersize=3,
            label="all ranking images")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the INT8 detection error removed when the group is float")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


STATUS_COLOURS = {"passed": "#3465a4", "failed": "#cc0000", "dropped": "#ef2929"}


def pareto_figure(rows: list[dict], limit: float, metric: str, hint: str):
    """Speed-up over FP32 against the accuracy drop, one point per candidate (tune_pareto.csv rows), the gate's
    limit as a line, the Pareto front joined and the chosen candidate starred; bars are the measured intervals."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    for status, colour in STATUS_COLOURS.items():
        shown = [r for r in rows if r["status"] == status]
        if not shown:
            continue
        ax.errorbar([r["speedup"] for r in shown], [r["drop"] for r in shown],
                    yerr=_spans(shown, "drop"), xerr=_spans(shown, "speedup"), fmt="o", color=colour, ms=5,
                    elinewidth=0.8, capsize=2, label=status)
    front = sorted((r for r in rows if r["pareto"]), key=lambda r: r["speedup"])
    ax.plot([r["speedup"] for r in front], [r["drop"] for r in front], "-", color="#888", lw=0.8, zorder=0,
            label="Pareto front (faster, or lower drop)")
    for r in rows:
        ax.annotate(r["candidate"], (r["speedup"], r["drop"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    for r in (r for r in rows if r["chosen"]):
        ax.plot(r["speedup"], r["drop"], "*", color="#137333", ms=16, zorder=3, label=f"chosen: {r['candidate']}")
    ax.axhline(limit, color="#cc0000", ls="--", lw=1, label=f"gate limit {limit:g}")
    ax.set_xlabel(f"INT8 speed-up over FP32 ({hint})")
    ax.set_ylabel(f"{metric} drop (FP32 - INT8)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the points, never on them
    return fig


def _spans(rows: list[dict], key: str) -> list[list[float]]:
    """Error bar lengths below and above each point from its `key`_ci_low/high (none where not measured)."""
    def span(r: dict, end: str) -> float:
        bound = r.get(f"{key}_ci_{end}")
        return 0.0 if bound in (None, "") else abs(float(bound) - float(r[key]))
    return [[span(r, "low") for r in rows], [span(r, "high") for r in rows]]


def svg_text(fig) -> str:
    """The figure as SVG text without a date (same input, same bytes); closes the figure."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": "qgate"}):  # unsalted, matplotlib names clip paths at random
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()
