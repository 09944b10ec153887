"""Screenshot a demo report in headless Chromium (the browser the tests drive).

    python scripts/report_screenshot.py demo-out/report.html report.png

Loads the page with ``tests/headless.py`` (DevTools protocol on a pipe), refuses to write
the picture if the page logged an error, fetched anything but itself and its data: URIs,
or has an image that did not render, and saves a full-page PNG 1,100 CSS pixels wide.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import headless  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: report_screenshot.py REPORT.html OUT.png\n")
        return 2
    page, out = Path(argv[0]), Path(argv[1])
    if not page.is_file():
        sys.stderr.write(f"error: {page} is not a file\n")
        return 2
    browser, why = headless.chromium()
    if browser is None:
        sys.stderr.write(f"error: no headless browser: {why}\n")
        return 1
    rep = headless.load(browser, page, screenshot=out)
    bad = [u for u in rep.requests if not u.startswith(("file://", "data:"))]
    broken = [i for i in rep.images if not (i["width"] and i["height"])]
    if rep.console_errors or rep.exceptions or rep.failed_requests or bad or broken:
        out.unlink(missing_ok=True)
        sys.stderr.write(
            f"error: console {rep.console_errors}, exceptions {rep.exceptions}, failed "
            f"{rep.failed_requests}, fetched {bad}, broken images {broken}\n"
        )
        return 1
    print(f"wrote {out} ({len(rep.images)} images rendered, no console errors)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
