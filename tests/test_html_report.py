"""summary.html: self-contained (nothing from the network, no script), and what a real browser renders
from it: headless Chromium's DOM holds the tables, the paired comparisons and the inline SVG figures. The
page is a Jinja2 template shipped as package data, autoescaped: text from a run stays text."""

import re
import shutil
import subprocess
import tempfile

import pytest
import yaml
from test_summarize import _summarize, sleep_sweep, small_batch_sweep

from conftest import REPO
from normbench.summary.show import html_report
from normbench.summary.summarize import compute, summarize

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync"]


def dump_dom(path) -> str:
    """The DOM Chromium builds from the file, after layout (its --dump-dom)."""
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", path.as_uri()],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_html_is_self_contained(tmp_path):
    """Reference: the HTML standard's ways to fetch a resource: no <script>, <link>, <img src>, no url()
    but to a fragment of the page itself (the SVG's clip paths), no http(s) address in any attribute;
    the figures are <svg> elements in the page itself."""
    small_batch_sweep(tmp_path)
    files, _ = _summarize(tmp_path)
    html = files["html"].read_text()
    assert "<script" not in html and "<link" not in html and "<img" not in html and not re.search(r"url\((?!#)", html)
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", html)
    assert html.count("<svg") == 2  # the batch-size figure and the forest plot
    assert "ln8_failed" in html and "non-finite loss at step 17" in html  # the runs not in the tables


@pytest.mark.skipif(CHROMIUM is None, reason="apt-get install chromium")
def test_chromium_renders_tables_comparisons_and_figures(tmp_path):
    """Reference: the sleep sweep's numbers (R: gn - bn = +1.58 points at batch 4, p = 0.0028) as text in
    the DOM that headless Chromium rendered, with the figures as SVG and the sweep's axes listed."""
    sleep_sweep(tmp_path)
    (tmp_path / "multirun.yaml").write_text(  # as Hydra writes it
        "hydra:\n  overrides:\n    task:\n    - norm=bn,gn,ln\n    - batch_size=4,16\n")
    files = summarize(tmp_path, console=None)
    dom = dump_dom(files["html"])
    assert re.search(r'<h2 id="[^"]+">fashion_mnist · mlp · test accuracy \(running statistics\) by batch size</h2>', dom)
    assert "paired vs bn" in dom and "+1.6" in dom and "0.0028" in dom
    assert dom.count("<svg") >= 2 and "error bars: 95% t-interval" in dom
    assert "normbench train -m norm=bn,gn,ln batch_size=4,16" in dom
    assert re.search(r"<dt>seed</dt><dd>0, 1, 2, 3, 4, 5, 6, 7, 8, 9</dd>", dom)


def test_claims_open_the_page(tmp_path):
    """Reference: the page's order (what a 1400 x 900 window shows first, checked by eye in the screenshot of
    docs/figures/summary_html.png): right after the run count, one block holds the claims' verdicts and the
    main figure; the claims in full, their forest plot and the table index come next, the tables after."""
    from test_claims import CLAIMS, claim_sweep

    claim_sweep(tmp_path / "sweep")
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(CLAIMS))
    files = summarize(tmp_path / "sweep", console=None, claims_file=tmp_path / "claims.yaml")
    html = files["html"].read_text()
    first = html[html.index('<div class="first">'):html.index("<h2>Claims in full</h2>")]
    assert html.index('<div class="first">') < html.index("<h2>What the tables show</h2>") < html.index("<h2 id=")
    assert "Claims: 2 held, 1 refuted, 1 inconclusive" in first and first.count("<svg") == 1
    assert [v for v in ("held", "refuted", "inconclusive") if f'class="v-{v}"' in first] == ["held", "refuted",
                                                                                            "inconclusive"]
    assert '<figure id="claims">' in html  # the forest plot of the claims


def test_text_from_runs_is_escaped_and_figures_are_markup(tmp_path):
    """Reference: the HTML standard's escapes (markupsafe's spelling: &lt; &gt; &amp; &#34; &#39;): a value
    the runs give, here a norm's name and a varied key's values holding markup and quotes, appears as text,
    never as a tag; a figure's SVG, markup by construction, appears as it was given."""
    small_batch_sweep(tmp_path)
    s = compute(tmp_path)
    s.ref = "<script>alert('x')</script>"
    s.varied = {"norm": ['bn & "gn"', "<b>ln</b>"]}
    html = html_report.to_html(s, {"sweep": '<svg id="fig"><text>a &amp; b</text></svg>'})
    assert "<script" not in html and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "<dt>norm</dt><dd>bn &amp; &#34;gn&#34;, &lt;b&gt;ln&lt;/b&gt;</dd>" in html
    assert '<figure id="sweep"><svg id="fig"><text>a &amp; b</text></svg><figcaption' in html


def test_template_ships_as_package_data():
    """Reference: setuptools' package-data globs (pyproject.toml), relative to the normbench package: one
    of them names the template the page is rendered from, so an installed wheel has it."""
    import fnmatch
    from pathlib import Path

    import normbench

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    package = Path(normbench.__file__).parent
    template = package / "summary" / "show" / "templates" / "report.html.j2"
    assert template.is_file()
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert any(fnmatch.fnmatch(template.relative_to(package).as_posix(), g) for g in globs["normbench"])
