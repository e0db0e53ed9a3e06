"""The screenshots in docs/img/: every chart panel of the three HTML reports, as a user's browser draws it.

    python bench/screenshots.py            # or: make screenshots (about 7 minutes on 2 shared cores)
    python bench/screenshots.py --work /tmp/shots --keep

Each report is built the way a user builds it, then opened in headless Chromium:

- ``audit``: a real ``retryctl batch`` of the demo agent on the embedded model (six word problems of
  the development set, seed 3) with ``--log``, then ``retryctl audit LOG --html``;
- ``eval``: the kept real run of ``bench/graded_eval.py`` on set B (``tests/report/data/eval_set_b``:
  24 tasks, the agent beside four baselines; a fresh one takes an hour), through the command's own
  ``evaluation`` and ``render_html``;
- ``sweep``: a real ``retryctl sweep`` of the embedded model (four one-step tasks, temperature 0.2,
  0.7 and 1.2 × top-p unset or 0.9, four samples of at most 96 tokens each) with ``--html``.

Every ``<section class="panel">`` that holds a chart becomes ``docs/img/<report>-<panel>.png``: the page
is shot with the other sections hidden, and the white below the panel is cut off. So a panel added
later (the per-token heat maps) gets its picture on the next run, with nothing to change here.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

from _cli import retryctl  # bench/ is the script's directory
from _png import decode

from retryctl.evals import word_problems
from retryctl.evals._report import evaluation, render_html

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
EVAL_RUN = ROOT / "tests" / "report" / "data" / "eval_set_b"
WIDTH = {"audit": 1100, "eval": 1100, "sweep": 1400}
"""Window width: the audit's and eval's text column (1100 px at most) with the charts at their natural
size; the sweep's two columns of charts at theirs."""
TALL = {"tokens": 640}
"""Window height by panel: a heat map runs as long as the log; its picture shows the first steps (and
stays small), the page itself has them all."""
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def _tasks(path: Path, count: int, strata: tuple[str, ...] | None = None) -> Path:
    problems = [wp.task() for wp in word_problems(4 * count, seed=3)]
    chosen = [t for t in problems if strata is None or t["stratum"] in strata][:count]
    path.write_text("".join(json.dumps(t) + "\n" for t in chosen))
    return path


def audit_report(work: Path) -> Path:
    """A real batch of the demo agent with its decision log, and the audit's page of that log."""
    tasks, log, page = _tasks(work / "audit-tasks.jsonl", 6), work / "decisions.jsonl", work / "audit.html"
    retryctl(
        "batch", str(tasks), "--out", str(work / "results.jsonl"), "--log", str(log), "--concurrency", "1"
    )
    retryctl("audit", str(log), "--html", str(page))
    return page


def eval_report(work: Path) -> Path:
    """The eval page of the kept set-B run."""
    lines = {
        name: [json.loads(x) for x in (EVAL_RUN / name).read_text(encoding="utf-8").splitlines()]
        for name in ("agent.jsonl", "baselines.jsonl")
    }
    page = work / "eval.html"
    report = evaluation(lines["agent.jsonl"], lines["baselines.jsonl"])
    page.write_text(render_html(report, title="retryctl eval: set-b.jsonl"), encoding="utf-8")
    return page


def sweep_report(work: Path) -> Path:
    """A small real sweep of the embedded model and its page."""
    page, tasks = work / "sweep.html", _tasks(work / "sweep-tasks.jsonl", 4, ("small", "one_step"))
    retryctl(
        "sweep", str(tasks), "--out", str(work / "sweep"),
        "--temperature", "0.2,0.7,1.2", "--top-p", "-,0.9", "--samples", "4", "--max-tokens", "96",
        "--extract", "number", "--html", str(page),
    )  # fmt: skip
    return page


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def trim(path: Path, margin: int = 16) -> None:
    """Cut the rows below the last one that is not all white (keeping ``margin``), as RGB."""
    width, channels, _, rows = decode(path.read_bytes())
    rgb = [row if channels == 3 else bytearray(b for i, b in enumerate(row) if i % 4 != 3) for row in rows]
    white = bytes([255]) * (width * 3)
    last = max((y for y, row in enumerate(rgb) if row != white), default=0)
    kept = rgb[: min(len(rgb), last + 1 + margin)]
    # Filter "up" on every row: the white margins and repeated lines compress to almost nothing.
    prev, body = bytearray(width * 3), bytearray()
    for row in kept:
        body += b"\x02" + bytes((a - b) & 255 for a, b in zip(row, prev, strict=True))
        prev = row
    header = struct.pack(">IIBBBBB", width, len(kept), 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(bytes(body), 9))
    path.write_bytes(png + _chunk(b"IEND", b""))


def first_accepted(html: str) -> str:
    """``html`` without the heat map's step sections before the first with an accepted candidate, so
    that the picture (cut at :data:`TALL`) shows the ✓ its caption describes; the page is unchanged."""
    sections = re.findall(r'<section class="tokmap">.*?</section>', html, flags=re.S)
    first = next((i for i, body in enumerate(sections) if 'class="accepted"' in body), 0)
    for body in sections[:first]:
        html = html.replace(body, "", 1)
    return html


def shoot(chromium: str, page: Path, name: str, work: Path) -> list[Path]:
    """One PNG per chart or heat-map panel of ``page``, as docs/img/``name``-<panel>.png."""
    html = page.read_text(encoding="utf-8")
    panels = re.findall(r'<section class="panel" id="([^"]+)">((?:(?!</section>).)*)', html, flags=re.S)
    out = []
    for panel, body in panels:
        if '<svg class="chart"' not in body and '<svg class="tokens' not in body:
            continue
        # The other sections hidden: the panel is drawn where it would be, at the top of the window.
        alone = work / f"{name}-{panel}.html"
        only = f"<style>body > :not(#{panel}) {{ display: none !important; }}</style></head>"
        shown = first_accepted(html) if panel == "tokens" else html
        alone.write_text(shown.replace("</head>", only, 1), encoding="utf-8")
        png = IMG / f"{name}-{panel}.png"
        size = f"{min(WIDTH[name], 1100) if panel in TALL else WIDTH[name]},{TALL.get(panel, 2400)}"
        subprocess.run(
            [chromium, *_FLAGS, f"--user-data-dir={work / 'profile'}", f"--screenshot={png}",
             f"--window-size={size}", alone.as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        trim(png)
        out.append(png)
    if not out:
        sys.exit(f"{page}: no panel with a chart")
    return out


def main() -> None:
    """Build the three reports, shoot their chart panels into docs/img/ and print each file's size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work", type=Path, help="Directory for the runs and pages (default: a new temporary one)."
    )
    parser.add_argument("--keep", action="store_true", help="Keep the work directory.")
    parser.add_argument(
        "--only", choices=("audit", "eval", "sweep"), action="append", help="Only these reports."
    )
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed (apt-get install chromium)")
    work = args.work or Path(tempfile.mkdtemp(prefix="retryctl-shots-"))
    work.mkdir(parents=True, exist_ok=True)
    IMG.mkdir(parents=True, exist_ok=True)
    builders = {"audit": audit_report, "eval": eval_report, "sweep": sweep_report}
    try:
        for name in args.only or list(builders):
            page = builders[name](work)
            for old in IMG.glob(f"{name}-*.png"):
                old.unlink()  # a panel gone from the report leaves no stale picture
            for png in shoot(chromium, page, name, work):
                print(f"{png.relative_to(ROOT)}  {png.stat().st_size / 1024:.0f} KB")
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
