"""Debian's chromium, headless, driven over the DevTools protocol: load a page, collect what its console said and
what it fetched, measure its charts, and take a screenshot."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

# Where screenshots are kept: CI keeps nothing, but the files are written and their paths printed.
ARTIFACTS = Path(os.environ.get("BENCHD_TEST_ARTIFACTS", Path(tempfile.gettempdir()) / "benchd-test-artifacts"))

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--disable-extensions", "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0"]

# Every figure.chart: its name, whether it is a "nothing to draw" panel, its caption and note, its drawn width, and
# how many of its data marks (.mark: a path with a d, a circle) have a non-empty box.
CHARTS_JS = """JSON.stringify([...document.querySelectorAll('figure.chart')].map(f => {
  const svg = f.querySelector('svg');
  const marks = svg ? [...svg.querySelectorAll('.mark')].filter(m => {
    const box = m.getBBox();
    return (box.width > 0 || box.height > 0) && (m.tagName !== 'path' || (m.getAttribute('d') || '').length > 2);
  }).length : 0;
  return {name: f.dataset.chart, empty: f.classList.contains('empty'), marks,
          width: svg ? svg.getBoundingClientRect().width : 0,
          caption: f.querySelector('figcaption').textContent,
          note: (f.querySelector('.note') || {}).textContent || null};
}))"""


# How the page is laid out at its width: how wide the document is against the window; each table against the box
# it sits in (a table wider than its box scrolls inside it); each section's id in order; and each chart's tick text
# as drawn, in CSS pixels (an SVG scaled up draws its 11-unit text larger than the page's).
LAYOUT_JS = """JSON.stringify({
  page: document.documentElement.scrollWidth, window: window.innerWidth,
  tables: [...document.querySelectorAll('table')].map(t => ({
    width: t.getBoundingClientRect().width, box: t.parentElement.clientWidth,
    head: [...t.querySelectorAll('th')].map(h => h.textContent).join(' | ')})),
  sections: [...document.querySelectorAll('main > section')].map(s => s.id || s.querySelector('h2').textContent),
  ticks: [...document.querySelectorAll('figure.chart svg')].map(svg => ({
    name: svg.closest('figure').dataset.chart,
    px: parseFloat(getComputedStyle(svg.querySelector('.tick') || svg).fontSize) *
        svg.getBoundingClientRect().width / svg.viewBox.baseVal.width})),
  text_px: parseFloat(getComputedStyle(document.body).fontSize)})"""


@dataclass
class Loaded:
    url: str
    charts: dict[str, dict]  # by name
    console: list[str] = field(default_factory=list)  # console calls, exceptions and log entries
    fetched: list[str] = field(default_factory=list)  # every URL the page requested, itself included
    screenshot: Path | None = None
    text: str = ""  # the page's innerText
    layout: dict = field(default_factory=dict)  # LAYOUT_JS's
    probe: object = None  # what a test's own expression returned (JSON)


class Chromium:
    """One headless browser for a test; load() opens each page in a fresh tab."""

    def __init__(self) -> None:
        binary = shutil.which("chromium")
        if binary is None:
            raise RuntimeError("chromium is not installed: `make test` installs it (apt-get install chromium)")
        self.profile = tempfile.mkdtemp(prefix="benchd-chromium-")
        self.log = open(Path(self.profile) / "chromium.log", "w")  # noqa: SIM115 (the browser's, while it runs)
        self.process = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        active = Path(self.profile) / "DevToolsActivePort"  # chromium writes the port it chose here
        deadline = time.monotonic() + 60
        while not (active.exists() and active.read_text().count("\n") >= 1):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"chromium did not start: {(Path(self.profile) / 'chromium.log').read_text()}")
            time.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{active.read_text().splitlines()[0]}"

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(20)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def load(self, url: str, screenshot: str | None = None, width: int = 1280, until: str | None = None,
             probe: str | None = None) -> Loaded:
        """Open url, wait for its load event (and until the expression `until` is true, for a page its scripts
        draw), and read it; screenshot: a file name under ARTIFACTS; probe: an expression whose JSON the test
        reads (Loaded.probe)."""
        return asyncio.run(asyncio.wait_for(self._load(url, screenshot, width, until, probe), 120))

    async def _load(self, url: str, screenshot: str | None, width: int, until: str | None,
                    probe: str | None) -> Loaded:
        async with aiohttp.ClientSession() as http:
            async with http.put(f"{self.endpoint}/json/new?about:blank") as response:
                target = await response.json()
            try:
                async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    return await _Session(ws).read(url, screenshot, width, until, probe)
            finally:
                async with http.get(f"{self.endpoint}/json/close/{target['id']}"):
                    pass


class _Session:
    def __init__(self, ws) -> None:
        self.ws, self.next_id = ws, 0
        self.pending: dict[int, asyncio.Future] = {}
        self.events: list[dict] = []
        self.loaded = asyncio.Event()

    async def _receive(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self.pending.pop(data["id"])
                if "error" in data:
                    future.set_exception(RuntimeError(f"DevTools: {data['error']}"))
                else:
                    future.set_result(data.get("result", {}))
            else:
                self.events.append(data)
                if data["method"] == "Page.loadEventFired":
                    self.loaded.set()

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        return await future

    async def evaluate(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating {expression[:60]}: {result['exceptionDetails']}")
        return result["result"]["value"]

    async def read(self, url: str, screenshot: str | None, width: int, until: str | None = None,
                   probe: str | None = None) -> Loaded:
        receiver = asyncio.create_task(self._receive())
        try:
            for domain in ("Runtime", "Log", "Page", "Network"):
                await self.call(f"{domain}.enable")
            await self.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1,
                            mobile=False)
            await self.call("Page.navigate", url=url)
            await self.loaded.wait()
            while until is not None and not await self.evaluate(until):
                await asyncio.sleep(0.1)
            await self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            loaded = Loaded(url, {c["name"]: c for c in json.loads(await self.evaluate(CHARTS_JS))},
                            text=await self.evaluate("document.body.innerText"),
                            layout=json.loads(await self.evaluate(LAYOUT_JS)),
                            probe=json.loads(await self.evaluate(f"JSON.stringify({probe})")) if probe else None)
            if screenshot is not None:
                size = (await self.call("Page.getLayoutMetrics"))["cssContentSize"]
                shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                                       clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                                             "scale": 1})
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                loaded.screenshot = ARTIFACTS / screenshot
                loaded.screenshot.write_bytes(base64.b64decode(shot["data"]))
        finally:
            receiver.cancel()
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                loaded.console.append(f"console.{params['type']}: "
                                      + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                loaded.console.append(f"exception: {params['exceptionDetails']}")
            elif method == "Log.entryAdded":
                loaded.console.append(f"log.{params['entry']['level']}: {params['entry']['text']}")
            elif method == "Network.requestWillBeSent":
                loaded.fetched.append(params["request"]["url"])
        return loaded
