#!/usr/bin/env python3
"""The dashboard of `trainq serve` in a real browser: headless Debian Chromium
driven by Selenium, against a real `trainq serve --inproc` running real runs.

The fixture: a git repository with a `plain` experiment (3 seeds, min_effect)
at two commits and a `slow` experiment whose run prints a line every 0.2 s
until it is cancelled. serve reads read_token and admin_token from files and
logs `dashboard: http://HOST:PORT/?login=...`, a one-time link; the test
opens that address.

Checks: 401 and no data without a session; `/?token=` signs in no more; the
sign-in form sets an HttpOnly, SameSite=Strict cookie; the one-time link
signs in once and leaves the address; the overview lists the experiments and the
queue; the experiment page has one point per commit and the verdict words
`trainq show --json` gives, and y ticks at round numbers (niceTicks); the commit page has every seed of both sides and
the effect; a commit submitted from the CLI while the overview is open shows
up without a reload (a page-level JS marker survives); the slow run's log
tail and its metric curve grow; actions are refused with the read session
(403) and the admin's cancel button cancels the run, its retry button puts
it back in the queue (both checked in the store); the sweeps page shows the
report's SVG plots of a sweep, byte for byte `trainq sweep plot`'s; the
admin signs in through the sign-in page's form (its screenshot: signin.png)
and "Sign out" ends the session server-side (its cookie then gets 401);
neither token is in Chromium's History afterwards; markup in a commit
subject, a token's name and an address is text on every page, and nothing
of it runs; no console errors.
Screenshots (1280x800) go to $TRAINQ_SCREENSHOTS when set.

Usage: dashboard_browser_test.py TRAINQ_BINARY
"""
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
import urllib.error
import urllib.parse
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEADLINE_S = 20  # for each wait in the browser

TRAIN_PY = r'''import json, os, sys, time
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
seed, shift, slow = int(a["--seed"]), float(a.get("--shift", "0")), a.get("--slow") == "1"
mf = open(os.environ["TRAINQ_METRICS_FILE"], "a")
if slow:
    for step in range(600):  # a minute at most, unless cancelled
        print(f"tick {step}", flush=True)
        mf.write(json.dumps({"name": "loss", "value": 1.0 / (step + 1), "step": step}) + "\n")
        mf.flush()
        time.sleep(0.2)
acc = 0.80 + shift + 0.003 * ((seed * 7 + int(shift * 300)) % 5)
for step in range(5):
    mf.write(json.dumps({"name": "loss", "value": 1.0 / (step + 1), "step": step}) + "\n")
print(f"seed {seed}: accuracy {acc}")
mf.write(json.dumps({"name": "accuracy", "value": acc, "final": True}) + "\n")
mf.write(json.dumps({"name": "eval_examples", "value": 10000}) + "\n")  # the noise floor
'''

# Two experiments that change together at one commit (a Holm family of 2):
# h1 with paired p = 0.037 raw, 0.074 adjusted; h2 with p = 0.77.
HOLM_PY = r'''import json, os, sys
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
seed, exp, side = int(a["--seed"]), a["--exp"], a["--side"]
base = [0.900, 0.910, 0.905, 0.895, 0.915, 0.902]
head = {"h1": [0.922, 0.907, 0.920, 0.899, 0.927, 0.912],
        "h2": [0.904, 0.904, 0.915, 0.887, 0.917, 0.905]}
v = (base if side == "base" else head[exp])[seed - 1]
print(f"seed {seed}: accuracy {v}")
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as mf:
    mf.write(json.dumps({"name": "accuracy", "value": v, "final": True}) + "\n")
'''

YAML = """version: 1
experiments:
  h1:
    command: python3 holm.py --exp h1 --side HOLM --seed {seed}
    repeats: 6
    metric: {name: accuracy, goal: max}
  h2:
    command: python3 holm.py --exp h2 --side HOLM --seed {seed}
    repeats: 6
    metric: {name: accuracy, goal: max}
  plain:
    command: python3 train.py --seed {seed} --shift SHIFT
    repeats: 4
    metric: {name: accuracy, goal: max, min_effect: 0.005}
  slow:
    command: python3 train.py --seed {seed} --slow 1
    repeats: 1
    max_attempts: 1
    baseline: "off"
    metric: {name: accuracy, goal: max}
  sw:
    command: python3 train.py --seed {seed} --shift {lr}
    metric: {name: accuracy, goal: max}
    sweep:
      budget: {points: 4}
      parallel: 2
      repeats: 2
      confirm: 0
      seed: 7
      parameters:
        lr: {uniform: [0.0, 0.05]}
"""

failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures += 1
    return cond


def failures_count():
    """The failed checks so far (for the tests that import check())."""
    return failures


def die(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def require_browser():
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


def wait_for(cond, what, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    die("timed out waiting for " + what)


def one_two_five(values):
    """True when the values are whole multiples of one step of 1, 2 or 5 x 10^k, in order."""
    import math
    if len(values) < 2:
        return True
    step = values[1] - values[0]
    if step <= 0:
        return False
    mag = 10 ** math.floor(math.log10(step) + 1e-9)
    if min(abs(step / mag - m) for m in (1, 2, 5)) > 1e-6:
        return False
    return all(abs(b - a - step) <= step * 1e-6 for a, b in zip(values, values[1:])) and \
        all(abs(v / step - round(v / step)) <= 1e-6 for v in values)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fixture:
    def __init__(self, trainq, tmp):
        self.trainq, self.tmp = trainq, tmp
        self.repo, self.db = os.path.join(tmp, "repo"), os.path.join(tmp, "t.db")
        self.genv = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                         GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                         GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
        self.lines, self.serve = [], None
        self.holm = "base"

    def git(self, *a):
        return sh(["git", *a], cwd=self.repo, env=self.genv)

    def tq(self, *a):
        return sh([self.trainq, "--db", self.db, *a])

    def commit(self, shift, msg):
        with open(os.path.join(self.repo, "trainq.yaml"), "w") as f:
            f.write(YAML.replace("SHIFT", shift).replace("HOLM", self.holm))
        self.git("add", "-A")
        self.git("commit", "-qm", msg)
        return self.git("rev-parse", "HEAD").strip()

    def build(self):
        os.makedirs(self.repo)
        self.git("init", "-q", "-b", "main")
        with open(os.path.join(self.repo, "train.py"), "w") as f:
            f.write(TRAIN_PY)
        with open(os.path.join(self.repo, "holm.py"), "w") as f:
            f.write(HOLM_PY)
        self.sha1 = self.commit("0", "first")
        self.tq("submit", "-e", "plain", "--repo", self.repo)
        self.sha2 = self.commit("0.02", "better accuracy")
        self.tq("submit", "-e", "plain", "--repo", self.repo)
        self.read_token, self.admin_token = "r" * 8 + "readtoken1234", "a" * 8 + "admintoken5678"
        for name, tok in (("read", self.read_token), ("admin", self.admin_token)):
            with open(os.path.join(self.tmp, name), "w") as f:
                f.write(tok + "\n")
        # A fake MLflow tracking server (tests/support/fake_mlflow.py): serve
        # exports each batch that finishes, with no `trainq mlflow export`.
        port_file = os.path.join(self.tmp, "mlflow.port")
        self.mlflow = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support",
                                          "fake_mlflow.py"), "--port-file", port_file],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = wait_for(lambda: os.path.exists(port_file) and open(port_file).read().strip(),
                        "the fake MLflow server's port", 20)
        self.mlflow_url = f"http://127.0.0.1:{port}"
        cfg = os.path.join(self.tmp, "server.yaml")
        with open(cfg, "w") as f:
            f.write(f"read_token: {{file: {self.tmp}/read}}\nadmin_token: {{file: {self.tmp}/admin}}\n"
                    f"mlflow: {{tracking_uri: {self.mlflow_url}, experiment_prefix: dash/}}\n")
        self.port = free_port()
        self.serve = subprocess.Popen(
            [self.trainq, "--db", self.db, "serve", "--inproc", "--slots", "3", "--poll-ms", "50",
             "--config", cfg, "--listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        line = wait_for(lambda: next((x for x in self.lines if "dashboard: " in x), None),
                        "serve's dashboard line", 30)
        self.url = re.search(r"dashboard: (\S+)", line).group(1)
        self.base = f"http://127.0.0.1:{self.port}"

    def _read(self):
        for line in self.serve.stdout:
            self.lines.append(line)

    def status(self):
        return json.loads(self.tq("status", "--json"))

    def show(self, sha):
        return json.loads(self.tq("show", sha, "--json"))

    def stop(self):
        if getattr(self, "mlflow", None) and self.mlflow.poll() is None:
            self.mlflow.terminate()
            self.mlflow.wait(10)
        if self.serve and self.serve.poll() is None:
            self.serve.terminate()
            try:
                self.serve.wait(20)
            except subprocess.TimeoutExpired:
                self.serve.kill()


def http(url, method="GET", headers=None, body=None):
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=body)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


def open_browser(tmp):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,800",
                 "--user-data-dir=" + os.path.join(tmp, "chromium-profile")):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_path=os.path.join(tmp, "chromedriver.log"))
    return webdriver.Chrome(service=service, options=opts)


def shot(driver, name):
    """A 1280x800 viewport screenshot into $TRAINQ_SCREENSHOTS, when set."""
    out = os.environ.get("TRAINQ_SCREENSHOTS")
    if out:
        os.makedirs(out, exist_ok=True)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1280, "height": 800, "deviceScaleFactor": 1,
                                "mobile": False})
        driver.save_screenshot(os.path.join(out, name + ".png"))
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def holm_checks(fx, driver, wait):
    """A commit that changes h1 and h2 at once: the commit page and the
    experiment page show the interval and p the verdict used (Holm over 2),
    the raw p beside them, exactly as `trainq show --json` says (issue 38.1)."""
    from selenium.webdriver.common.by import By
    fx.tq("submit", "-e", "h1", "-e", "h2", "--repo", fx.repo)  # at sha2: their base side
    fx.holm = "head"
    sha = fx.commit("0.02", "h1 and h2 change")
    fx.tq("submit", "-e", "h1", "-e", "h2", "--repo", fx.repo)
    done = lambda s: all(b["progress"]["counts"]["succeeded"] == 6  # noqa: E731
                         for b in fx.show(s)["batches"])
    wait_for(lambda: done(sha) and all(
        (b.get("vs_parent") or {}).get("correction", {}).get("p_adjusted") is not None
        for b in fx.show(sha)["batches"]), "the Holm family's runs", 120)
    view = fx.show(sha)
    vp = next(b["vs_parent"] for b in view["batches"] if b["experiment"] == "h1")
    c = vp["correction"]
    check(c["p_raw"] < 0.05 < c["p_adjusted"] and c["text"] == "Holm over 2" and
          vp["verdict"] == "no detectable change" and view["family"]["size"] == 2,
          f"the fixture is a Holm family of 2 with h1 at p={c['p_raw']:.4f} raw, "
          f"{c['p_adjusted']:.4f} adjusted: {vp['verdict']}")
    sg = lambda v: ("+" if v >= 0 else "") + f"{v:.4f}"  # noqa: E731
    want_ci = f"{c['level_text']} {sg(c['interval'][0])}..{sg(c['interval'][1])}"

    driver.get(fx.base + "/commit/" + sha)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.batch[data-experiment='h1'] .effect"))
    eff = driver.find_element(By.CSS_SELECTOR, "section.batch[data-experiment='h1'] .effect")
    ci = eff.find_element(By.CSS_SELECTOR, ".ci").text
    p_adj = eff.find_element(By.CSS_SELECTOR, ".p-adj").text
    p_raw = eff.find_element(By.CSS_SELECTOR, ".p-raw").text
    corr = eff.find_element(By.CSS_SELECTOR, ".correction").text
    check(ci == want_ci, f"the commit page's interval is the verdict's ({want_ci}): {ci!r}")
    check(p_adj == f"p={c['p_adjusted']:.4f} adjusted" and p_raw == f"p={c['p_raw']:.4f} raw" and
          corr == "Holm over 2",
          f"the commit page gives the adjusted p, the raw p and the correction: {eff.text!r}")
    check("no detectable change" in eff.text and "95% CI" not in eff.text,
          f"no unwidened 95% interval beside the corrected verdict: {eff.text!r}")
    fam = driver.find_element(By.CSS_SELECTOR, "p.family").text
    check("2 experiments changed" in fam and "Holm over 2" in fam, f"the family is named: {fam!r}")
    shot(driver, "commit-holm")

    driver.get(fx.base + "/experiment/h1")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-commit='{sha}'] td.p-cell .p-adj"))
    cell = driver.find_element(By.CSS_SELECTOR, f"tr[data-commit='{sha}'] td.p-cell")
    check(cell.find_element(By.CSS_SELECTOR, ".p-adj").text == f"{c['p_adjusted']:.4f}" and
          cell.find_element(By.CSS_SELECTOR, ".p-raw").text == f"(raw {c['p_raw']:.4f}, Holm over 2)",
          f"the experiment page's P column is the verdict's p with the raw one beside it: {cell.text!r}")
    word = driver.find_element(By.CSS_SELECTOR, f"svg.history circle.point[data-commit='{sha}']")
    check(word.get_attribute("data-verdict") == vp["verdict"],
          f"the experiment page's verdict is the CLI's: {word.get_attribute('data-verdict')}")
    shot(driver, "experiment-holm")


def sign_in(fx, driver, wait, token, next_path, ready_css):
    """Through the sign-in page's form, as a person would."""
    from selenium.webdriver.common.by import By
    driver.get(f"{fx.base}/signin?next={urllib.parse.quote(next_path)}")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "form#signin input[name=token]"))
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ready_css))


def people_checks(fx, driver, wait, js, run_id):
    """Issue 41: an admin gives ada a write token on the account page; ada
    signs in with it, retries and cancels a run, the run's page and the audit
    page say who, and a revoked token stops working at once."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait
    sign_in(fx, driver, wait, fx.admin_token, "/account", "form#new-token")
    driver.find_element(By.CSS_SELECTOR, "#new-token input[name=name]").send_keys("laptop")
    driver.find_element(By.CSS_SELECTOR, "#new-token input[name=owner]").send_keys("ada@example.com")
    Select(driver.find_element(By.CSS_SELECTOR, "#new-token select[name=role]")).select_by_visible_text("write")
    driver.find_element(By.CSS_SELECTOR, "#new-token button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#made-token pre"))
    token = driver.find_element(By.CSS_SELECTOR, "#made-token pre").text.strip()
    check(re.fullmatch(r"tqp_[0-9a-f]{64}", token) is not None, "the account page shows the new token once")
    wait.until(lambda d: any("ada@example.com" in r.text for r in d.find_elements(By.CSS_SELECTOR, "tr.token-row")))
    shot(driver, "account")
    # Ada, with her own token: her name on the page, a write role's buttons.
    sign_in(fx, driver, wait, token, f"/run/{run_id}", "button[data-action='retry_run']")
    check("ada@example.com (write)" in driver.find_element(By.ID, "role").text,
          f"the header names the person: {driver.find_element(By.ID, 'role').text!r}")
    js("setTimeout(() => document.querySelector(\"button[data-action='retry_run']\").click(), 0)")
    WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present()).accept()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "button[data-action='cancel_run']"))
    js("setTimeout(() => document.querySelector(\"button[data-action='cancel_run']\").click(), 0)")
    WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present()).accept()
    wait.until(lambda d: "cancelled" in d.find_element(By.ID, "run-state").text)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.audit-row")) >= 2)
    rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "tr.audit-row")]
    check("ada@example.com" in rows[0] and "cancel run" in rows[0] and
          any("ada@example.com" in r and "retry run" in r for r in rows),
          f"the run's page says who retried and cancelled it: {rows[:2]}")
    check(any(f"dashboard: ada@example.com cancelled run {run_id}" in x for x in fx.lines) and
          any(f"dashboard: ada@example.com retried run {run_id}" in x for x in fx.lines),
          "serve logged ada's retry and cancel by name")
    check(not any(token[4:] in x for x in fx.lines), "serve's log does not hold the personal token")
    # The same token on the API (`trainq gate --server` and the other --server commands).
    code, _, who = http(fx.base + "/api/v1/whoami", headers={"Authorization": "Bearer " + token})
    check(code == 200 and json.loads(who)["who"] == "ada@example.com", f"whoami with ada's token: {code}")
    # The admin's audit page.
    sign_in(fx, driver, wait, fx.admin_token, "/audit", "tr.audit-row")
    texts = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "tr.audit-row")]
    check(any("ada@example.com" in t and "cancel run" in t for t in texts) and
          any("token created" in t and "laptop" in t for t in texts) and
          any("login" in t for t in texts),
          f"the audit page lists the cancel, the token and the sign-ins: {texts[:4]}")
    shot(driver, "audit")
    # Revoked on the account page: the token stops working at once.
    driver.get(fx.base + "/account")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "button[data-revoke]"))
    js("setTimeout(() => document.querySelector('button[data-revoke]').click(), 0)")
    WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present()).accept()
    wait_for(lambda: http(fx.base + "/api/v1/whoami", headers={"Authorization": "Bearer " + token})[0] == 401,
             "the revoked token refused", 10)
    check(True, "a revoked personal token is refused at once")


def run_checks(fx, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from selenium.common.exceptions import StaleElementReferenceException
    # Live sections are redrawn while a wait looks at them: a stale element
    # is looked up again at the next poll.
    wait = WebDriverWait(driver, DEADLINE_S, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,))
    js = driver.execute_script

    # Access: nothing without a session. A page answers the sign-in form,
    # which names the page to go back to and nothing else.
    for path in ("/", "/experiment/plain", f"/commit/{fx.sha2}", "/dash/api/status",
                 "/dash/api/experiments", "/dash/events", "/dash/app.mjs"):
        code, _, body = http(fx.base + path)
        body = body.replace(f'value="{path}"', "")
        check(code == 401 and "plain" not in body and fx.sha2 not in body,
              f"GET {path} without a session: {code}, no data")
    code, headers, body = http(fx.base + "/?token=" + fx.read_token)
    check(code == 401 and "Set-Cookie" not in headers and "no longer accepted" in body,
          f"a token in the address signs in no more: {code}")
    code, headers, _ = http(fx.base + "/signin", "POST",
                            {"Content-Type": "application/x-www-form-urlencoded"},
                            urllib.parse.urlencode({"token": fx.read_token, "next": "/"}).encode())
    cookie = headers.get("Set-Cookie", "")
    check(code == 303 and headers.get("Location") == "/" and "HttpOnly" in cookie and
          "SameSite=Strict" in cookie and "Secure" not in cookie,
          f"the sign-in form: {code}, Location {headers.get('Location')}, cookie flags in "
          f"{cookie.split(';', 1)[-1]!r}")

    # The runs of `plain` at both commits finish first.
    wait_for(lambda: all(b["progress"]["counts"]["succeeded"] == 4
                         for b in fx.show(fx.sha2)["batches"]) and
             all(b["progress"]["counts"]["succeeded"] == 4 for b in fx.show(fx.sha1)["batches"]),
             "the plain runs", 90)

    # Overview, from serve's one-time link (a read session).
    driver.get(fx.url)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-experiment='plain']"))
    check("login" not in driver.current_url, f"the code left the address: {driver.current_url}")
    code, headers, body = http(fx.url)
    check(code == 401 and "Set-Cookie" not in headers and "used already" in body,
          f"the one-time link a second time: {code}")
    names = [e.get_attribute("data-experiment")
             for e in driver.find_elements(By.CSS_SELECTOR, "#experiments tr[data-experiment]")]
    check(names == ["plain"], f"the overview lists the experiments with batches: {names}")
    st = fx.status()
    shown = {e.get_attribute("data-state"): e.find_element(By.TAG_NAME, "b").text
             for e in driver.find_elements(By.CSS_SELECTOR, "#counts .count[data-state]")}
    check(shown.get("succeeded") == str(st["counts"]["succeeded"]),
          f"the queue counts are the status document's: succeeded {shown.get('succeeded')} "
          f"vs {st['counts']['succeeded']}")
    check(not driver.find_elements(By.CSS_SELECTOR, "[data-action]"),
          "a read session shows no action controls")
    # Each experiment's latest verdict, the one `trainq show --json` gives.
    latest = driver.find_element(By.CSS_SELECTOR, "#experiments tr[data-experiment='plain'] .verdict").text
    want = fx.show(fx.sha2)["batches"][0]["vs_parent"]["verdict"].replace("_", " ")
    check(latest == want, f"the overview shows plain's latest verdict, the CLI's ({want}): {latest!r}")
    # A page to keep open: at 1280x800 nothing scrolls sideways.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    wide = js("return [document.documentElement.scrollWidth, window.innerWidth]")
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    check(wide[0] <= wide[1], f"the overview fits 1280 px without a horizontal scrollbar: {wide}")
    shot(driver, "overview")

    # Experiment page: one point per commit, the verdict words of `trainq show --json`.
    driver.get(fx.base + "/experiment/plain")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.history circle.point"))
    pts = [(e.get_attribute("data-commit"), e.get_attribute("data-verdict"))
           for e in driver.find_elements(By.CSS_SELECTOR, "svg.history circle.point")]
    check([c for c, _ in pts] == [fx.sha1, fx.sha2], f"one point per commit, oldest first: {pts}")
    cli_verdict = fx.show(fx.sha2)["batches"][0]["vs_parent"]["verdict"]
    words = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "svg.history text.vword")]
    check(words == [cli_verdict.replace("_", " ")] and pts[1][1] == cli_verdict,
          f"the verdict word is the CLI's ({cli_verdict}): {words}")
    check(len(driver.find_elements(By.CSS_SELECTOR, "svg.history rect.band")) == 1,
          "the min_effect band is drawn at the compared commit")
    # Issue 38.9: the y ticks are round numbers, one 1-2-5 step apart (they
    # read 0.9821, 0.9737, 0.9652). niceTicks itself, as the C++ NiceTicks.
    labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "svg.history text.ytick")]
    check(len(labels) >= 3 and one_two_five([float(x) for x in labels]),
          f"the history chart's y ticks are round, 1-2-5 apart: {labels}")
    for lo, hi, want in ((0.9483, 0.9821, ["0.95", "0.96", "0.97", "0.98"]),
                         (2.1, 21.9, ["5", "10", "15", "20"]), (0, 0.9, ["0", "0.2", "0.4", "0.6", "0.8"]),
                         (-0.021, 0.011, ["-0.02", "-0.01", "0", "0.01"])):
        # The page's own module (tests/web/unit/format_test.mjs has more cases).
        got = driver.execute_async_script(
            "const [lo, hi, done] = arguments; import('/dash/format.mjs').then(m => {"
            "const t = m.niceTicks(lo, hi); done(t.values.map(v => m.tickLabel(v, t.decimals))); });", lo, hi)
        check(got == want, f"niceTicks({lo}, {hi}): {got}")
    link = driver.find_elements(By.CSS_SELECTOR, "svg.history a circle.point")[1]
    check(js("return arguments[0].parentNode.getAttribute('href')", link) == "/commit/" + fx.sha2,
          "a point links to its commit page")
    # Issue 40: the seed sd with its test-set noise floor (the runs report
    # eval_examples), the numbers and words of `trainq show --json`.
    for sha in (fx.sha1, fx.sha2):
        want = fx.show(sha)["batches"][0]["progress"]["summary"]["noise_floor"]
        cell = driver.find_element(By.CSS_SELECTOR, f'tr[data-commit="{sha}"] td.sd-cell')
        floor = cell.find_element(By.CSS_SELECTOR, ".floor")
        check(floor.text == f"({want['short']})" and floor.get_attribute("title") == want["text"],
              f"the sd cell of {sha[:7]} shows the CLI's floor: {cell.text!r} vs {want['short']!r}")
        check(("floor-at" in floor.get_attribute("class").split()) == want["at_floor"],
              f"the floor is marked 'at it' as the CLI says ({want['at_floor']})")
    shot(driver, "experiment")

    # Commit page: every seed of both sides, the effect.
    driver.get(fx.base + "/commit/" + fx.sha2)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.seeds circle.seed"))
    vp = fx.show(fx.sha2)["batches"][0]["vs_parent"]
    a = sorted(int(e.get_attribute("data-seed"))
               for e in driver.find_elements(By.CSS_SELECTOR, "svg.seeds circle.seed-a"))
    b = sorted(int(e.get_attribute("data-seed"))
               for e in driver.find_elements(By.CSS_SELECTOR, "svg.seeds circle.seed-b"))
    check(a == sorted(vp["a"]["seeds"]) and b == sorted(vp["b"]["seeds"]) and len(a) == 4,
          f"every seed of both sides is a dot: {a} / {b}")
    pairs = len(driver.find_elements(By.CSS_SELECTOR, "svg.seeds line.pair"))
    check(pairs == vp["shared_seeds"], f"a pairing line per shared seed: {pairs}")
    diff = driver.find_element(By.CSS_SELECTOR, ".effect .diff").text
    want = ("+" if vp["diff"] >= 0 else "") + f"{vp['diff']:.4f}"
    effect = driver.find_element(By.CSS_SELECTOR, ".effect").text
    check(diff == want and vp["verdict"].replace("_", " ") in effect,
          f"the effect is the CLI's ({want}, {vp['verdict']}): {effect!r}")
    texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".floor-text")]
    check(texts == [vp["a"]["noise_floor"]["text"]],
          f"the commit page says where the seed sd sits against the floor: {texts}")
    shot(driver, "commit")

    holm_checks(fx, driver, wait)

    # Live: a commit submitted from the CLI appears on the open overview.
    driver.get(fx.base + "/")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#experiments tr[data-experiment]"))
    wait.until(lambda d: js("return document.getElementById('live').textContent") == "live")
    js("window.trainqMarker = 'no reload';")
    t0 = time.monotonic()
    fx.commit("0.0", "slow one")
    fx.tq("submit", "-e", "slow", "--repo", fx.repo)
    slow_batch = next(b for b in fx.status()["batches"] if b["experiment"] == "slow")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#experiments tr[data-experiment='slow']"))
    took = time.monotonic() - t0
    check(js("return window.trainqMarker") == "no reload",
          f"the new experiment appeared without a reload ({took:.2f}s after the submit returned)")
    check(took < 5, f"within a few seconds of the store change ({took:.2f}s)")

    # The slow run's log tail grows on its run page.
    run_id = wait_for(lambda: next((r["id"] for r in fx.status()["running"]
                                    if r["experiment"] == "slow"), None), "the slow run to start")
    driver.get(f"{fx.base}/run/{run_id}")
    wait.until(lambda d: "tick 2" in d.find_element(By.ID, "log").text)
    n1 = len(driver.find_element(By.ID, "log").text.splitlines())
    t1 = time.monotonic()
    wait.until(lambda d: len(d.find_element(By.ID, "log").text.splitlines()) >= n1 + 5)
    grew = time.monotonic() - t1
    check(grew < 5, f"the log tail grew by 5 lines in {grew:.2f}s (the run prints one each "
          f"0.2 s; serve --inproc ships output each second, the page asks each second)")
    # Its metric curve fills while it runs (serve --inproc ships points as a
    # remote worker does): the store's points and the page's count both grow.
    rc = driver.get_cookie("trainq_dash")["value"]
    points = lambda: json.loads(http(f"{fx.base}/dash/api/run/{run_id}",  # noqa: E731
                                     headers={"Cookie": "trainq_dash=" + rc})[2])
    p1 = points()
    # Read in one script: the section is redrawn as points come (a found
    # element may be replaced before its text is read).
    shown = lambda: int(re.search(r"\((\d+) points\)", js(  # noqa: E731
        "return document.querySelector(\"[data-key='curve'] h2\").textContent")).group(1))
    s1 = shown()
    t2 = time.monotonic()
    wait_for(lambda: points()["metric_points"] >= p1["metric_points"] + 5, "5 more metric points", 20)
    wait.until(lambda d: shown() >= s1 + 5)
    filled = time.monotonic() - t2
    p2 = points()
    check(filled < 5, f"5 more points on the page within {filled:.2f}s (one each 0.2 s)")
    check(p2["run"]["state"] == "running" and len(driver.find_elements(By.CSS_SELECTOR, "svg.curve-plot polyline.curve")) == 1,
          f"the running run's metric curve fills: {p1['metric_points']} -> {p2['metric_points']} "
          f"points in the store, {s1} -> {shown()} on the page, still {p2['run']['state']}")
    shot(driver, "run")

    # Actions: refused with the read session, done with the admin's.
    rc = driver.get_cookie("trainq_dash")["value"]
    sess = json.loads(http(fx.base + "/dash/api/session", headers={"Cookie": "trainq_dash=" + rc})[2])
    body = json.dumps({"action": "cancel_run", "run": run_id}).encode()
    code, _, _ = http(fx.base + "/dash/api/action", "POST",
                      {"Cookie": "trainq_dash=" + rc, "X-CSRF-Token": sess["csrf"],
                       "Content-Type": "application/json"}, body)
    check(code == 403 and sess["role"] == "read", f"cancel with the read session: {code}")
    # The admin signs in through the sign-in page's form (a page without a
    # session shows the same form, with the page to go back to).
    code, _, page = http(f"{fx.base}/run/{run_id}")
    check(code == 401 and 'action="/signin"' in page and f'value="/run/{run_id}"' in page,
          f"a page without a session answers the sign-in form that goes back to it: {code}")
    driver.get(f"{fx.base}/signin?next=/run/{run_id}")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "form#signin input[name=token]"))
    shot(driver, "signin")
    driver.find_element(By.ID, "token").send_keys(fx.admin_token)
    driver.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "button[data-action='cancel_run']"))
    check(driver.current_url == f"{fx.base}/run/{run_id}" and fx.admin_token not in driver.current_url,
          f"signed in as admin, back on the run's page: {driver.current_url}")
    ac = driver.get_cookie("trainq_dash")["value"]
    code, _, _ = http(fx.base + "/dash/api/action", "POST",
                      {"Cookie": "trainq_dash=" + ac, "Content-Type": "application/json"}, body)
    check(code == 403, f"an admin action without the CSRF header: {code}")
    state = lambda: next(r["state"] for r in json.loads(fx.tq("runs", "--batch", str(slow_batch["id"]), "--json"))  # noqa: E731
                         if r["id"] == run_id)
    check(state() == "running", "the slow run is still running before the click")
    shot(driver, "run-admin")
    # Each action asks first, with its size (docs/dashboard.md); "no" sends nothing.
    from selenium.webdriver.support import expected_conditions as EC
    driver.find_element(By.CSS_SELECTOR, "button[data-action='cancel_run']").click()
    alert = WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present())
    asked = alert.text
    alert.dismiss()
    check(re.fullmatch(rf"cancel run {run_id} \(slow seed 1 at [0-9a-f]{{7}}, running\)\?", asked)
          is not None, f"cancel asks first, naming the run: {asked!r}")
    time.sleep(0.5)  # a request would have been sent at once; none was
    check(state() == "running", "answering no cancels nothing")
    js("setTimeout(() => document.querySelector(\"button[data-action='cancel_run']\").click(), 0)")
    WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present()).accept()
    wait_for(lambda: state() == "cancelled", "the run cancelled in the store", 20)
    check(True, "the cancel button cancelled the run (trainq runs --json says cancelled)")
    wait.until(lambda d: "cancelled" in d.find_element(By.ID, "run-state").text)
    check(not any(fx.read_token in x or fx.admin_token in x for x in fx.lines),
          "serve's log holds neither configured token")
    check(any("dashboard: admin token (session" in x and f"cancelled run {run_id}" in x for x in fx.lines),
          "serve logged who cancelled what")

    # Retry: the cancelled run goes back in the queue from its page; a read
    # session has no button and is refused.
    body = json.dumps({"action": "retry_run", "run": run_id}).encode()
    code, _, _ = http(fx.base + "/dash/api/action", "POST",
                      {"Cookie": "trainq_dash=" + rc, "X-CSRF-Token": sess["csrf"],
                       "Content-Type": "application/json"}, body)
    check(code == 403 and state() == "cancelled", f"retry with the read session: {code}")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "button[data-action='retry_run']"))
    shot(driver, "run-retry")
    # One step (the row is redrawn live), then the question.
    js("setTimeout(() => document.querySelector(\"button[data-action='retry_run']\").click(), 0)")
    alert = WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present())
    asked = alert.text
    alert.accept()
    check(re.fullmatch(rf"retry run {run_id} \(slow seed 1 at [0-9a-f]{{7}}\): queue 1 run again\?",
                       asked) is not None, f"retry asks first: {asked!r}")
    wait_for(lambda: state() in ("queued", "leased", "running"), "the run queued again in the store", 20)
    check(True, f"the retry button put the run back in the queue (trainq runs --json: {state()})")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.retry-row"))
    shot(driver, "run-retried")
    row = js("return document.querySelector('tr.retry-row').innerText")
    check("cancelled" in row and "admin token (session" in row,
          f"the run page lists its earlier round: {row!r}")
    check(any("dashboard: admin token (session" in x and f"retried run {run_id}" in x for x in fx.lines),
          "serve logged who retried what")
    # The second attempt's curve is drawn apart from the first's (issue 38.8).
    wait_for(lambda: points()["metric_attempts"] == 2 and points()["run"]["state"] == "running",
             "the retried run's second attempt sending points", 30)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "svg.curve-plot polyline.curve")) == 2)
    attempts = sorted(e.get_attribute("data-attempt") for e in
                      driver.find_elements(By.CSS_SELECTOR, "svg.curve-plot polyline.curve"))
    check(attempts == ["1", "2"] and
          len(driver.find_elements(By.CSS_SELECTOR, "svg.curve-plot polyline.curve.earlier")) == 1,
          f"after a retry each attempt is its own curve (the first dashed): {attempts}")
    shot(driver, "run-two-attempts")
    # The cancelled first attempt kept its output: its ticks are in the log.
    first_log = json.loads(http(f"{fx.base}/dash/api/run/{run_id}/log?from=0",
                                headers={"Cookie": "trainq_dash=" + driver.get_cookie("trainq_dash")["value"]})[2])
    check("--- trainq: lease" in first_log["text"] and first_log["text"].count("tick 0") >= 2,
          "the cancelled attempt's output stays in the log beside the new one")

    # add seeds asks with its size, on the commit page.
    driver.get(fx.base + "/commit/" + fx.sha2)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "button[data-action='add_seeds']"))
    before = len(json.loads(fx.tq("runs", "--json")))
    js("setTimeout(() => document.querySelector(\"button[data-action='add_seeds']\").click(), 0)")
    alert = WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present())
    asked = alert.text
    alert.dismiss()
    check(asked == f"queue 5 more seeds of plain at {fx.sha2[:7]}?" and
          len(json.loads(fx.tq("runs", "--json"))) == before,
          f"add seeds asks with its size and, answered no, queues nothing: {asked!r}")
    # Sign out: the admin session ends in serve, its cookie is refused after.
    admin_cookie = driver.get_cookie("trainq_dash")["value"]
    wait.until(lambda d: d.find_element(By.ID, "signout").is_displayed())
    driver.find_element(By.ID, "signout").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "form#signin"))
    code, _, _ = http(fx.base + "/dash/api/session", headers={"Cookie": "trainq_dash=" + admin_cookie})
    check(code == 401 and driver.current_url.startswith(fx.base + "/signin"),
          f"sign out: on the sign-in page, the old cookie gets {code}")
    check(any("dashboard: admin token (session" in x and "signed out" in x for x in fx.lines),
          "serve logged the sign-out")
    # The read session again, through the form.
    driver.find_element(By.ID, "token").send_keys(fx.read_token)
    driver.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#experiments tr[data-experiment]"))
    fx.tq("cancel", "--run", str(run_id))
    driver.get(f"{fx.base}/run/{run_id}")
    wait.until(lambda d: "cancelled" in d.find_element(By.ID, "run-state").text)
    check(not driver.find_elements(By.CSS_SELECTOR, "[data-action]"),
          "a read session's run page has no retry button")

    people_checks(fx, driver, wait, js, run_id)

    driver.get(fx.base + "/machines")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.card"))
    # serve exported the finished batches to the fake MLflow server by itself:
    # one parent per batch with a child per seed, and the MLflow card says so.
    mlflow_state = lambda: json.loads(http(fx.mlflow_url + "/fake/state")[2])  # noqa: E731
    wait_for(lambda: sum(1 for r in mlflow_state()["runs"]
                         if r["info"]["run_name"].endswith(" plain")
                         and not any(t["key"] == "mlflow.parentRunId"
                                     for t in r["data"].get("tags", []))) >= 2,
             "serve's MLflow export of the two plain batches", 60)
    st = mlflow_state()
    parents = [r for r in st["runs"] if not any(t["key"] == "mlflow.parentRunId" for t in r["data"].get("tags", []))]
    check(any(e["name"] == "dash/plain" for e in st["experiments"]), "MLflow experiment dash/plain")
    for p in [p for p in parents if p["info"]["run_name"].endswith(" plain")]:
        kids = [r for r in st["runs"] if any(t["key"] == "mlflow.parentRunId" and t["value"] == p["info"]["run_id"]
                                             for t in r["data"].get("tags", []))]
        check(len(kids) == 4, f"MLflow parent {p['info']['run_name']} has a child per seed ({len(kids)})")
    driver.get(fx.base + "/machines")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#mlflow td.num"))
    card_text = driver.find_element(By.ID, "mlflow").text
    check(fx.mlflow_url in card_text and "dash/<experiment>" in card_text and "every repository" in card_text,
          "the MLflow card names the server: " + card_text)
    exported = int(driver.find_elements(By.CSS_SELECTOR, "#mlflow td.num")[0].text)
    check(exported >= 2, f"the MLflow card counts the exported batches ({exported})")
    check("(batch " in card_text, "the MLflow card names the last exported batch")
    shot(driver, "machines")

    # Sweeps: the report's own SVG plots, live, byte for byte what
    # `trainq sweep plot --out` writes.
    driver.get(fx.base + "/sweeps")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.card"))
    sweep = json.loads(fx.tq("sweep", "start", "sw", "--repo", fx.repo, "--json"))
    sweep_id = sweep.get("id") or sweep.get("sweep")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "img.sweep-plot[data-plot='progress.svg']"))
    wait_for(lambda: json.loads(fx.tq("sweep", "status", str(sweep_id), "--json")).get("state") == "done",
             "the sweep to finish", 120)
    plot_dir = os.path.join(fx.tmp, "plots")
    fx.tq("sweep", "plot", str(sweep_id), "--out", plot_dir)
    files = sorted(os.listdir(plot_dir))
    wait.until(lambda d: sorted(e.get_attribute("data-plot") for e in
                                d.find_elements(By.CSS_SELECTOR, "img.sweep-plot")) == files)
    # The page's images follow the sweep: their address changes with its progress.
    src = js("return document.querySelector(\"img.sweep-plot[data-plot='progress.svg']\").src")
    same = True
    for name in files:
        code, headers, body = http(f"{fx.base}/dash/api/sweep/{sweep_id}/{name}",
                                   headers={"Cookie": "trainq_dash=" + driver.get_cookie("trainq_dash")["value"]})
        with open(os.path.join(plot_dir, name)) as f:
            same = same and code == 200 and body == f.read() and \
                headers.get("Content-Type", "").startswith("image/svg+xml")
    check(same and len(files) >= 4, f"the sweeps page shows the report's plots {files}, byte for "
          f"byte `trainq sweep plot`'s, at {src.split('/dash/')[-1]}")
    wait.until(lambda d: all(js("return arguments[0].complete && arguments[0].naturalWidth > 0", e)
                             for e in d.find_elements(By.CSS_SELECTOR, "img.sweep-plot")))
    check(True, "every plot image loaded in the browser")
    code, _, _ = http(f"{fx.base}/dash/api/sweep/{sweep_id}/progress.svg")
    check(code == 401, f"a plot without a session: {code}")
    shot(driver, "sweeps")

    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    check(not errors, "no console errors" + "".join(f"\n  {e['message']}" for e in errors))

    xss_checks(fx, driver, wait, js)


XSS = "<img src=x onerror=alert(1)>"


def xss_checks(fx, driver, wait, js):
    """Text from the store is text on every page: a commit subject, a token's
    name and an address holding markup show as written, and nothing runs
    (every interpolation goes through the `html` template, html.mjs; the
    page's CSP requires Trusted Types). An alert would fail the next command."""
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import UnexpectedAlertPresentException
    sha = fx.commit("0.001", XSS)
    fx.tq("submit", "-e", "plain", "--repo", fx.repo)
    batch = next(b["id"] for b in fx.status()["batches"] if b["commit"] == sha)
    run_id = json.loads(fx.tq("runs", "--batch", str(batch), "--json"))[0]["id"]
    # An admin session, so that the account page lists the tokens (one named XSS).
    sign_in(fx, driver, wait, fx.admin_token, "/account", "form#new-token")
    driver.find_element(By.CSS_SELECTOR, "#new-token input[name=name]").send_keys(XSS)
    driver.find_element(By.CSS_SELECTOR, "#new-token input[name=owner]").send_keys("eve@example.com")
    driver.find_element(By.CSS_SELECTOR, "#new-token button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#made-token pre"))
    # (address, ready when, the markup is on it as text)
    pages = [("/", "#experiments", True), ("/experiment/plain", "svg.history", True),
             (f"/commit/{sha}", "section.batch", True), (f"/run/{run_id}", "#run-state", False),
             ("/machines", "section.card", False), ("/sweeps", "section.card", False),
             ("/account", "tr.token-row", True), ("/audit", "tr.audit-row", False),
             # No such experiment: the server's refusal, in the toast.
             ("/experiment/" + urllib.parse.quote(XSS, safe=""), "#toast:not([hidden])", False)]
    for path, ready, on_page in pages:
        try:
            driver.get(fx.base + path)
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ready))
            imgs = js("return document.querySelectorAll('#main img:not(.sweep-plot), #toast img').length")
            shown = XSS in js("return document.getElementById('main').innerText + "
                              "document.getElementById('toast').innerText")
            errors = [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE" and
                      not (ready.startswith("#toast") and "404" in e["message"])]
            check(imgs == 0 and not errors and (shown or not on_page),
                  f"{path}: markup from the store is text ({'shown as written' if shown else 'not on this page'}), "
                  f"no element made of it, no console errors {errors}")
        except UnexpectedAlertPresentException:
            check(False, f"{path}: the subject's markup ran (an alert)")
    driver.get(fx.base + f"/commit/{sha}")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.batch"))
    shot(driver, "xss-commit")


def check_history(fx, tmp):
    """Chromium's History (written when the browser quits): the addresses
    visited, none with a token (the probe's F9 found `/?token=ADMIN` there)."""
    import sqlite3
    path = os.path.join(tmp, "chromium-profile", "Default", "History")
    if not os.path.exists(path):
        check(False, f"no History file at {path}")
        return
    copy = path + ".copy"
    shutil.copy(path, copy)
    with sqlite3.connect(copy) as db:
        urls = [r[0] for r in db.execute("SELECT url FROM urls")]
    leaked = [u for u in urls if fx.read_token in u or fx.admin_token in u]
    check(urls and not leaked, f"Chromium's History has {len(urls)} addresses, none with a "
          f"token: {leaked}")


def main():
    if len(sys.argv) != 2:
        die(__doc__.strip().splitlines()[-1])
    trainq = os.path.abspath(sys.argv[1])
    if not os.access(trainq, os.X_OK):
        die(f"no trainq binary at {trainq}")
    require_browser()
    tmp = tempfile.mkdtemp(prefix="trainq-dash-")
    fx, driver = Fixture(trainq, tmp), None
    t0 = time.monotonic()
    try:
        fx.build()
        driver = open_browser(tmp)
        run_checks(fx, driver)
        driver.quit()
        driver = None
        check_history(fx, tmp)
        print(f"all in {time.monotonic() - t0:.1f}s", flush=True)
    finally:
        if driver is not None:
            driver.quit()
        fx.stop()
        if failures:
            sys.stdout.write("".join(fx.lines[-40:]))
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        die(f"{failures} check(s) failed")
    print("dashboard_browser_test: all checks passed")


if __name__ == "__main__":
    main()
