"""Model Explorer's server as `make view` runs it: it reads only the viewed graph and its overlay files, and its page
fetches nothing from the network."""

from __future__ import annotations

import json
import os
import re
import sys

import flask
from model_explorer import cmdline

# Model Explorer's page declares its UI font's rarer Unicode ranges on Google's font server (its common ones come
# from the package), and opens a connection to it ahead: without these rules and that link, the browser draws such
# a glyph in a local font, and contacts no other host
REMOTE_FONTS = re.compile(rb"@font-face\{[^}]*url\(https://fonts\.gstatic\.com/[^}]*\}"
                          rb"|<link rel=\"preconnect\" href=\"https://fonts\.gstatic\.com\"[^>]*>")
PAGE = ("/", "/index.html")
READ_FILE = "/api/v1/read_text_file"  # returns any file the server can read, by its path
COMMANDS = ("/api/v1/send_command", "/apipost/v1/send_command")  # an adapter converting the file at `modelPath`
# an upload (a file of the browser's, then converted), a config change, and a version check on PyPI: nothing a
# viewer of this graph needs
REFUSED = ("/apipost/v1/upload", "/apipost/v1/update_config", "/api/v1/check_new_version")


def _real(path: object) -> str:
    """The path a request names, resolved ('' when it names none)."""
    try:
        return os.path.realpath(path) if isinstance(path, str) and path else ""
    except ValueError:  # a NUL in it
        return ""


def _command(request) -> dict:
    """An adapter command: a POST's JSON body, or a GET's `json` argument ({} when neither is a JSON object)."""
    if request.method == "POST":
        command = request.get_json(silent=True)
    else:
        try:
            command = json.loads(request.args.get("json") or "{}")
        except ValueError:
            command = None
    return command if isinstance(command, dict) else {}


def guard(model: str, files: list[str]):
    """Flask signal receivers: refuse a request for any file but `model` and `files`, or to delete one; strip the
    remote font rules off the page."""
    model, readable = _real(model), {_real(f) for f in files}

    def check(_sender, **_):
        request = flask.request
        if request.path in REFUSED:
            flask.abort(403)
        if request.path == READ_FILE and _real(request.args.get("path")) not in readable:
            flask.abort(403)
        if request.path in COMMANDS:
            command = _command(request)
            # deleteAfterConversion: the server would delete the model's folder as it stops (meant for uploads)
            if _real(command.get("modelPath")) != model or command.get("deleteAfterConversion"):
                flask.abort(403)

    def strip_remote_fonts(_sender, response, **_):
        if flask.request.path in PAGE and response.status_code == 200:
            response.direct_passthrough = False  # a file response: read it, then replace it
            response.set_data(REMOTE_FONTS.sub(b"", response.get_data()))

    return check, strip_remote_fonts


def main(argv: list[str]) -> None:
    """`python -m qgate.explorer_server HOST PORT MODEL [FILE ...]`: serve `MODEL` and its overlay `FILE`s until
    stopped."""
    host, port, model, *files = argv
    check, strip_remote_fonts = guard(model, files)
    # weak=False: the receivers are closures, and blinker holds weak references by default
    flask.request_started.connect(check, weak=False)
    flask.request_finished.connect(strip_remote_fonts, weak=False)
    cmdline.main(cmdline.parser.parse_args(["--extensions=model_explorer_onnx", f"--host={host}", f"--port={port}",
                                            "--no_open_in_browser"]))


if __name__ == "__main__":
    main(sys.argv[1:])
