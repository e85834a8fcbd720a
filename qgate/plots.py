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


def svg_text(fig) -> str:
    """The figure as SVG text without a date (same input, same bytes); closes the figure."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": "qgate"}):  # unsalted, matplotlib names clip paths at random
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()
