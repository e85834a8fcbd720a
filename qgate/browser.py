"""A page opened in headless Chromium over the DevTools pipe: what it requested, which images failed, a screenshot."""

from __future__ import annotations

import base64
import json
import fcntl
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from qgate.errors import QgateError

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WIDTH, HEIGHT = 1200, 1500  # the first screen a reviewer sees, in CSS pixels
TIMEOUT = 60  # seconds for the whole page session

# each <img> must have decoded (naturalWidth > 0); inline SVG plots count as figures that rendered
IMAGES_SCRIPT = """JSON.stringify({
  images: document.images.length,
  broken: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)
    .map(i => i.alt || i.src.slice(0, 60)),
  svgs: document.querySelectorAll('figure svg').length,
  text: document.body.innerText})"""


@dataclass(frozen=True)
class PageCheck:
    """What a page did in the browser: every URL it requested, the images that did not load, its screenshot."""

    requests: list[str]
    images: int
    broken_images: list[str]
    svgs: int
    screenshot: bytes
    text: str  # what the page shows as text

    def external_requests(self, folder: Path) -> list[str]:
        """Requests that leave the page's folder: the network, or files elsewhere on disk."""
        inside = folder.resolve().as_uri() + "/"
        return [url for url in self.requests if not url.startswith(("data:", inside))]


def find_chromium() -> str | None:
    """The path of a Chromium-like browser on PATH, or None."""
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def open_page(page: Path | str, browser: str | None = None, ready: str = "") -> PageCheck:
    """Load `page` (a local HTML file, or a URL) in headless Chromium, wait until the JavaScript expression `ready`
    holds (when given: an app that draws after loading), record its requests and images, take a screenshot."""
    browser = browser or find_chromium()
    if not browser:
        raise QgateError(f"no Chromium on PATH (tried {', '.join(BROWSERS)}); install it: apt-get install chromium")
    # the browser's helper processes may still be writing the profile as the group is killed
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        commands_r, commands_w = _pipe()
        replies_r, replies_w = _pipe()
        # DevTools reads commands on fd 3 and answers on fd 4 (--remote-debugging-pipe): no port, no websocket
        pid = os.posix_spawn(browser, [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--use-angle=swiftshader", "--enable-unsafe-swiftshader",  # WebGL on the CPU: a graph viewer draws
            "--disable-background-networking", "--disable-component-update", "--disable-extensions",
            "--disable-breakpad", f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"], os.environ,
            file_actions=[(os.POSIX_SPAWN_DUP2, commands_r, 3), (os.POSIX_SPAWN_DUP2, replies_w, 4),
                          (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                          (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)], setpgroup=0)
        os.close(commands_r)
        os.close(replies_w)
        try:
            with os.fdopen(commands_w, "wb") as sink, os.fdopen(replies_r, "rb") as source:
                return _Session(sink, source).check(page.resolve().as_uri() if isinstance(page, Path) else page,
                                                    ready)
        finally:
            os.killpg(pid, signal.SIGKILL)  # the browser and its renderer, GPU and zygote processes
            os.waitpid(pid, 0)


def _pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose ends sit above fd 4, so duplicating them onto 3 and 4 never collides."""
    ends = []
    for raw in os.pipe():
        ends.append(fcntl.fcntl(raw, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(raw)
    return ends[0], ends[1]


class _Session:
    """One page target driven with DevTools commands; events are collected while waiting for replies."""

    def __init__(self, sink, source):
        self.sink, self.source, self.next_id, self.session = sink, source, 0, None
        self.events: list[dict] = []
        self.buffer = b""

    def check(self, url: str, ready: str) -> PageCheck:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Network.enable")
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1,
                  mobile=False)
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        deadline = time.monotonic() + TIMEOUT
        while ready and not self.call("Runtime.evaluate", expression=ready)["result"].get("value"):
            if time.monotonic() > deadline:
                raise QgateError(f"{url[:80]}: `{ready}` still false after {TIMEOUT} s")
            time.sleep(0.25)
        found = json.loads(self.call("Runtime.evaluate", expression=IMAGES_SCRIPT)["result"]["value"])
        shot = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        requests = [event["params"]["request"]["url"] for event in self.events
                    if event.get("method") == "Network.requestWillBeSent"]
        return PageCheck(requests, found["images"], found["broken"], found["svgs"], shot, found["text"])

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        self.sink.write(json.dumps(message).encode() + b"\0")
        self.sink.flush()
        reply = self.wait_for(None, self.next_id)
        if "error" in reply:
            raise QgateError(f"Chromium refused {method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def wait_for(self, event: str | None, reply_id: int | None = None) -> dict:
        while True:
            message = self._read()
            if reply_id is not None and message.get("id") == reply_id:
                return message
            self.events.append(message)
            if event and message.get("method") == event:
                return message

    def _read(self) -> dict:
        while b"\0" not in self.buffer:
            chunk = os.read(self.source.fileno(), 1 << 16)
            if not chunk:
                raise QgateError("Chromium closed the DevTools pipe (crashed or refused the flags)")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)
