#!/usr/bin/env python3
"""report.html in a real browser: headless Debian Chromium driven by Selenium.

Builds its own fixture with the real binary (a git repo, a plain experiment
at two commits and a sweep, `serve --until-idle --inproc`, `report --out`),
opens report.html and checks what a reader sees: the Sweeps heading and the
winner line are displayed, every inline SVG has a rendered size, the
parallel-coordinates plot has one line per measured sweep point and the runs
chart one mark per run, each inside its SVG; no console errors, no parse
errors; the dashboard's palette. With $TRAINQ_SCREENSHOTS set, a screenshot
(report.png) goes there. Needs the Debian packages chromium, chromium-driver and
python3-selenium (ci/install-deps) and fails, never skips, without them.

Usage: report_browser_test.py TRAINQ_BINARY
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEADLINE_S = 20  # for each wait in the browser

TRAIN_PY = r'''import json, os, sys
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
lr, width, seed = float(a["--lr"]), int(a["--width"]), int(a["--seed"])
acc = 0.9 - (lr - 0.3) ** 2 - (0 if width == 64 else 0.01) + 0.001 * seed * (1 if width == 64 else 2)
print(f"lr {lr} width {width} seed {seed}: accuracy {acc}")
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": acc, "final": True}) + "\n")
'''

YAML = """version: 1
experiments:
  plain:
    command: python3 train.py --lr 0.3 --width 64 --seed {seed}
    repeats: 3
  mlp:
    command: python3 train.py --lr {lr} --width {width} --seed {seed}
    max_attempts: 1
    sweep:
      repeats: 2
      parallel: 2
      parameters:
        lr: {values: [0.1, 0.3, 0.5]}
        width: {values: [32, 64]}
"""

failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures += 1
    return cond


def die(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def require_browser():
    """Chromium, ChromeDriver and Selenium, or a clear failure: CI installs them."""
    missing = [p for p, path in (("chromium", CHROMIUM), ("chromium-driver", CHROMEDRIVER))
               if not os.access(path, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append(f"python3-selenium (not importable by {sys.executable}; "
                       "Debian's package is seen by /usr/bin/python3)")
    if missing:
        die("the browser test needs the Debian packages " + ", ".join(missing) +
            "; run ci/install-deps")


def sh(args, cwd=None, env=None, timeout=120):
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        die(f"{' '.join(args)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def build_fixture(trainq, tmp):
    """The plain experiment at two commits (its runs chart) and a sweep; runs them; reports."""
    repo, db, out = os.path.join(tmp, "repo"), os.path.join(tmp, "t.db"), os.path.join(tmp, "out")
    os.makedirs(repo)
    genv = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    git = lambda *a: sh(["git", *a], cwd=repo, env=genv)  # noqa: E731
    git("init", "-q", "-b", "main")
    with open(os.path.join(repo, "train.py"), "w") as f:
        f.write(TRAIN_PY)
    with open(os.path.join(repo, "trainq.yaml"), "w") as f:
        f.write(YAML)
    git("add", "train.py", "trainq.yaml")
    git("commit", "-qm", "first")
    tq = lambda *a: sh([trainq, "--db", db, *a])  # noqa: E731
    tq("submit", "-e", "plain", "--repo", repo)
    with open(os.path.join(repo, "train.py"), "a") as f:
        f.write("# second commit\n")
    git("commit", "-qam", "second")
    # plain watches nothing, so its inputs did not change: --rerun runs it again
    # (without it the second commit would reuse the first one's batch).
    tq("submit", "-e", "plain", "--rerun", "--repo", repo)
    tq("sweep", "start", "mlp", "--repo", repo)
    tq("serve", "--slots", "2", "--until-idle", "--inproc", "--poll-ms", "20")
    status = json.loads(tq("sweep", "status", "1", "--json"))
    tq("report", "--out", out)
    with open(os.path.join(out, "runs.csv")) as f:
        plain_runs = [r for r in csv.DictReader(f)
                      if r["experiment"] == "plain" and r["state"] == "succeeded"]
    return os.path.join(out, "report.html"), status, plain_runs


def open_browser(tmp):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,1000",
                 "--user-data-dir=" + os.path.join(tmp, "chromium-profile")):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_path=os.path.join(tmp, "chromedriver.log"))
    return webdriver.Chrome(service=service, options=opts)


def inside(inner, outer, slack=1.0):
    return (inner["left"] >= outer["left"] - slack and inner["right"] <= outer["right"] + slack and
            inner["top"] >= outer["top"] - slack and inner["bottom"] <= outer["bottom"] + slack)


# Rects of the marks of one SVG and of the SVG itself, from the rendered page.
MARKS_JS = """
const [svg, selector] = arguments;
const r = e => { const b = e.getBoundingClientRect();
  return {left: b.left, right: b.right, top: b.top, bottom: b.bottom, width: b.width, height: b.height}; };
return {svg: r(svg), marks: Array.from(svg.querySelectorAll(selector), e => ({
  rect: r(e), title: (e.querySelector('title') || {}).textContent || ''}))};
"""


def check_page(driver, url, raw_html, status, plain_runs):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    wait = WebDriverWait(driver, DEADLINE_S, poll_frequency=0.05)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
    # Rendered: layout has given every SVG its box (waits, never sleeps).
    wait.until(lambda d: d.execute_script(
        "const s = document.querySelectorAll('svg');"
        "return s.length > 0 && Array.from(s).every(e => e.getBoundingClientRect().width > 0);"))

    check(driver.title == "trainq spread report", f"title is the report's ({driver.title!r})")
    # The colours are the dashboard's (agent/results/palette.h), as CSS custom properties.
    better = driver.execute_script(
        "return getComputedStyle(document.documentElement).getPropertyValue('--better').trim()")
    check(better == "#17803d", f"report.html has the shared palette (--better: {better!r})")
    if os.environ.get("TRAINQ_SCREENSHOTS"):
        os.makedirs(os.environ["TRAINQ_SCREENSHOTS"], exist_ok=True)
        driver.save_screenshot(os.path.join(os.environ["TRAINQ_SCREENSHOTS"], "report.png"))

    sweeps = [h for h in driver.find_elements(By.TAG_NAME, "h2") if h.text == "Sweeps"]
    check(len(sweeps) == 1 and sweeps[0].is_displayed(), "the Sweeps heading is displayed")
    h3 = driver.find_elements(By.ID, "sweep-1")
    check(len(h3) == 1 and h3[0].is_displayed() and h3[0].text.startswith("Sweep 1: repo / mlp"),
          "the heading of sweep 1 is displayed: " + (h3[0].text if h3 else "(none)"))

    # The winner line: the leader of `sweep status --json` by its point and parameters.
    leader = next((p for p in status["points"] if p["point"] == status.get("leader")), None)
    if check(leader is not None, f"sweep status names a leader ({status.get('leader')})"):
        intro = driver.find_elements(
            By.XPATH, "//p[contains(., 'The winner by its confidence bound')]")
        items = driver.find_elements(
            By.XPATH, "//p[contains(., 'The winner by its confidence bound')]"
                      "/following-sibling::ul[1]/li")
        want = f"point {leader['point']}: "
        first = items[0] if items else None
        check(len(intro) == 1 and intro[0].is_displayed(), "the winner intro is displayed")
        check(first is not None and first.is_displayed() and first.text.startswith(want) and
              all(f"{k}=" in first.text for k in leader["params"]),
              f"the winner line is displayed and names {want.strip()} with "
              f"{', '.join(leader['params'])}: {first.text if first else '(none)'!r}")

    # Every inline SVG has a non-zero rendered size.
    sizes = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg'), s => {"
        " const b = s.getBoundingClientRect();"
        " return [s.getAttribute('aria-label') || (s.querySelector('text') || {}).textContent"
        "         || '(unnamed)', b.width, b.height]; });")
    n_svg = len(re.findall(r"<svg\b", raw_html))
    check(len(sizes) == n_svg and n_svg >= 2 + 3,
          f"{len(sizes)} SVGs rendered, {n_svg} in report.html (2 per experiment, 3+ per sweep)")
    for name, w, h in sizes:
        check(w > 0 and h > 0, f"SVG {name[:60]!r} renders at {w:.0f}x{h:.0f}")

    # Parallel coordinates: one polyline.point per measured point, each inside its SVG.
    measured = [p for p in status["points"] if p.get("n", 0) > 0]
    parallel = [s for s in driver.find_elements(By.CSS_SELECTOR, "figure.sweep-plot > svg")
                if s.find_elements(By.CSS_SELECTOR, "polyline.point")]
    if check(len(parallel) == 1, f"one parallel-coordinates SVG ({len(parallel)})"):
        got = driver.execute_script(MARKS_JS, parallel[0], "polyline.point")
        check(len(got["marks"]) == len(measured),
              f"parallel coordinates: {len(got['marks'])} lines for the {len(measured)} measured "
              "points of `sweep status 1 --json`")
        # Each line crosses every axis, so all have the same non-zero width; a point
        # at the bottom of every axis is a flat line (height 0), still drawn.
        span = max((m["rect"]["width"] for m in got["marks"]), default=0)
        for m in got["marks"]:
            r = m["rect"]
            check(span > 0 and abs(r["width"] - span) < 1 and inside(r, got["svg"]),
                  f"line {m['title']!r}: {r['width']:.0f}x{r['height']:.0f}, across all axes, "
                  "inside its SVG")
        leaders = [m for m in got["marks"] if m["title"].endswith("(leader)")]
        check(len(leaders) == 1, f"exactly one line is the leader ({len(leaders)})")

    # The per-experiment runs chart: one mark (circle) per run, inside the chart.
    runs_svg = driver.find_elements(By.CSS_SELECTOR, "svg[aria-label='runs of plain']")
    if check(len(runs_svg) == 1 and runs_svg[0].is_displayed(), "the runs chart of plain is shown"):
        got = driver.execute_script(MARKS_JS, runs_svg[0], "circle")
        commits = {r["commit"] for r in plain_runs}
        check(len(plain_runs) == 6 and len(commits) == 2,
              f"runs.csv: {len(plain_runs)} plain runs at {len(commits)} commits")
        check(len(got["marks"]) == len(plain_runs),
              f"runs chart: {len(got['marks'])} marks for {len(plain_runs)} runs")
        want = sorted(f"seed {r['seed']}" for r in plain_runs)
        titles = sorted(m["title"].split(":")[0] for m in got["marks"])
        check(titles == want, f"the marks are the runs' seeds: {titles}")
        for m in got["marks"]:
            r = m["rect"]
            check(r["width"] > 0 and r["height"] > 0 and inside(r, got["svg"]),
                  f"mark {m['title']!r} inside the runs chart")

    # No parse errors: none in the document, and each SVG of the file on its own is
    # well-formed XML to the browser's own parser (the HTML parser forgives what it does not).
    parse_errors = driver.execute_script(
        "return document.getElementsByTagName('parsererror').length;")
    check(parse_errors == 0, f"no parsererror elements in the document ({parse_errors})")
    svgs = re.findall(r"<svg\b.*?</svg>", raw_html, re.S)
    bad = driver.execute_script(
        "return arguments[0].map((t, i) => [i, new DOMParser().parseFromString(t, 'image/svg+xml')"
        "  .getElementsByTagName('parsererror').length]).filter(x => x[1] > 0).map(x => x[0]);",
        svgs)
    check(not bad, f"all {len(svgs)} SVGs of report.html parse as XML (bad: {bad})")

    # The console: nothing logged at error level while loading and rendering.
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    check(not errors, "no console errors" + "".join(f"\n  {e['message']}" for e in errors))


def main():
    if len(sys.argv) != 2:
        die(__doc__.strip().splitlines()[-1])
    trainq = os.path.abspath(sys.argv[1])
    if not os.access(trainq, os.X_OK):
        die(f"no trainq binary at {trainq}")
    require_browser()
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="trainq-web-")
    driver = None
    try:
        report, status, plain_runs = build_fixture(trainq, tmp)
        t1 = time.monotonic()
        check(status["state"] == "done", f"the sweep is done ({status['state']})")
        with open(report, encoding="utf-8") as f:
            raw = f.read()
        driver = open_browser(tmp)
        check_page(driver, "file://" + report, raw, status, plain_runs)
        print(f"fixture {t1 - t0:.1f}s, browser {time.monotonic() - t1:.1f}s", flush=True)
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        die(f"{failures} check(s) failed")
    print("report_browser_test: all checks passed")


if __name__ == "__main__":
    main()
