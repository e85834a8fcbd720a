"""`make view`: the model's graph in Model Explorer with the divergence painted on it, served on 127.0.0.1 only."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

from qgate.artifacts import int8_model
from qgate.errors import QgateError
from qgate.gates import Metrics, MetricsUnavailable
from qgate.io import write_text
from qgate.node_overlays import OVERLAYS, ViewedGraph, layer_nodes, overlays, viewed_nodes
from qgate.params import Params, load_params
from qgate.yolo import ONNX_NAME

log = logging.getLogger(__name__)

OVERLAY_DIR = Path("reports/view")  # the node data files, one per overlay; rewritten by every `make view`
HOST = "127.0.0.1"  # never wider: what the graph and its overlays show is for whoever runs `make view`
DEFAULT_PORT = 8080


def viewed_model(params: Params) -> Path:
    """The ONNX graph shown: the INT8 model itself when the runtime's format is ONNX (its Q/DQ pairs visible), else
    the FP32 ONNX the runtime's models were converted from (Model Explorer reads ONNX, not OpenVINO IR)."""
    int8 = int8_model(params)
    return int8 if int8.suffix == ".onnx" else Path(params.export.out_dir) / ONNX_NAME


def write_overlays(params: Params) -> tuple[ViewedGraph, list[Path], str]:
    """Write one node data file per overlay under OVERLAY_DIR; (graph, files, the node to open at)."""
    metrics, div = Metrics(params), params.divergence
    try:
        rows = metrics.read(div.csv)
        first = metrics.value(div.metrics, "first_divergent_layer")  # also: the table is this model's, not stale
        precision = metrics.read(params.quantize.precision_table)
    except MetricsUnavailable as exc:
        raise QgateError(str(exc)) from exc
    graph = ViewedGraph(viewed_model(params))
    try:
        ranking = metrics.read(params.sensitivity.csv)
        metrics.value(params.sensitivity.metrics, "model_sha256")
    except MetricsUnavailable as exc:
        log.warning("no sensitivity rank overlay: %s", exc)
        ranking = []
    nodes, node_of = viewed_nodes(graph, rows, precision), layer_nodes(graph, rows)
    unmatched = [r["name"] for r in rows if r["name"] not in node_of]
    if unmatched:
        log.warning("%d layers of %s match no node of %s (first: %s): not painted", len(unmatched), div.csv,
                    graph.path, unmatched[0])
    painted = overlays(nodes, first, ranking, div.sqnr_floor_db, div.divergent_sqnr_db, div.local_drop_db)
    shutil.rmtree(OVERLAY_DIR, ignore_errors=True)
    for title, data in painted.items():
        write_text(overlay_file(title), json.dumps(data))
    lead = node_of.get(first)
    return graph, [overlay_file(t) for t in painted], lead or min(nodes, key=lambda n: nodes[n].sqnr_db, default="")


def overlay_file(title: str) -> Path:
    """Where the overlay `title` is written, relative to the checkout."""
    return OVERLAY_DIR / f"{title.replace(' ', '_')}.json"


def url(port: int, graph: ViewedGraph, files: list[Path], node: str) -> str:
    """The address that opens `graph` with every overlay, `node` selected and its layer groups expanded. Paths stay
    relative: the server resolves them in the checkout it runs in, so the report can carry the address too."""
    groups = node.strip("/").split("/")[:-1]
    data = {"models": [{"url": str(graph.path)}],
            "nodeData": [str(f) for f in files], "nodeDataTargets": [""] * len(files),
            "uiState": {"paneStates": [{
                "selectedNodeId": node, "selectedGraphId": graph.graph_id, "selectedCollectionLabel": "",
                "deepestExpandedGroupNodeIds": ["/".join(groups[:k]) for k in range(1, len(groups) + 1)][-1:],
                "widthFraction": 1}]}}
    return f"http://{HOST}:{port}/?data={urllib.parse.quote(json.dumps(data))}"


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def serve(port: int, address: str, served: list[Path]) -> int:
    """Run Model Explorer on HOST:`port`, reading only the `served` files (the graph first), until Ctrl-C or SIGTERM;
    its exit code."""
    if not _port_free(port):
        raise QgateError(f"port {port} on {HOST} is taken (another `make view`?): stop it, or run "
                         f"`make view VIEW_PORT={port + 1}`")
    command = [sys.executable, "-m", "qgate.explorer_server", HOST, str(port), *map(str, served)]
    server = subprocess.Popen(command, start_new_session=True)
    print(f"Model Explorer on {address}\n(open it in a browser; Ctrl-C here stops it)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


def graph_link(params: Params, rows: list[dict], layer: str) -> str:
    """A Markdown link opening `layer` in the graph `make view` serves on its default port ('' when the graph or
    the layer's node is not there)."""
    try:
        graph = ViewedGraph(viewed_model(params))
    except QgateError:
        return ""
    node = layer_nodes(graph, rows).get(layer)
    files = [overlay_file(title) for title in OVERLAYS]
    return f"[open `{layer}` in the graph]({url(DEFAULT_PORT, graph, files, node)})" if node else ""


def main(params_path: str, files_only: bool = False) -> int:
    """Paint the overlays; serve them on $VIEW_PORT (default 8080), or with `files_only` say how to open them."""
    port = os.environ.get("VIEW_PORT") or str(DEFAULT_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise QgateError(f"VIEW_PORT={port!r} is not a port number: give one from 1024 to 65535, e.g. 8080")
    graph, files, node = write_overlays(load_params(params_path))
    address = url(int(port), graph, files, node)
    if not files_only:
        return serve(int(port), address, [graph.path, *files])
    print(f"Overlays for {graph.path} in {OVERLAY_DIR}/. To see them, run `make view` where a browser is: it serves "
          f"them on {HOST}:{port} and prints the address.")
    return 0


if __name__ == "__main__":
    from qgate.cli import run_tool

    sys.exit(run_tool(main, __doc__, {"files-only": "write the overlay files and say how to open them (CI: no "
                                                    "browser there)"}))
