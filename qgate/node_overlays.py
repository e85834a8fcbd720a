"""The divergence painted on the ONNX graph: Model Explorer's node data, one overlay per measure, keyed by node name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from qgate.errors import QgateError

FLOAT_KEPT, FLOAT, INT8 = "#c9a0dc", "#d3d7cf", "#9fc5e8"  # kept float by a rule, float by nature, int8
DIVERGENT, FIRST_DIVERGENT = "#f57900", "#cc0000"
OVERLAYS = ("SQNR dB", "local drop dB", "precision", "sensitivity rank", "divergent")  # what `overlays` returns


@dataclass
class ViewedNode:
    """What the divergence table says of one node of the viewed graph: the rows of the ops it became."""

    sqnr_db: float = 0.0
    local_drop_db: float = float("-inf")
    int8: bool = False
    why_float: str = ""
    divergent: bool = False
    layers: list[str] = field(default_factory=list)


class ViewedGraph:
    """The ONNX graph a viewer loads: its node names, and which node each runtime op name (a divergence row) is."""

    def __init__(self, onnx_path: Path):
        import onnx

        try:
            model = onnx.load(str(onnx_path), load_external_data=False)
        except Exception as exc:  # a missing file, or protobuf's DecodeError: one line either way
            raise QgateError(f"{onnx_path}: not a readable ONNX model ({type(exc).__name__}); re-run "
                             "`dvc repro export`") from exc
        self.path, self.graph_id = onnx_path, model.graph.name
        self.names = [node.name for node in model.graph.node]
        self.producer = {tensor: node.name for node in model.graph.node for tensor in node.output}

    def node_of(self, layer: str) -> str | None:
        """The node `layer` came from: the node of that name; the node writing the tensor it is named after (a
        runtime names a model output after it); else the node whose name is the longest '/'-prefix of it
        (OpenVINO splits a Conv's bias off as `<Conv>/WithoutBiases`); None when nothing matches."""
        names = set(self.names)
        if layer in names:
            return layer
        if layer in self.producer:
            return self.producer[layer]
        parts = layer.split("/")
        return next(("/".join(parts[:k]) for k in range(len(parts) - 1, 1, -1) if "/".join(parts[:k]) in names),
                    None)


def layer_nodes(graph: ViewedGraph, rows: list[dict]) -> dict[str, str]:
    """The viewed node of each layer (divergence row) that has one. A layer named by the runtime alone (OpenVINO's
    `ConvolutionBackpropData_2313`, its bias Add keeping the ConvTranspose's name) is part of the node all of its
    consumers are part of."""
    found = {r["name"]: graph.node_of(r["name"]) for r in rows}
    consumers: dict[str, set[str]] = {}
    for row in rows:
        for source in row.get("inputs", "").split():
            consumers.setdefault(source, set()).add(row["name"])
    for row in reversed(rows):  # consumers come later in graph order: resolved before their inputs
        readers = {found.get(c) for c in consumers.get(row["name"], ())}
        if found[row["name"]] is None and len(readers) == 1:
            found[row["name"]] = readers.pop()
    return {layer: node for layer, node in found.items() if node is not None}


def viewed_nodes(graph: ViewedGraph, rows: list[dict], precision: list[dict]) -> dict[str, ViewedNode]:
    """Each node's values from the divergence rows of the ops it became (graph order): the SQNR of the last (its
    output), the largest local drop, int8 when any of them is, and why a float one is float (`precision_table`)."""
    why = {r["name"]: r["why"] for r in precision if r["precision"] == "float"}
    nodes: dict[str, ViewedNode] = {}
    node_of = layer_nodes(graph, rows)
    for row in rows:
        name = node_of.get(row["name"])
        if name is None:
            continue
        node = nodes.setdefault(name, ViewedNode())
        node.sqnr_db = float(row["sqnr_db"])
        node.local_drop_db = max(node.local_drop_db, float(row["local_drop_db"]))
        node.int8 = node.int8 or row["introduces_error"] == "1"
        node.why_float = node.why_float or why.get(row["name"], "")
        node.divergent = node.divergent or row["divergent"] == "1"
        node.layers.append(row["name"])
    return nodes


def overlays(nodes: dict[str, ViewedNode], first_divergent: str, ranking: list[dict], floor_db: float,
             divergent_db: float, local_drop_db: float) -> dict[str, dict]:
    """Model Explorer node data by overlay title: SQNR, local drop, precision, sensitivity rank, divergence."""
    rank = {}
    for row in ranking:  # a group's ops (its float scope) carry its rank; the first rank wins where groups share
        for op in row["ignored_names"].split(";"):
            rank.setdefault(op, int(row["rank"]))
    node_rank = {name: min((rank[layer] for layer in node.layers if layer in rank), default=None)
                 for name, node in nodes.items()}
    first = next((name for name, node in nodes.items() if first_divergent in node.layers), None)
    return {
        "SQNR dB": {"results": {n: {"value": round(v.sqnr_db, 2)} for n, v in nodes.items()},
                    "thresholds": [{"value": floor_db, "bgColor": FIRST_DIVERGENT},
                                   {"value": divergent_db, "bgColor": DIVERGENT},
                                   {"value": 30, "bgColor": "#fce94f"}, {"value": 1e9, "bgColor": "#8ae234"}]},
        "local drop dB": {"results": {n: {"value": round(v.local_drop_db, 2)} for n, v in nodes.items()},
                          "thresholds": [{"value": local_drop_db / 2, "bgColor": "#d3d7cf"},
                                         {"value": local_drop_db, "bgColor": "#fcaf3e"},
                                         {"value": 1e9, "bgColor": FIRST_DIVERGENT}]},
        "precision": {"results": {n: _precision(v) for n, v in nodes.items()}},
        "sensitivity rank": {"results": {n: {"value": r} for n, r in node_rank.items() if r is not None},
                             "thresholds": [{"value": 1, "bgColor": FIRST_DIVERGENT},
                                            {"value": 3, "bgColor": DIVERGENT},
                                            {"value": 1e9, "bgColor": "#fce94f"}]},
        "divergent": {"results": {n: ({"value": "first divergent", "bgColor": FIRST_DIVERGENT} if n == first else
                                      {"value": "divergent", "bgColor": DIVERGENT})
                                  for n, v in nodes.items() if v.divergent}},
    }


def _precision(node: ViewedNode) -> dict:
    if node.int8:
        return {"value": "int8", "bgColor": INT8}
    if node.why_float:
        return {"value": f"float: {node.why_float}", "bgColor": FLOAT_KEPT}
    return {"value": "float", "bgColor": FLOAT}
