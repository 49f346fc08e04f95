#!/usr/bin/env python3
"""Signing in through a door, in a real browser (issue 41): headless Debian
Chromium driven by Selenium against a real `trainq serve --inproc`, with
"Sign in with GitHub" answered by tests/support/fake_forge_login.py (GitHub's
OAuth and REST wire format) and "Sign in with Keycloak" by
tests/support/fake_oidc.py (discovery, JWKS, RS256 ID tokens).

The fixture: two local repositories watched as GitHub's acme/model and
acme/secret; `slow` runs of model (they print until cancelled) and a `hidden`
run of secret. On the forge, `reader` can read acme/model, `octocat` can
write to it, `stranger` sees neither, and nobody here sees acme/secret. The
identity provider puts ops@example.com in the ml-platform group (admins).

Checks, each by clicking what a person clicks:
- the sign-in page shows the two configured doors and not the others
  (screenshot signin-doors.png);
- reader signs in with GitHub and sees the dashboard with model's
  experiment, not secret's (its experiment answers 404); the run page has no
  cancel button, and pressing cancel anyway (the action with the session's
  CSRF token) is refused 403, the run still running, serve logging the refusal;
- sign out ends the session in serve: the old cookie gets 401;
- stranger (no access to any watched repository) and a tampered ID token
  (wrong aud) are refused with a page that says why and grants nothing, no
  session cookie (screenshot signin-refused.png);
- octocat signs in with GitHub, cancels a run by its button; the run page's
  "Who acted on it" and serve's log say `octocat (github)`; the Machines page
  shows no reset button to a write user and the action is refused;
- ops@example.com signs in with Keycloak as an admin, resets the failing pool
  with the Machines page's button (the store's pool_state cleared), and the
  Audit page lists the cancel, the reset, the sign-ins and the refusals
  (screenshots machines-reset.png, audit-people.png);
- the session cookie is HttpOnly and SameSite=Strict, the OAuth cookie
  HttpOnly, SameSite=Lax, on the door's path only; no console errors.
Screenshots (1280x800) go to $TRAINQ_SCREENSHOTS when set.

Usage: signin_browser_test.py TRAINQ_BINARY
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_browser_test import (DEADLINE_S, check, die, failures_count, free_port, http,  # noqa: E402
                                    open_browser, require_browser, sh, shot, wait_for)

SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support")

SLOW_PY = r'''import json, os, sys, time
mf = open(os.environ["TRAINQ_METRICS_FILE"], "a")
for step in range(600):  # two minutes at most, unless cancelled
    print(f"tick {step}", flush=True)
    mf.write(json.dumps({"name": "loss", "value": 1.0 / (step + 1), "step": step}) + "\n")
    mf.flush()
    time.sleep(0.2)
'''

MODEL_YAML = """version: 1
experiments:
  slow:
    command: python3 slow.py --seed {seed}
    repeats: 2
    max_attempts: 1
    baseline: "off"
    metric: {name: accuracy, goal: max}
"""

SECRET_YAML = """version: 1
experiments:
  hidden:
    command: python3 -c "print('accuracy 0.5')"
    repeats: 1
    max_attempts: 1
    baseline: "off"
    metric: {name: accuracy, goal: max, regex: 'accuracy (\\\\S+)'}
"""

FORGE_SECRET = "forge-client-secret-1234"
OIDC_SECRET = "oidc-client-secret-5678"


class Fixture:
    def __init__(self, trainq, tmp):
        self.trainq, self.tmp = trainq, tmp
        self.db = os.path.join(tmp, "t.db")
        self.genv = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                         GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                         GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
        self.lines, self.serve, self.fakes = [], None, []

    def tq(self, *a):
        return sh([self.trainq, "--db", self.db, *a])

    def repo(self, name, files):
        path = os.path.join(self.tmp, name)
        os.makedirs(path)
        sh(["git", "init", "-q", "-b", "main"], cwd=path, env=self.genv)
        for f, text in files.items():
            with open(os.path.join(path, f), "w") as out:
                out.write(text)
        sh(["git", "add", "-A"], cwd=path, env=self.genv)
        sh(["git", "commit", "-qm", "first"], cwd=path, env=self.genv)
        return path

    def fake(self, script, name, config):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
        port_file = os.path.join(d, "port")
        p = subprocess.Popen([sys.executable, os.path.join(SUPPORT, script), "--config",
                              os.path.join(d, "config.json"), "--dir", d, "--port-file", port_file],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "w"))
        self.fakes.append(p)
        port = wait_for(lambda: os.path.exists(port_file) and open(port_file).read().strip(),
                        f"{script}'s port", 20)
        return f"http://127.0.0.1:{port}"

    def configure(self, url, **config):
        code, _, body = http(url + "/_fake/config", "POST", {"Content-Type": "application/json"},
                             json.dumps(config).encode())
        if code != 200:
            die(f"{url}/_fake/config answered {code}: {body}")

    def build(self):
        self.model = self.repo("model", {"slow.py": SLOW_PY, "trainq.yaml": MODEL_YAML})
        self.secret = self.repo("secret", {"trainq.yaml": SECRET_YAML})
        self.tq("submit", "-e", "slow", "--repo", self.model)
        self.tq("submit", "-e", "hidden", "--repo", self.secret)
        runs = json.loads(self.tq("runs", "--json"))
        self.slow_runs = sorted(r["id"] for r in runs if r["experiment"] == "slow")
        # A pool whose boots failed, as the fleet records it (queue/machines.h).
        with sqlite3.connect(self.db) as db:
            db.execute("INSERT INTO pool_state (pool, failed_boots, failing, boot_error, updated_ms) "
                       "VALUES ('gpu', 3, 1, 'the machine''s worker never registered', 1)")
        self.forge = self.fake("fake_forge_login.py", "forge", {
            "forge": "github", "client_id": "Iv1.trainqtest", "client_secret": FORGE_SECRET,
            "as": "reader",
            "users": {"reader": {"acme/model": "read"}, "octocat": {"acme/model": "write"},
                      "owner": {"acme/model": "admin", "acme/secret": "admin"}, "stranger": {}}})
        self.oidc = self.fake("fake_oidc.py", "oidc", {
            "client_id": "trainq", "client_secret": OIDC_SECRET,
            "as": {"sub": "u-ops", "email": "ops@example.com", "groups": ["ml-platform"]}})
        for name, secret in (("forge-secret", FORGE_SECRET), ("oidc-secret", OIDC_SECRET),
                             ("admin", "admintoken-" + "9" * 16)):
            with open(os.path.join(self.tmp, name), "w") as f:
                f.write(secret + "\n")
        cfg = os.path.join(self.tmp, "server.yaml")
        with open(cfg, "w") as f:
            f.write(f"""admin_token: {{file: {self.tmp}/admin}}
repositories:
  - {{url: {self.model}, forge: github, project: acme/model, status: false, catch_up: off}}
  - {{url: {self.secret}, forge: github, project: acme/secret, status: false, catch_up: off}}
auth:
  github: {{client_id: Iv1.trainqtest, client_secret: {{file: {self.tmp}/forge-secret}},
           web_url: {self.forge}, api_url: {self.forge}}}
  oidc: {{issuer: {self.oidc}, client_id: trainq, client_secret: {{file: {self.tmp}/oidc-secret}},
         label: Keycloak, admins: [ml-platform], writers: [ml-writers]}}
""")
        self.port = free_port()
        self.serve = subprocess.Popen(
            [self.trainq, "--db", self.db, "serve", "--inproc", "--slots", "3", "--poll-ms", "50",
             "--config", cfg, "--listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: any("dashboard: " in x for x in self.lines), "serve's dashboard line", 30)
        self.base = f"http://127.0.0.1:{self.port}"

    def _read(self):
        for line in self.serve.stdout:
            self.lines.append(line)

    def run_state(self, run_id):
        return next(r["state"] for r in json.loads(self.tq("runs", "--json")) if r["id"] == run_id)

    def pool_failed_boots(self):
        with sqlite3.connect(self.db) as db:
            row = db.execute("SELECT failed_boots, failing FROM pool_state WHERE pool = 'gpu'").fetchone()
        return row

    def stop(self):
        for p in self.fakes:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
        if self.serve and self.serve.poll() is None:
            self.serve.terminate()
            try:
                self.serve.wait(20)
            except subprocess.TimeoutExpired:
                self.serve.kill()


def door(fx, driver, wait, button, ready_css):
    """From the sign-in page, the door's button, as a person would."""
    from selenium.webdriver.common.by import By
    driver.get(fx.base + "/signin")
    wait.until(lambda d: d.find_element(By.ID, button).is_displayed())
    driver.find_element(By.ID, button).click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ready_css))


def sign_out(fx, driver, wait, who):
    from selenium.webdriver.common.by import By
    cookie = driver.get_cookie("trainq_dash")["value"]
    wait.until(lambda d: d.find_element(By.ID, "signout").is_displayed())
    driver.find_element(By.ID, "signout").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "form#signin"))
    code, _, _ = http(fx.base + "/dash/api/session", headers={"Cookie": "trainq_dash=" + cookie})
    check(code == 401 and driver.get_cookie("trainq_dash") is None,
          f"{who} signed out: the session ended in serve (the old cookie gets {code})")


def press(driver, js, css):
    """Clicks a button whose click asks first (window.confirm), and says yes."""
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
    js(f"setTimeout(() => document.querySelector({json.dumps(css)}).click(), 0)")
    alert = WebDriverWait(driver, DEADLINE_S).until(EC.alert_is_present())
    text = alert.text
    alert.accept()
    return text


# The dashboard's own request for an action, with the session's CSRF token:
# what the button sends (app.mjs), sent where the page shows no button.
ACT_JS = """const done = arguments[arguments.length - 1];
(async () => {
  const s = await (await fetch('/dash/api/session')).json();
  const r = await fetch('/dash/api/action', {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf}, body: JSON.stringify(arguments[0])});
  done([r.status, await r.text()]);
})().catch(e => done([0, String(e)]));"""


# The audit rows' text, read at once (the page may redraw between reads).
ROWS_JS = "return [...document.querySelectorAll('tr.audit-row')].map(r => r.innerText)"


def run_checks(fx, driver):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    # The pages redraw as serve's data changes: an element read mid-redraw
    # is read again.
    wait = WebDriverWait(driver, DEADLINE_S, ignored_exceptions=(StaleElementReferenceException,))
    js = driver.execute_script
    run1, run2 = fx.slow_runs
    wait_for(lambda: fx.run_state(run1) == "running" and fx.run_state(run2) == "running",
             "both slow runs running", 60)

    # The sign-in page: the configured doors only.
    driver.get(fx.base + "/signin")
    wait.until(lambda d: d.find_element(By.ID, "github").is_displayed())
    shown = {b: driver.find_element(By.ID, b).is_displayed() for b in ("github", "gitlab", "gitea", "oidc")}
    check(shown == {"github": True, "gitlab": False, "gitea": False, "oidc": True} and
          driver.find_element(By.ID, "oidc").text == "Sign in with Keycloak",
          f"the sign-in page shows the configured doors: {shown}")
    shot(driver, "signin-doors")

    # reader: read on acme/model by the forge alone.
    fx.configure(fx.forge, **{"as": "reader"})
    door(fx, driver, wait, "github", "#experiments tr[data-experiment]")
    check(driver.current_url == fx.base + "/", f"after GitHub, the dashboard: {driver.current_url}")
    wait.until(lambda d: "reader (github) (read)" in d.find_element(By.ID, "role").text)
    check(True, "the header names the person and the role: reader (github) (read)")
    session = driver.get_cookie("trainq_dash")
    check(session["httpOnly"] and session.get("sameSite") == "Strict" and not session["secure"],
          f"the session cookie is HttpOnly, SameSite=Strict (not Secure on http): {session}")
    exps = [e.get_attribute("data-experiment") for e in
            driver.find_elements(By.CSS_SELECTOR, "#experiments tr[data-experiment]")]
    check(exps == ["slow"], f"reader sees acme/model's experiment, not acme/secret's: {exps}")
    code = driver.execute_async_script(
        "const done = arguments[0]; fetch('/dash/api/experiment/hidden').then(r => done(r.status));")
    check(code == 404, f"acme/secret's experiment answers reader 404: {code}")
    driver.get(f"{fx.base}/run/{run2}")
    wait.until(lambda d: "running" in d.find_element(By.ID, "run-state").text)
    check(not driver.find_elements(By.CSS_SELECTOR, "[data-action]"), "a read person's run page has no cancel button")
    status, body = driver.execute_async_script(ACT_JS, {"action": "cancel_run", "run": run2})
    check(status == 403 and "actions need a write role (reader (github) is read)" in body,
          f"reader pressing cancel anyway is refused: {status} {body}")
    check(fx.run_state(run2) == "running", "the run is still running")
    check(any("dashboard: reader (github) (read) was refused an action" in x for x in fx.lines),
          "serve logged the refusal by name")
    sign_out(fx, driver, wait, "reader")

    # Refused at the door: no access to any watched repository; a tampered ID token.
    fx.configure(fx.forge, **{"as": "stranger"})
    door(fx, driver, wait, "github", "#refused")
    text = driver.find_element(By.TAG_NAME, "body").text
    check("Sign-in refused" in text and "no access to any repository" in text and
          "Nothing was granted." in text and driver.get_cookie("trainq_dash") is None,
          f"stranger is refused with a page that says why, and no session: {text[:200]!r}")
    fx.configure(fx.oidc, tamper="aud")
    door(fx, driver, wait, "oidc", "#refused")
    text = driver.find_element(By.TAG_NAME, "body").text
    check("Sign-in refused" in text and "Nothing was granted." in text and
          driver.get_cookie("trainq_dash") is None,
          f"an ID token for another audience is refused, no session: {text[:200]!r}")
    shot(driver, "signin-refused")
    check(any("a sign-in from 127.0.0.1 was refused" in x and "aud" in x for x in fx.lines),
          "serve logged the refused ID token and why")

    # octocat: write on acme/model; cancels a run by its button.
    fx.configure(fx.forge, **{"as": "octocat"})
    door(fx, driver, wait, "github", "#experiments tr[data-experiment]")
    driver.get(f"{fx.base}/run/{run1}")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "button[data-action='cancel_run']"))
    asked = press(driver, js, "button[data-action='cancel_run']")
    check(asked.startswith(f"cancel run {run1} (slow seed"), f"cancel asks first: {asked!r}")
    wait.until(lambda d: "cancelled" in d.find_element(By.ID, "run-state").text)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.audit-row"))
    rows = js(ROWS_JS)
    check("octocat (github)" in rows[0] and "cancel run" in rows[0],
          f"the run page says who cancelled it: {rows}")
    check(any(f"dashboard: octocat (github) cancelled run {run1}" in x for x in fx.lines),
          "serve logged octocat's cancel by name")
    driver.get(fx.base + "/machines")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.card"))
    wait.until(lambda d: "never registered" in d.find_element(By.ID, "main").text)
    check("failing" in js("return document.getElementById('main').innerText"),
          "the Machines page marks the pool failing")
    check(not driver.find_elements(By.CSS_SELECTOR, "[data-action='reset_pool']"),
          "a write person sees no reset button on the failing pool")
    status, body = driver.execute_async_script(ACT_JS, {"action": "reset_pool", "pool": "gpu"})
    check(status == 403 and "needs an admin role" in body and fx.pool_failed_boots() == (3, 1),
          f"a write person's reset is refused, the pool unchanged: {status} {body}")
    sign_out(fx, driver, wait, "octocat")

    # ops@example.com: an admin by the identity provider's group.
    fx.configure(fx.oidc, **{"as": {"sub": "u-ops", "email": "ops@example.com", "groups": ["ml-platform"]}})
    door(fx, driver, wait, "oidc", "#experiments tr[data-experiment]")
    wait.until(lambda d: "ops@example.com (oidc) (admin)" in d.find_element(By.ID, "role").text)
    check(driver.find_element(By.ID, "nav-audit").is_displayed(), "an admin sees the Audit link")
    driver.get(fx.base + "/machines")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "button[data-action='reset_pool']"))
    shot(driver, "machines-reset")
    asked = press(driver, js, "button[data-action='reset_pool']")
    check(asked == "reset pool gpu: forget its 3 failed boots and let it boot again?",
          f"reset asks first, with what it does: {asked!r}")
    wait_for(lambda: fx.pool_failed_boots() == (0, 0), "the pool's failed boots forgotten", 10)
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "button[data-action='reset_pool']"))
    check(True, "the admin's reset cleared the pool, and the button went")
    check(any("dashboard: ops@example.com (oidc) reset pool gpu (3 failed boot(s) forgotten)" in x
              for x in fx.lines), "serve logged the reset by name")

    driver.get(fx.base + "/audit")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.audit-row")) >= 5)
    texts = js(ROWS_JS)
    want = {"the reset": lambda t: "ops@example.com (oidc)" in t and "pool gpu" in t,
            "the cancel": lambda t: "octocat (github)" in t and "cancel run" in t,
            "reader's sign-in": lambda t: "reader (github)" in t and "login" in t,
            "the refused sign-ins": lambda t: "login failed" in t and "aud" in t}
    missing = [k for k, f in want.items() if not any(f(t) for t in texts)]
    check(not missing, f"the audit page lists who did what: missing {missing} in {texts[:8]}")
    shot(driver, "audit-people")
    sign_out(fx, driver, wait, "ops@example.com")

    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE" and
              "403" not in e["message"] and "404" not in e["message"]]
    check(not errors, "no console errors" + "".join(f"\n  {e['message']}" for e in errors))
    check(not any(FORGE_SECRET in x or OIDC_SECRET in x for x in fx.lines),
          "neither client secret is in serve's log")
    fx.tq("cancel", "--run", str(run2))


def main():
    if len(sys.argv) != 2:
        die(__doc__.strip().splitlines()[-1])
    trainq = os.path.abspath(sys.argv[1])
    if not os.access(trainq, os.X_OK):
        die(f"no trainq binary at {trainq}")
    require_browser()
    tmp = tempfile.mkdtemp(prefix="trainq-signin-")
    fx, driver = Fixture(trainq, tmp), None
    t0 = time.monotonic()
    try:
        fx.build()
        driver = open_browser(tmp)
        run_checks(fx, driver)
        print(f"all in {time.monotonic() - t0:.1f}s", flush=True)
    finally:
        if driver is not None:
            driver.quit()
        fx.stop()
        if failures_count():
            sys.stdout.write("".join(fx.lines[-60:]))
        shutil.rmtree(tmp, ignore_errors=True)
    if failures_count():
        die(f"{failures_count()} check(s) failed")
    print("signin_browser_test: all checks passed")


if __name__ == "__main__":
    main()
