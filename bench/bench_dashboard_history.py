#!/usr/bin/env python3
"""An experiment page of the dashboard with a long history, in a real browser.

Builds a git repository with N commits on main (default 500), submits a
batch of `--repeats` runs of one experiment at each (`trainq submit`), runs
them with `trainq serve --inproc --until-idle`, then starts `trainq serve`
with a read token and opens /experiment/hist in headless Debian Chromium
(Selenium). It measures, with the browser's own clocks:

  - load: navigation start to the history chart drawn (its 40 newest points);
  - long tasks (PerformanceObserver 'longtask', over 50 ms on the main
    thread) during the load and during paging through every page of the
    history (the "older" button, page by page) and a live refresh;
  - each page's render after a click, and a refresh after a store change;
  - the page's own chart code drawing all N commits in one chart;
  - the experiment's data route: its size and answer time for the page
    shown (40 commits) and for 500 at once, cold (first) and warm.

Prints one JSON object. Usage:
  bench_dashboard_history.py TRAINQ_BINARY [--commits 500] [--repeats 3]
(Debian's /usr/bin/python3 sees python3-selenium.)
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

YAML = """version: 1
experiments:
  hist:
    command: "sh -c 'echo accuracy=0.8{seed}SALT'"
    repeats: REPEATS
    metric: {name: accuracy, goal: max, regex: 'accuracy=([0-9.]+)', min_effect: 0.001}
"""


def sh(args, cwd=None, env=None, inp=None):
    p = subprocess.run(args, cwd=cwd, env=env, input=inp, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trainq")
    ap.add_argument("--commits", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", help="build the store here and keep it")
    a = ap.parse_args()
    trainq = os.path.abspath(a.trainq)
    tmp = a.keep or tempfile.mkdtemp(prefix="trainq-histbench-")
    os.makedirs(tmp, exist_ok=True)
    repo, db = os.path.join(tmp, "repo"), os.path.join(tmp, "t.db")
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com",
               GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.com",
               GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    t0 = time.monotonic()
    if not os.path.exists(db):
        os.makedirs(repo)
        sh(["git", "init", "-q", "-b", "main"], cwd=repo, env=env)
        # N commits in one fast-import stream; each changes trainq.yaml's salt
        # (so results differ a little from commit to commit).
        stream = []
        for i in range(a.commits):
            text = YAML.replace("REPEATS", str(a.repeats)).replace("SALT", str(i % 7))
            data = text.encode()
            msg = f"commit {i}".encode()
            stream.append(b"commit refs/heads/main\n")
            stream.append(f"committer b <b@example.com> {1_700_000_000 + i * 60} +0000\n".encode())
            stream.append(b"data %d\n%s\n" % (len(msg), msg))
            stream.append(b"M 100644 inline trainq.yaml\ndata %d\n%s\n" % (len(data), data))
        p = subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, env=env,
                           input=b"".join(stream), capture_output=True)
        if p.returncode != 0:
            sys.exit("git fast-import: " + p.stderr.decode())
        sh(["git", "checkout", "-q", "main"], cwd=repo, env=env)
        shas = sh(["git", "rev-list", "--reverse", "main"], cwd=repo, env=env).split()
        for sha in shas:
            sh([trainq, "--db", db, "submit", "-e", "hist", "--repo", repo, "--commit", sha])
        t_submit = time.monotonic() - t0
        sh([trainq, "--db", db, "serve", "--inproc", "--slots", "4", "--until-idle",
            "--poll-ms", "20"])
        t_runs = time.monotonic() - t0 - t_submit
    else:
        t_submit = t_runs = 0.0

    tok = "benchreadtoken0123456789"
    with open(os.path.join(tmp, "read"), "w") as f:
        f.write(tok + "\n")
    cfg = os.path.join(tmp, "server.yaml")
    with open(cfg, "w") as f:
        f.write(f"read_token: {{file: {tmp}/read}}\n")
    port = free_port()
    serve = subprocess.Popen([trainq, "--db", db, "serve", "--config", cfg, "--listen",
                              f"127.0.0.1:{port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    threading.Thread(target=lambda: [lines.append(x) for x in serve.stdout], daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    driver = None
    try:
        end = time.monotonic() + 30
        while not any("dashboard: " in x for x in lines):
            if time.monotonic() > end:
                sys.exit("serve did not log its dashboard line:\n" + "".join(lines))
            time.sleep(0.05)
        # The data route, timed from here (cookie from the sign-in form's redirect).
        req = urllib.request.Request(
            f"{base}/signin", method="POST",
            data=urllib.parse.urlencode({"token": tok, "next": "/experiment/hist"}).encode())

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kw):
                return None
        opener = urllib.request.build_opener(NoRedirect)
        try:
            opener.open(req)
        except urllib.error.HTTPError as e:
            cookie = e.headers["Set-Cookie"].split(";")[0]
        def timed(query, times=5):
            # The first answer is cold (serve's bootstrap memo empty for it).
            ms, body = [], b""
            for _ in range(times):
                t = time.monotonic()
                with urllib.request.urlopen(urllib.request.Request(
                        f"{base}/dash/api/experiment/hist{query}", headers={"Cookie": cookie})) as r:
                    body = r.read()
                ms.append((time.monotonic() - t) * 1000)
            return {"bytes": len(body), "cold_ms": round(ms[0], 1),
                    "warm_ms_median": round(sorted(ms[1:])[len(ms[1:]) // 2], 1)}, body
        route, body = timed("")
        doc = json.loads(body)
        points = len(doc["experiments"][0]["batches"])
        route_all, _ = timed(f"?per_page={min(500, a.commits)}")

        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,800",
                     "--no-first-run", "--user-data-dir=" + os.path.join(tmp, "profile")):
            opts.add_argument(flag)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        wait = WebDriverWait(driver, 60, poll_frequency=0.02)
        # Long tasks from the first byte of every document: an observer
        # registered by a script that runs before the page's own.
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
          window.__long = [];
          new PerformanceObserver(l => { for (const e of l.getEntries())
            window.__long.push({start: e.startTime, ms: e.duration}); })
            .observe({type: 'longtask', buffered: true});"""})
        driver.get(f"{base}/signin?next=/experiment/hist")
        driver.find_element(By.ID, "token").send_keys(tok)
        driver.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "svg.history circle.point")) >= 40)
        js = driver.execute_script
        load_ms = js("return performance.now()")
        shown = len(driver.find_elements(By.CSS_SELECTOR, "svg.history circle.point"))
        long_load = js("return window.__long.slice()")
        # Page through the whole history, oldest page last.
        page_ms = []
        pages = 1
        while True:
            older = driver.find_elements(By.CSS_SELECTOR, "button[data-to]")
            older = [b for b in older if "older" in b.text and b.is_enabled()]
            if not older:
                break
            before = js("return window.trainqRefreshes || 0")
            t = js("return performance.now()")
            older[0].click()
            wait.until(lambda d: js("return window.trainqRefreshes || 0") > before)
            page_ms.append(js("return performance.now()") - t)
            pages += 1
        # A live refresh after a store change: a new commit on main submitted
        # from the CLI (timed from before the submit).
        sh(["git", "commit", "-q", "--allow-empty", "-m", "one more"], cwd=repo, env=env)
        before = js("return window.trainqRefreshes || 0")
        t = js("return performance.now()")
        sh([trainq, "--db", db, "submit", "-e", "hist", "--repo", repo])
        wait.until(lambda d: js("return window.trainqRefreshes || 0") > before)
        live_ms = js("return performance.now()") - t
        # The whole history in one chart: the page's own historyPlot over all
        # N commits, put into the page (what a page of N would cost).
        driver.set_script_timeout(60)
        full_ms = driver.execute_async_script("""
          const done = arguments[arguments.length - 1];
          fetch('/dash/api/experiment/hist?per_page=500').then(r => r.json()).then(d => {
          const e = d.experiments[0];
          const t = performance.now();
          const div = document.createElement('div');
          div.innerHTML = historyPlot(e, e.batches);
          document.getElementById('main').append(div);
          div.getBoundingClientRect();
          done([performance.now() - t, div.querySelectorAll('circle.point').length]); });""")
        long_all = js("return window.__long.slice()")
        heap = js("return performance.memory ? performance.memory.usedJSHeapSize : null")
        out = {
            "commits": a.commits, "repeats": a.repeats, "points_in_data": points,
            "points_drawn_per_page": shown, "pages": pages,
            "setup_s": {"submit": round(t_submit, 1), "runs": round(t_runs, 1)},
            "data_route_page": route, "data_route_500": route_all,
            "load_to_chart_ms": round(load_ms, 1),
            "page_click_to_render_ms": {"median": round(sorted(page_ms)[len(page_ms) // 2], 1),
                                        "max": round(max(page_ms), 1)} if page_ms else None,
            "live_refresh_ms": round(live_ms, 1),
            "one_chart_of_all_ms": round(full_ms[0], 1), "one_chart_points": full_ms[1],
            "long_tasks_during_load": [round(x["ms"], 1) for x in long_load],
            "long_tasks_total": len(long_all),
            "longest_task_ms": round(max([x["ms"] for x in long_all], default=0), 1),
            "js_heap_mb": round(heap / 1e6, 1) if heap else None,
        }
        print(json.dumps(out, indent=2))
    finally:
        if driver is not None:
            driver.quit()
        serve.terminate()
        serve.wait(20)
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
