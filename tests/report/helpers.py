"""What the report tests share: the charts a page draws, the sweep the live daemon runs, and checks of a page:
well formed, drawn, clean in the browser."""

from html.parser import HTMLParser

from tests.helpers import CPU_CACHE

DISTRIBUTIONS = ["ttft", "itl", "tpot", "e2e"]
GENERATION = [*DISTRIBUTIONS, "requests", "throughput", "in-flight", "kv-cache", "gpu-utilization", "gpu-power",
              "gpu-memory"]
TIMELINE_PANELS = ["in-flight", "kv-cache", "gpu-utilization", "gpu-power", "gpu-memory"]

# Two load levels of a few seconds each: dozens of engine-load samples (every 100 ms) and hardware samples
# (every 0.2 s), warm-up requests in each level.
SWEEP = {
    "name": "report",
    "label": "v1.2",
    "transformers": CPU_CACHE,
    "workload": {
        "arrivals": {"profile": "sweep", "over": "concurrent", "values": [1, 4]},
        "stop": {"duration_s": 2.5},
        "warmup": {"requests": 2},
        "prompt_tokens": {"dist": "uniform", "min": 8, "max": 32},
        "output_tokens": {"dist": "uniform", "min": 8, "max": 48},
    },
}


def lines_js(selector: str) -> str:
    """An expression: each element's text as the browser broke it into lines (a character whose box starts lower
    than the one before it starts a line)."""
    return """[...document.querySelectorAll('SELECTOR')].map(el => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), lines = [];
  let top = null, text = '';
  for (let node; (node = walker.nextNode());) for (let i = 0; i < node.length; i++) {
    const range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);
    const box = range.getClientRects()[0];
    if (!box) continue;
    if (top !== null && box.top > top + 2) { lines.push(text); text = ''; }
    top = box.top; text += node.data[i];
  }
  lines.push(text);
  return lines;
})""".replace("SELECTOR", selector)


VOID = {"meta", "link", "br", "hr", "img", "input", "wbr", "col", "area", "base", "source", "track", "embed"}


class _Nesting(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-3:]}"
        self.open.pop()


def well_formed(page: str) -> None:
    """Every element closed in order, and nothing that a browser would fetch."""
    assert page.startswith("<!doctype html>")
    parser = _Nesting()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    for reference in ("src=", "url(", "@import", 'href="http', "<script"):
        assert reference not in page


def drawn(loaded, names) -> None:
    """Each named chart is there, drew marks, and has a real width on the page."""
    for name in names:
        chart = loaded.charts[name]
        assert not chart["empty"] and chart["marks"] > 0 and chart["width"] > 300, chart


def clean(loaded) -> None:
    """No console message, no exception, and nothing fetched but the page itself."""
    print(f"screenshot: {loaded.screenshot}")
    assert loaded.console == []
    assert [url for url in loaded.fetched if not url.startswith("data:")] == [loaded.url]
    assert loaded.screenshot.read_bytes().startswith(b"\x89PNG") and loaded.screenshot.stat().st_size > 20_000
