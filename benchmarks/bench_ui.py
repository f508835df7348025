"""``mnemex ui`` on a 100,000-memory store, measured in Chromium: first paint, search as
you type, and timeline pages.

The store holds ``--size`` realistic memories (SciFact sentences and LoCoMo turns) in
three namespaces, spread over about a year, of five kinds, with the local model's
vectors in ``--mode hybrid`` (embedded once, cached under benchmarks/.cache). A real
``mnemex ui`` process serves it; Playwright drives the system's Chromium (never a
downloaded one). Measured:

- first paint: ``/`` and a search's address ``/?q=...`` opened in a new browser
  context (nothing cached) and in one that opened the inspector before (its static
  files cached); ``first-contentful-paint`` from the navigation's start;
- search as you type: each query typed into the box a key every 80 ms; from the
  last keystroke to the results of the whole query on the page (htmx settled), and
  the server's own time for that request (its ``Server-Timing`` header);
- timeline pages: ``/timeline`` and then the next page after its last memory, 50
  pages deep, as the page's scrolling asks for them: the HTTP round trip and the
  server's time;
- the other views once warm (a memory's page, the prompt preview, the injection log,
  health).

    python benchmarks/bench_ui.py [--size 100000] [--mode lexical|hybrid] [--queries 30]
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from subprocess import PIPE
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import (
    child_env,
    data_dir,
    machine,
    memories,
    parser,
    percentiles,
    publish,
    queries,
    real_embeddings,
    store_vectors,
)

KINDS = ("observation", "decision", "fact", "answer", "prompt")
NAMESPACES = ("/home/dev/code/ledgerly", "/home/dev/code/billing", "research")
START = datetime(2025, 12, 1, tzinfo=UTC)
BATCH = 5_000
VIEWPORT = {"width": 1280, "height": 900}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TARGETS = {
    "first paint, /, new browser": "≤ 300 ms",
    "first paint, a search's address, new browser": "≤ 300 ms",
    "first paint, /, cached files": "≤ 300 ms",
    "first paint, a search's address, cached files": "≤ 300 ms",
    "search after the last key": "≤ 100 ms",
    "search server": "≤ 30 ms",
    "timeline page": "≤ 50 ms",
    "timeline page, one namespace": "≤ 50 ms",
}
# Listens to the page: the time of each keystroke, and of each settled htmx swap with the
# address it asked for and the server's time (from Server-Timing).
WATCH = """() => {
  window.__keys = []; window.__swaps = [];
  document.querySelector('#q').addEventListener('input', () => window.__keys.push(performance.now()));
  document.body.addEventListener('htmx:afterSettle', (e) => {
    const xhr = e.detail.xhr;
    const timing = (xhr && xhr.getResponseHeader('server-timing')) || '';
    const dur = /dur=([0-9.]+)/.exec(timing);
    window.__swaps.push({t: performance.now(), url: xhr ? xhr.responseURL : '',
                         server: dur ? parseFloat(dur[1]) : null});
  });
}"""


def build(path: Path, texts: list[str], hybrid: bool) -> None:
    """The store: ``texts`` over three namespaces and a year, five kinds, a tag each; with
    ``hybrid`` the local model's vectors, written as ``mnemex embed`` leaves them."""
    span = timedelta(days=365).total_seconds()
    with mnemex.open(path, embedder=None) as store:
        for start in range(0, len(texts), BATCH):
            chunk = texts[start : start + BATCH]
            for ns_index, namespace in enumerate(NAMESPACES):
                store.add_many(
                    [
                        {
                            "id": f"m{i}",
                            "content": text,
                            "kind": KINDS[i % len(KINDS)],
                            "tags": [f"topic-{i % 17}"],
                            "source": f"session-{i // 40}",
                            "created_at": START + timedelta(seconds=span * i / len(texts)),
                        }
                        for i, text in enumerate(chunk, start=start)
                        if i % len(NAMESPACES) == ns_index
                    ],
                    namespace=namespace,
                    embed=False,
                )
        if hybrid:  # memory m<i> holds texts[i]
            from mnemex.embed.local import LocalEmbedder

            vectors, model_id = real_embeddings(texts, "bench")[0], LocalEmbedder().model_id
            store_vectors(store, vectors, model_id, True, lambda ident: int(ident[1:]))


def start_server(db: Path, home: Path, embedder: str) -> tuple[subprocess.Popen[str], str]:
    env = child_env(MNEMEX_HOME=str(home), MNEMEX_EMBEDDER=embedder)
    command = [sys.executable, "-m", "mnemex", "--db", str(db), "ui", "--port", "0"]
    server = subprocess.Popen(command, stdout=PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    if not url.startswith("http://"):
        server.kill()
        sys.exit(f"mnemex ui did not start: {url!r}")
    return server, url.split("/?")[0].rstrip("/")


def get(origin: str, path: str) -> tuple[float, float | None, bytes]:
    """One GET: milliseconds for the whole answer, the server's own time, the body."""
    where = urlsplit(origin)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        timing = response.getheader("server-timing") or ""
    finally:
        connection.close()
    if response.status != 200:
        sys.exit(f"GET {path}: {response.status} {body[:300]!r}")
    server = float(timing.split("dur=")[1]) if "dur=" in timing else None
    return elapsed, server, body


def first_paints(browser: Any, origin: str, paths: list[str], runs: int, warm: bool) -> list[float]:
    """``first-contentful-paint`` of each load: in a new browser context each time (cold:
    the stylesheet and htmx fetched too), or in one that has opened the inspector once
    (warm: they come from the browser's cache, as on every later visit)."""
    samples = []
    kept = browser.new_context(viewport=VIEWPORT) if warm else None
    if kept is not None:
        kept.new_page().goto(origin + "/")
    for i in range(runs):
        context = kept or browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.goto(origin + paths[i % len(paths)])
        page.wait_for_function(
            "() => performance.getEntriesByName('first-contentful-paint').length > 0"
        )
        samples.append(
            page.evaluate("performance.getEntriesByName('first-contentful-paint')[0].startTime")
        )
        page.close()
        if kept is None:
            context.close()
    if kept is not None:
        kept.close()
    return samples


def typed_searches(browser: Any, origin: str, texts: list[str]) -> tuple[list[float], list[float]]:
    """(ms from the last keystroke to the whole query's results on the page, the server's
    ms for that request) for each query typed."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(origin + "/")
    page.evaluate(WATCH)
    after_key, server = [], []
    for text in texts:
        page.evaluate("() => { window.__keys = []; window.__swaps = []; }")
        page.locator("#q").fill("")
        page.wait_for_timeout(300)
        page.evaluate("() => { window.__keys = []; window.__swaps = []; }")
        page.locator("#q").press_sequentially(text, delay=80)
        wanted = "q=" + quote(text, safe="")  # as htmx encodes a form's fields
        page.wait_for_function(
            "(wanted) => window.__swaps.some(s => s.url.includes(wanted + '&'))",
            arg=wanted,
            timeout=30_000,
        )
        keys, swaps = page.evaluate("() => [window.__keys, window.__swaps]")
        last = keys[-1]
        done = next(s for s in swaps if wanted + "&" in s["url"] and s["t"] >= last)
        after_key.append(done["t"] - last)
        server.append(done["server"])
    context.close()
    return after_key, server


def timeline_pages(
    origin: str, pages: int, namespace: str | None = None
) -> list[tuple[float, float]]:
    """(round trip, server ms) of the timeline's first page and the ``pages - 1`` after it."""
    scope = f"&ns={quote_plus(namespace)}" if namespace else ""
    path = "/timeline?" + scope.lstrip("&")
    out = []
    for _ in range(pages):
        elapsed, server, body = get(origin, path)
        out.append((elapsed, server or 0.0))
        found = re.search(rb'hx-get="(/timeline\?after=[^"]+)"', body)
        if found is None:
            break
        path = found.group(1).decode().replace("&amp;", "&")
    return out


def log_prompts(db: Path, count: int) -> None:
    """Injection log entries, as the prompt hook writes them, for the log's page."""
    with mnemex.open(db, embedder=None) as store:
        for i in range(count):
            store.log_injection(
                f"prompt {i}",
                "nothing",
                agent="claude-code",
                session_id=f"s{i // 10}",
                namespace=NAMESPACES[0],
            )


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--size", type=int, default=100_000)
    arguments.add_argument("--mode", choices=("lexical", "hybrid"), default="lexical")
    arguments.add_argument("--queries", type=int, default=30)
    arguments.add_argument("--paints", type=int, default=20)
    args = arguments.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("needs Chromium from the system's packages: apt-get install -y chromium")
    folder = data_dir(args.data)
    texts = memories(folder, args.size)
    plain = re.compile(r"[A-Za-z0-9 ]+\??")  # typed as is, encoded alike by the browser
    asked = [q for q in queries(folder) if 20 <= len(q) <= 60 and plain.fullmatch(q)]
    asked = asked[: args.queries]
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp_name:
        tmp = Path(tmp_name)
        db, home = tmp / "memories.db", tmp / "home"
        home.mkdir()
        started = time.perf_counter()
        build(db, texts, args.mode == "hybrid")
        log_prompts(db, 500)
        print(
            f"built {args.size:,} memories in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        server, origin = start_server(db, home, "local" if args.mode == "hybrid" else "none")
        try:
            results = measure(origin, chromium, asked, args)
        finally:
            server.terminate()
            server.wait(timeout=30)
    report(results, args)


def measure(origin: str, chromium: str, asked: list[str], args: Any) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    load = [os.getloadavg()[0]]
    get(origin, "/?q=" + quote_plus(asked[0]))  # loads the lexicon (and the model, vectors)
    get(origin, "/timeline")
    results: dict[str, Any] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        search_paths = ["/?q=" + quote_plus(q) for q in asked]
        for warm in (False, True):
            how = "cached files" if warm else "new browser"
            results[f"first paint, /, {how}"] = first_paints(
                browser, origin, ["/"], args.paints, warm
            )
            results[f"first paint, a search's address, {how}"] = first_paints(
                browser, origin, search_paths, args.paints, warm
            )
        load.append(os.getloadavg()[0])
        after_key, server = typed_searches(browser, origin, asked)
        results["search after the last key"] = after_key
        results["search server"] = server
        browser.close()
    load.append(os.getloadavg()[0])
    pages = timeline_pages(origin, 50)
    results["timeline page"] = [p[0] for p in pages]
    results["timeline page, server"] = [p[1] for p in pages]
    scoped = timeline_pages(origin, 20, NAMESPACES[1])
    results["timeline page, one namespace"] = [p[0] for p in scoped]
    results["other views"] = other_views(origin, asked)
    load.append(os.getloadavg()[0])
    results["load"] = load
    return results


def other_views(origin: str, asked: list[str]) -> dict[str, list[float]]:
    _, _, body = get(origin, "/?q=" + quote_plus(asked[1]))
    memory = re.search(rb'href="(/memory\?id=[^"]+)"', body)
    assert memory is not None
    paths = {
        "a memory's page": memory.group(1).decode().replace("&amp;", "&"),
        "prompt preview": "/preview?ns=*&prompt=" + quote_plus(asked[2]),
        "injection log": "/injections",
        "health": "/health",
    }
    out = {}
    for name, path in paths.items():
        out[name] = [get(origin, path)[0] for _ in range(5)]
    return out


def report(results: dict[str, Any], args: Any) -> None:
    load = results.pop("load")
    others = results.pop("other views")
    lines = [
        f"## `mnemex ui` on a large store, {args.mode} (`benchmarks/bench_ui.py --mode {args.mode}`)",
        "",
        f"Machine: {machine()}; load average {min(load):.1f} to {max(load):.1f} during the run",
        "",
        f"`mnemex ui` serving {args.size:,} memories ({args.mode}; three namespaces over a "
        "year, five kinds), measured in Chromium 156 (the system's package, headless, driven "
        "by Playwright) on the same machine. First paint: `first-contentful-paint` from the "
        "navigation's start, in a new browser context each time (nothing cached: the "
        "stylesheet and htmx are fetched too) and in one that opened the inspector before "
        f"(its static files cached, as on every later visit), {args.paints} loads each. Search: "
        f"{len(results['search after the last key'])} queries (SciFact claims and LoCoMo "
        "questions, 20-60 characters) typed a key every 80 ms; from the last key to the "
        "whole query's results on the page, and the server's time for that request "
        "(`Server-Timing`). Timeline: the first page and each next page after the last memory "
        "shown (100 memories a page), over HTTP as the page's scrolling asks for them.",
        "",
        "| measure | p50 | p95 | target |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, samples in results.items():
        p = percentiles(samples)
        target = TARGETS.get(name, "")
        lines.append(f"| {name} | {p['p50']:.1f} ms | {p['p95']:.1f} ms | {target} |")
    lines += [
        "",
        "Other views, warm, whole HTTP answer (median of 5): "
        + ", ".join(f"{name} {statistics.median(v):.1f} ms" for name, v in others.items())
        + ".",
    ]
    publish(f"bench_ui_{args.mode}", "\n".join(lines), args.no_write)


if __name__ == "__main__":
    main()
