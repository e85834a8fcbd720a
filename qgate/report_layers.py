"""The report's pictures of the layers it names: each one's neighbourhood by SQNR and its quantizer's histogram."""

from __future__ import annotations

from qgate.layer_figures import LayerGraph, histogram_figure, neighbourhood_figure
from qgate.page import anchor, figure


def histogram_caption(layer: str) -> str:
    """The caption (and so the page anchor) of `layer`'s histogram."""
    return f"Inputs of {layer}: FP32 values and the INT8 levels read there"


def neighbourhood_caption(layer: str, group: str = "") -> str:
    """The caption of the picture centred on `layer` (for a sensitivity group: its first op, the group named)."""
    what = f"quantizer group {group}, from {layer}" if group else layer
    return (f"Around {what}: each op coloured by SQNR, solid int8, dashed float"
            + (", the group's ops in purple" if group else ""))


class LayerPictures:
    """Figures and in-page links for layers of the divergence table (`reports/divergence.csv` rows), their
    histograms from `reports/divergence_histograms.json` (empty when that file is missing: no histogram drawn), of
    the `drawn` layers only when given."""

    def __init__(self, rows: list[dict], histograms: dict, drawn: set[str] | None = None):
        self.graph, self.histograms, self.drawn = LayerGraph(rows), histograms, drawn
        self.quantizer = {r["name"]: r.get("input_quantizer", "") for r in rows}
        self.linked: dict[str, None] = {}  # the layers `link` pointed at, in order: their histograms must be drawn

    def has_histogram(self, layer: str) -> bool:
        """Whether a quantizer reads into `layer` and its histogram was recorded."""
        return self.quantizer.get(layer, "") in self.histograms and (self.drawn is None or layer in self.drawn)

    def link(self, layer: str) -> str:
        """`layer` as code, linked to its histogram when there is one (`linked` remembers it)."""
        if not self.has_histogram(layer):
            return f"`{layer}`"
        self.linked[layer] = None
        return f"[`{layer}`](#{anchor(histogram_caption(layer))})"

    def histogram(self, layer: str) -> list[tuple[str, str, bytes]]:
        """`layer`'s histogram figure, or none when its inputs are not quantized (a float op, the network input)."""
        if not self.has_histogram(layer):
            return []
        quantizer = self.quantizer[layer]
        return [figure(histogram_figure(layer, quantizer, self.histograms[quantizer]), histogram_caption(layer))]

    def neighbourhood(self, layer: str, group: str = "", ops: frozenset[str] = frozenset()) -> list:
        """The picture around `layer` (the group's `ops` marked), or none when the table has no such layer."""
        if layer not in self.graph.order:
            return []
        return [figure(neighbourhood_figure(self.graph, layer, ops), neighbourhood_caption(layer, group))]
