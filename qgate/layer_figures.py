"""Pictures of single layers for the report: a layer's neighbourhood coloured by SQNR, its quantizer's histogram."""

from __future__ import annotations

from collections import deque

import numpy as np

from qgate.histograms import SUBSTEPS, share_at_bounds

SQNR_SCALE_DB = (0.0, 40.0)  # the colour scale: red at 0 dB (signal lost), green from 40 dB (INT8 is exact enough)
NEIGHBOURHOOD_HOPS = 3  # ops before and after the layer, along the graph's edges
NEIGHBOURHOOD_NODES = 18  # at most, nearest first: a C2f block fans out and the picture must stay readable
DRAWN_BINS = 200  # at most, in a histogram figure
STEP_TICKS = 60  # the levels are drawn as ticks when the plotted span holds fewer than this many steps


class LayerGraph:
    """The ops of the divergence table (`reports/divergence.csv` rows) as a graph: SQNR, precision and edges."""

    def __init__(self, rows: list[dict]):
        self.order, self.sqnr, self.type, self.int8, self.inputs = {}, {}, {}, {}, {}
        for row in rows:  # an op with several outputs has a row per port: its worst one stands for it
            name = row["name"]
            self.order.setdefault(name, len(self.order))
            self.sqnr[name] = min(float(row["sqnr_db"]), self.sqnr.get(name, np.inf))
            self.type[name], self.int8[name] = row["type"], row["introduces_error"] == "1"
            self.inputs[name] = [n for n in row.get("inputs", "").split() if n]
        self.consumers: dict[str, list[str]] = {name: [] for name in self.order}
        for name, inputs in self.inputs.items():
            for source in inputs:
                self.consumers.setdefault(source, []).append(name)

    def neighbourhood(self, centre: str, hops: int = NEIGHBOURHOOD_HOPS,
                      limit: int = NEIGHBOURHOOD_NODES) -> list[str]:
        """`centre` and the ops up to `hops` edges before or after it (the nearest `limit`), in graph order."""
        distance, queue = {centre: 0}, deque([centre])
        while queue and len(distance) < limit:
            name = queue.popleft()
            if distance[name] == hops:
                continue
            for other in self.inputs.get(name, []) + self.consumers.get(name, []):
                if other in self.order and other not in distance and len(distance) < limit:
                    distance[other] = distance[name] + 1
                    queue.append(other)
        return sorted(distance, key=self.order.__getitem__)


def neighbourhood_figure(graph: LayerGraph, centre: str, marked: frozenset[str] = frozenset()):
    """The ops around `centre`, top to bottom in graph order, each box coloured by its SQNR, solid when it runs in
    int8 and dashed when float; `centre` outlined in blue, `marked` ops (a quantizer group) in purple."""
    import matplotlib.pyplot as plt
    from matplotlib import cm, colors

    names = graph.neighbourhood(centre)
    level: dict[str, int] = {}
    for name in names:  # graph order is topological: each op goes one level below its deepest shown input
        level[name] = 1 + max((level[i] for i in graph.inputs[name] if i in level), default=-1)
    rows: dict[int, list[str]] = {}
    for name in names:
        rows.setdefault(level[name], []).append(name)
    widest = max(len(r) for r in rows.values())
    fig, ax = plt.subplots(figsize=(max(6.0, 3.1 * widest), 0.95 * len(rows) + 1.0))
    norm, cmap = colors.Normalize(*SQNR_SCALE_DB), plt.get_cmap("RdYlGn")
    where = {}
    for depth, members in rows.items():
        for i, name in enumerate(members):
            where[name] = (3.1 * (i - (len(members) - 1) / 2), -depth)
    for name in names:
        for source in graph.inputs[name]:
            if source in where:
                (x0, y0), (x1, y1) = where[source], where[name]
                ax.annotate("", (x1, y1 + 0.28), (x0, y0 - 0.28),
                            arrowprops={"arrowstyle": "->", "color": "#555", "lw": 0.8})
    for name in names:
        x, y = where[name]
        edge, width = ("#204a87", 3.0) if name == centre else ("#75507b", 2.4) if name in marked else ("#222", 1.0)
        ax.add_patch(plt.Rectangle((x - 1.5, y - 0.28), 3.0, 0.56, facecolor=cmap(norm(graph.sqnr[name])),
                                   edgecolor=edge, lw=width, ls="-" if graph.int8[name] else "--"))
        precision = "int8" if graph.int8[name] else "float"
        ax.text(x, y + 0.08, short_name(name), ha="center", va="center", fontsize=6.5, family="monospace")
        ax.text(x, y - 0.14, f"{graph.type[name]} · {graph.sqnr[name]:.1f} dB · {precision}", ha="center",
                va="center", fontsize=6.5)
    xs = [x for x, _ in where.values()]
    ax.set_xlim(min(xs) - 1.6, max(xs) + 1.6)
    ax.set_ylim(-max(rows) - 0.5, 0.5)
    ax.axis("off")
    bar = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.03, pad=0.01)
    bar.set_label("SQNR dB (INT8 vs FP32)", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    return fig


def short_name(name: str, parts: int = 5) -> str:
    """The last `parts` components of an op's path: enough to tell neighbours apart in a box."""
    pieces = name.strip("/").split("/")
    return name if len(pieces) <= parts else "…/" + "/".join(pieces[-parts:])


def histogram_figure(layer: str, quantizer: str, record: dict):
    """FP32's values at the input `quantizer` feeds to `layer` and the INT8 levels read there, on one axis, as a
    share of all values (log scale: a clipped tail is small next to the peak); the range's bounds dashed, the
    levels as ticks when few enough to see."""
    import matplotlib.pyplot as plt

    fp32, int8 = np.asarray(record["fp32"], dtype=float), np.asarray(record["int8"], dtype=float)
    far = record["fp32_far_below"] + record["fp32_far_above"]
    total, floor = max(fp32.sum() + far, 1.0), 0.5 / max(fp32.sum() + far, 1.0)
    x = record["low"] + (np.arange(fp32.size) + record["first_bin"]) * record["bin_width"]
    merged = -(-fp32.size // DRAWN_BINS)  # bins drawn as one, so that the figure stays a few KB of SVG
    pad = (-fp32.size) % merged
    # per step of the quantizer, both: INT8 puts a step's worth of values on one level, FP32 spreads them over it
    shares = np.pad(fp32, (0, pad)).reshape(-1, merged).sum(axis=1) / total / merged * SUBSTEPS
    centres = np.pad(x, (0, pad), mode="edge").reshape(-1, merged).mean(axis=1)
    fig, ax = plt.subplots(figsize=(7.5, 2.6))
    ax.fill_between(centres, np.maximum(shares, floor), floor, step="mid", color="#729fcf", alpha=0.7,
                    label="FP32 values")
    level = (np.arange(fp32.size) + record["first_bin"]) % SUBSTEPS == 0  # INT8 only ever lands on a level
    ax.step(x[level], np.maximum(int8[level] / total, floor), where="mid", color="#ce5c00", lw=1.0, zorder=3,
            label="INT8 levels read")
    for bound, index in ((record["low"], 0), (record["high"], record["upper_bin"])):
        ax.axvline(bound, color="#cc0000", ls="--", lw=0.8, alpha=0.6, zorder=1)
        piled = int8[index - record["first_bin"]] if 0 <= index - record["first_bin"] < int8.size else 0
        if piled:  # what INT8 reads on a bound, as a dot: clipping's mass, not hidden by the bound's line
            ax.plot([bound], [piled / total], "o", color="#ce5c00", markersize=4, zorder=4)
    span = [min(x[0], record["low"]), max(x[-1], record["high"])]
    margin = 0.03 * (span[1] - span[0] or 1.0)
    ax.set_xlim(span[0] - margin, span[1] + margin)
    if (span[1] - span[0]) / record["step"] < STEP_TICKS:
        ax.set_xticks(record["low"] + record["step"] * np.arange(
            np.floor((span[0] - record["low"]) / record["step"]), np.ceil((span[1] - record["low"]) / record["step"])
            + 1), minor=True)
        ax.tick_params(axis="x", which="minor", length=4, color="#cc0000")
    ax.set_yscale("log")
    ax.set_ylim(floor, 1.5)
    ax.set_ylabel("share of values per step", fontsize=8)
    ax.tick_params(labelsize=7)
    shares = share_at_bounds(record)
    note = (f"range [{record['low']:.4g}, {record['high']:.4g}], step {record['step']:.3g} ({record['levels']} "
            f"levels)\nINT8 on the bounds: {shares['int8_at_low']:.2%} low, {shares['int8_at_high']:.2%} high\n"
            f"FP32 beyond them: {shares['fp32_below']:.2%} below, {shares['fp32_above']:.2%} above")
    if far:
        note += f"\n({far} FP32 values lie past the plotted span)"
    ax.text(0.01, 0.97, note, transform=ax.transAxes, fontsize=6.5, va="top",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "#ccc"})
    ax.legend(fontsize=7, loc="upper right")
    return fig
