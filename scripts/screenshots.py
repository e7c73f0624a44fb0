"""Screenshots of a summarized sweep for the README: its summary.html, and TensorBoard's comparison views
(Custom Scalars: mean and 95% band per norm; HParams: one row per run), taken with headless Chromium.

    normbench train -m norm=bn,gn batch_size=4,16 seed=0,1,2 max_steps=60 data.subset=2000 threads=1 \
        progress=false hydra.sweep.dir=outputs/multirun/readme
    normbench summarize outputs/multirun/readme
    python scripts/screenshots.py outputs/multirun/readme            # -> docs/figures/*.png

Needs Debian's `chromium` (apt-get install chromium). TensorBoard runs on loopback only, for the
duration of the script.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def screenshot(url: str, out: Path, size: str, wait_ms: int = 0) -> None:
    """Chromium's --screenshot; `wait_ms` of virtual time first lets a page's scripts fetch and draw."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("screenshots.py: error: chromium not found; apt-get install chromium")
    extra = [f"--virtual-time-budget={wait_ms}"] if wait_ms else []
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *FLAGS, *extra, f"--user-data-dir={profile}", f"--screenshot={out}",
                        f"--window-size={size}", url], check=True, capture_output=True, timeout=180)
    print(f"wrote {out}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tensorboard(logdir: Path):
    """A TensorBoard server on loopback, once it lists runs; returns (process, base url)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host",
                             "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            with urllib.request.urlopen(f"{base}/data/runs", timeout=5) as r:
                if json.loads(r.read()):
                    return proc, base
        except OSError:
            pass
        time.sleep(0.5)
    proc.terminate()
    sys.exit("screenshots.py: error: tensorboard did not start")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", type=Path, help="a sweep directory that `normbench summarize` has run on")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "figures")
    args = p.parse_args()
    html = args.sweep / "summary.html"
    if not html.exists():
        sys.exit(f"screenshots.py: error: no {html}; run `normbench summarize {args.sweep}` first")
    args.out.mkdir(parents=True, exist_ok=True)
    screenshot(html.resolve().as_uri(), args.out / "summary_html.png", "1300,2200")
    proc, base = tensorboard(args.sweep)
    try:
        screenshot(f"{base}/?darkMode=false#custom_scalars", args.out / "tensorboard_custom_scalars.png",
                   "1500,1100", wait_ms=20000)
        screenshot(f"{base}/?darkMode=false#hparams", args.out / "tensorboard_hparams.png", "1500,900",
                   wait_ms=20000)
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
