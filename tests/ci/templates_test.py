#!/usr/bin/env python3
"""Runs the shell steps of ci/templates/*.yml against a real `trainq serve`.

The templates are read with a YAML parser (PyYAML); each job's shell steps
(GitHub `run:`, GitLab `before_script:` + `script:`) run as the hosted runner
would run them: GitHub's `${{ ... }}` expressions substituted from the event,
`vars` and `secrets`, each step with `bash -e`, `$GITHUB_PATH` honoured;
GitLab's lines in one `bash -eo pipefail` shell with the job's variables
(project variables over the job's `variables:`, as GitLab orders them). The
install step runs for real: it fetches the archive of ci/client-artifact over
HTTP from loopback (TRAINQ_DOWNLOAD_URL), installs the listed Debian packages
with apt-get (already installed on this machine, so nothing is downloaded;
APT::Get::Upgrade is off so that apt-get does not upgrade them) and unpacks
trainq into the job's own prefix (TRAINQ_PREFIX). The runner's PATH has no
trainq. `uses:` steps (the artifact upload) cannot run here; the test checks
what they would upload. A pull request from a fork, without the secret, is
skipped with a notice; nginx with ci/templates/nginx-trainq.conf in front of
the server passes the gate and the report and refuses everything else.

The server is a real `trainq serve` on loopback with a real store: a git
repository with a baseline commit, a worse one, a better one and one that ran
nothing, whose runs the server's own local worker executes while the gate
waits.
"""
import argparse
import filecmp
import functools
import glob
import http.server
import os
import re
import shlex
import socket
import subprocess
import sys
import shutil
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request

import yaml

TOKEN = "templates-test-read-token"

TRAINQ_YAML = """version: 1
defaults:
  repeats: 4
  max_attempts: 1
experiments:
  digits:
    command: python3 train.py --seed {seed}
    watch: [train.py, level.txt]
"""

# accuracy = level + seed / 1000: the commit decides the level, the seed the noise.
TRAIN_PY = """import json, os, sys
seed = int(sys.argv[sys.argv.index("--seed") + 1])
level = float(open("level.txt").read())
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": level + seed / 1000, "final": True}) + "\\n")
"""

SKIP = 77
failures = []


def check(ok, what, log=""):
    if ok:
        print("ok   " + what)
    else:
        print("FAIL " + what + ("\n" + log if log else ""))
        failures.append(what)


def wait_for(condition, deadline_s):
    """Polls `condition` until it holds or the deadline passes (tests/support's WaitFor)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def sh(cmd, cwd=None, env=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, shell=True, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout.strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ArtifactServer:
    """A directory served over HTTP on loopback (where TRAINQ_DOWNLOAD_URL points)."""

    def __init__(self, directory):
        handler = functools.partial(Quiet, directory=directory)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def apt_config(tmp):
    """apt-get as on this machine, but never upgrading an installed package
    (apt-get install --no-upgrade), so the install step downloads nothing."""
    path = os.path.join(tmp, "apt.conf")
    with open(path, "w") as f:
        f.write('APT::Get::Upgrade "false";\nDPkg::Lock::Timeout "120";\n')
    return path


def http_get(url, method="GET", body=None, headers=None):
    """(status, body) of one request; an HTTP error status is an answer too."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def proxy_checks(tmp, templates, serve_port, github_gate, worse, base_sha, better):
    """nginx with the example site in front of `trainq serve`: the gate passes
    through it, the routes hosted CI does not need are refused by nginx."""
    nginx = shutil.which("nginx", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not nginx:
        check(False, "nginx is installed (ci/install-deps: nginx-light)")
        return
    root = os.path.join(tmp, "nginx")
    os.makedirs(os.path.join(root, "logs"))
    port = free_port()
    site = open(os.path.join(templates, "nginx-trainq.conf")).read()
    # Here: plain HTTP on loopback (no certificate), the server on its test port.
    check("listen 443 ssl;" in site and "127.0.0.1:8080" in site,
          "nginx-trainq.conf listens on 443 with TLS in front of 127.0.0.1:8080")
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{port};")
    site = site.replace("127.0.0.1:8080", f"127.0.0.1:{serve_port}")
    site = "\n".join(l for l in site.splitlines() if not l.strip().startswith("ssl_"))
    with open(os.path.join(root, "site.conf"), "w") as f:
        f.write(site)
    with open(os.path.join(root, "nginx.conf"), "w") as f:
        f.write(f"daemon off;\nuser root root;\npid {root}/nginx.pid;\nerror_log {root}/logs/error.log;\n"
                "events {}\nhttp {\n"
                f"  access_log {root}/logs/access.log;\n"
                + "".join(f"  {k}_temp_path {root}/{k};\n" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
                + f"  include {root}/site.conf;\n}}\n")
    proc = subprocess.Popen([nginx, "-p", root, "-c", os.path.join(root, "nginx.conf")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proxy = f"http://127.0.0.1:{port}"
    try:
        def up():
            try:
                return http_get(proxy + "/")[0] == 404
            except OSError:
                return False
        if not wait_for(lambda: up() or proc.poll() is not None, 30) or proc.poll() is not None:
            check(False, "nginx starts with the example site", proc.stdout.read() if
                  proc.poll() is not None else open(os.path.join(root, "logs/error.log")).read())
            return
        code, log = github_gate("proxy-better", better, base_sha, {"vars.TRAINQ_SERVER": proxy})
        check(code == 0, "through nginx: the gate passes a better head", log)
        code, log = github_gate("proxy-worse", worse, base_sha, {"vars.TRAINQ_SERVER": proxy})
        check(code == 1, "through nginx: the gate fails a worse head", log)
        status, body = http_get(proxy + "/api/v1/report?since=7d",
                                headers={"Authorization": "Bearer " + TOKEN})
        check(status == 200, "through nginx: GET /api/v1/report with the token", body[:300])
        status, body = http_get(proxy + "/api/v1/gate?commit=x")
        check(status == 401 and body.startswith("{"),
              "through nginx: /api/v1/gate without the token is the server's 401", body[:300])
        status, body = http_get(proxy + "/hooks/github", "POST", b"{}",
                                {"Content-Type": "application/json",
                                 "X-GitHub-Event": "push"})
        check(body.lstrip().startswith("{") and "nginx" not in body,
              f"through nginx: /hooks/github reaches the server (its JSON answer: {status} "
              f"{body[:200]})")
        for method, path in (("GET", "/api/v1/status"), ("GET", "/metrics"), ("GET", "/healthz"),
                             ("POST", "/api/v1/workers/register"), ("GET", "/api/v1/runs/1/log"),
                             ("GET", "/")):
            status, body = http_get(proxy + path, method, b"{}" if method == "POST" else None)
            check(status == 404 and "nginx" in body,
                  f"through nginx: {method} {path} is refused by nginx (404)", f"{status} {body[:200]}")
        direct = http_get(f"http://127.0.0.1:{serve_port}/api/v1/status",
                          headers={"Authorization": "Bearer " + TOKEN})[0]
        check(direct == 200,
              "the server itself still answers /api/v1/status with the read token (to the inside)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class GitHubJob:
    """One job of a GitHub Actions workflow, run step by step."""

    EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

    def __init__(self, path, job, context):
        self.doc = yaml.safe_load(open(path))
        self.job = self.doc["jobs"][job]
        self.context = context
        self.skipped = []

    def value(self, expr):
        # `a || 'default'`: the first operand that is set and not empty.
        for operand in expr.split("||"):
            operand = operand.strip()
            if operand.startswith("'") and operand.endswith("'"):
                return operand[1:-1]
            if not re.fullmatch(r"[A-Za-z_][\w.]*", operand):
                raise ValueError(f"expression not understood by the test: {expr}")
            root = operand.split(".")[0]
            if operand not in self.context and root not in ("vars", "secrets"):
                raise ValueError(f"unknown context value {operand} (a typo in the template?)")
            if self.context.get(operand):
                return self.context[operand]
        return ""

    def substitute(self, text):
        return self.EXPR.sub(lambda m: self.value(m.group(1)), str(text))

    def condition(self, expr, github_env):
        """A step's `if:`; only `env.NAME == 'value'` and `!=` are understood."""
        m = re.fullmatch(r"\s*env\.(\w+)\s*(==|!=)\s*'([^']*)'\s*", expr)
        if not m:
            raise ValueError(f"if: not understood by the test: {expr}")
        equal = github_env.get(m.group(1), "") == m.group(3)
        return equal if m.group(2) == "==" else not equal

    def run(self, workdir, base_env):
        log = ""
        github_path = os.path.join(workdir, ".github_path")
        github_env_file = os.path.join(workdir, ".github_env")
        open(github_path, "w").close()
        open(github_env_file, "w").close()
        for step in self.job["steps"]:
            github_env = dict(line.split("=", 1) for line in
                              open(github_env_file).read().splitlines() if "=" in line)
            if "if" in step and not self.condition(step["if"], github_env):
                log += f"## {step.get('name', 'step')}: skipped (if: {step['if']})\n"
                continue
            if "uses" in step:
                self.skipped.append(step)
                continue
            env = dict(base_env)
            env.update(github_env)
            for scope in (self.doc.get("env") or {}, self.job.get("env") or {}, step.get("env") or {}):
                env.update({k: self.substitute(v) for k, v in scope.items()})
            added = [line for line in open(github_path).read().splitlines() if line]
            env["PATH"] = ":".join(list(reversed(added)) + [base_env["PATH"]])
            env["GITHUB_PATH"] = github_path
            env["GITHUB_ENV"] = github_env_file
            script = os.path.join(workdir, ".step.sh")
            with open(script, "w") as f:
                f.write(self.substitute(step["run"]))
            r = subprocess.run(["bash", "-e", script], cwd=workdir, env=env, capture_output=True,
                               text=True)
            log += f"## {step.get('name', 'step')}\n{r.stdout}{r.stderr}"
            if r.returncode != 0:
                return r.returncode, log
        return 0, log


class GitLabJob:
    """One job of a GitLab CI file: before_script and script in one shell."""

    def __init__(self, path, job, variables):
        self.doc = yaml.safe_load(open(path))
        self.job = self.doc[job]
        self.variables = variables

    def rules_match(self):
        for rule in self.job.get("rules", []):
            clauses = rule["if"].split("&&")
            ok = True
            for c in clauses:
                m = re.fullmatch(r'\s*\$(\w+)\s*==\s*"([^"]*)"\s*', c)
                if not m:
                    raise ValueError(f"rule not understood by the test: {rule['if']}")
                ok = ok and self.variables.get(m.group(1)) == m.group(2)
            if ok:
                return True
        return not self.job.get("rules")

    def run(self, workdir, base_env):
        env = dict(base_env)
        env.update({k: str(v) for k, v in (self.job.get("variables") or {}).items()})
        env.update(self.variables)  # project variables win over the job's
        lines = list(self.job.get("before_script", [])) + list(self.job["script"])
        script = os.path.join(workdir, ".job.sh")
        with open(script, "w") as f:
            f.write("set -eo pipefail\n" + "\n".join(lines) + "\n")
        r = subprocess.run(["bash", script], cwd=workdir, env=env, capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainq", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--artifact-dir", required=True, help="where ci/client-artifact wrote its archive")
    args = ap.parse_args()
    trainq = os.path.abspath(args.trainq)
    templates = os.path.abspath(args.templates)
    archives = glob.glob(os.path.join(args.artifact_dir, "trainq-client-*.tar.gz"))
    if len(archives) != 1:
        print(f"FAIL one archive from ci/client-artifact in {args.artifact_dir}: {archives}")
        return 1
    if os.geteuid() != 0:
        print("skipped: the install step runs apt-get, which needs root (CI runs as root)")
        return SKIP
    runtime = tarfile.open(archives[0]).extractfile("share/trainq/runtime-packages").read().decode()
    absent = [p for p in runtime.split() + ["ca-certificates", "curl"]
              if "install ok installed" not in subprocess.run(
                  ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout]
    if absent:
        print(f"FAIL packages the install step needs are not installed here: {absent} "
              "(ci/install-deps installs them; the test downloads nothing)")
        return 1

    with tempfile.TemporaryDirectory(prefix="trainq-templates-") as tmp:
        # The repository: A the baseline on main; B worse, C better, D touches nothing.
        origin = os.path.join(tmp, "origin.git")
        work = os.path.join(tmp, "work")
        git_env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                       GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
        sh(f"git init -q --bare -b main {shlex.quote(origin)}")
        sh(f"git init -q -b main {shlex.quote(work)}")

        def commit(files, message):
            for name, text in files.items():
                with open(os.path.join(work, name), "w") as f:
                    f.write(text)
            sh(f"git add -A && git commit -q -m {shlex.quote(message)}", cwd=work, env=git_env)
            return sh("git rev-parse HEAD", cwd=work)

        a = commit({"trainq.yaml": TRAINQ_YAML, "train.py": TRAIN_PY, "level.txt": "0.90\n",
                    "README": "x\n"}, "baseline")
        b = commit({"level.txt": "0.80\n"}, "worse")
        c = commit({"level.txt": "0.95\n"}, "better")
        d = commit({"README": "y\n"}, "readme only")
        sh(f"git push -q {shlex.quote(origin)} main", cwd=work, env=git_env)

        db = os.path.join(tmp, "trainq.db")
        tq = f"{shlex.quote(trainq)} --db {shlex.quote(db)}"
        for sha in (a, b, c):
            sh(f"{tq} submit --repo {shlex.quote(work)} --commit {sha}")

        # The server: a read token from its environment, the repository by its project.
        config = os.path.join(tmp, "server.yaml")
        with open(config, "w") as f:
            f.write("read_token: {env: TEMPLATES_TEST_READ_TOKEN}\n"
                    f"repositories:\n  - url: file://{origin}\n    project: acme/model\n")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        serve_log = open(os.path.join(tmp, "serve.log"), "w")
        serve = subprocess.Popen(
            [trainq, "--db", db, "serve", "--config", config, "--listen", f"127.0.0.1:{port}",
             "--slots", "2", "--data-dir", os.path.join(tmp, "data")],
            cwd=tmp, stdout=serve_log, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, TEMPLATES_TEST_READ_TOKEN=TOKEN))

        def healthy():
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1) as r:
                    return r.status == 200
            except OSError:
                return False

        download = None
        try:
            if not wait_for(healthy, 30):
                raise RuntimeError("trainq serve did not come up:\n" +
                                   open(os.path.join(tmp, "serve.log")).read())

            # The archive, served on loopback as a download site would.
            download = ArtifactServer(os.path.dirname(archives[0]))
            url = download.url + os.path.basename(archives[0])
            # The runner: no trainq anywhere on PATH; the install step brings it.
            base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8",
                        "APT_CONFIG": apt_config(tmp)}
            check(shutil.which("trainq", path=base_env["PATH"]) is None,
                  "the runner's PATH has no trainq before the install step")

            def job_dir(name):
                path = os.path.join(tmp, "jobs", name)
                os.makedirs(path)
                return path

            def github_gate(name, head, base_sha, extra=None):
                workdir = job_dir(name)
                context = {"vars.TRAINQ_SERVER": base, "vars.TRAINQ_DOWNLOAD_URL": url,
                           "vars.TRAINQ_PREFIX": os.path.join(workdir, "prefix"),
                           "secrets.TRAINQ_READ_TOKEN": TOKEN, "github.repository": "acme/model",
                           "github.event.pull_request.head.repo.full_name": "acme/model",
                           "github.event.pull_request.head.sha": head,
                           "github.event.pull_request.base.sha": base_sha}
                context.update(extra or {})
                job = GitHubJob(os.path.join(templates, "github-gate.yml"), "gate", context)
                return job.run(workdir, base_env)

            def gitlab_gate(name, head, base_sha, extra=None):
                workdir = job_dir(name)
                variables = {"TRAINQ_SERVER": base, "TRAINQ_READ_TOKEN": TOKEN,
                             "TRAINQ_DOWNLOAD_URL": url,
                             "TRAINQ_PREFIX": os.path.join(workdir, "prefix"),
                             "CI_PIPELINE_SOURCE": "merge_request_event", "CI_COMMIT_SHA": head,
                             "CI_MERGE_REQUEST_DIFF_BASE_SHA": base_sha,
                             "CI_MERGE_REQUEST_PROJECT_PATH": "acme/model",
                             "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "acme/model",
                             "CI_PROJECT_PATH": "acme/model"}
                variables.update(extra or {})
                job = GitLabJob(os.path.join(templates, "gitlab-gate.yml"), "trainq-gate", variables)
                check(job.rules_match(), "gitlab-gate.yml runs on a merge request event")
                return job.run(workdir, base_env)

            # Right away, while the runs are queued or running: --wait holds the
            # job until they end, then the regression fails it.
            for kind, gate in (("github", github_gate), ("gitlab", gitlab_gate)):
                code, log = gate(f"{kind}-worse", b, a)
                check(code == 1, f"{kind} gate: a worse head fails the job with exit 1", log)
                check("significant regression" in log, f"{kind} gate: the log says why", log)
                check("trainq 0.1.0" in log, f"{kind} gate: the install step ran", log)
                check(os.path.exists(os.path.join(tmp, "jobs", f"{kind}-worse", "prefix", "bin",
                                                  "trainq")),
                      f"{kind} gate: trainq was unpacked into the job's TRAINQ_PREFIX")

                code, log = gate(f"{kind}-better", c, a)
                check(code == 0, f"{kind} gate: a better head passes", log)
                check("no significant regression" in log, f"{kind} gate: the log says so", log)

                wait = {"vars.TRAINQ_GATE_WAIT": "5s"} if kind == "github" else {
                    "TRAINQ_GATE_WAIT": "5s"}
                code, log = gate(f"{kind}-undecided", d, a, wait)
                check(code == 3, f"{kind} gate: a head without runs is undecided: exit 3", log)
                check("undecided" in log, f"{kind} gate: the log says undecided", log)

                bad = {"secrets.TRAINQ_READ_TOKEN": "guess"} if kind == "github" else {
                    "TRAINQ_READ_TOKEN": "guess"}
                code, log = gate(f"{kind}-token", c, a, bad)
                check(code == 2, f"{kind} gate: a wrong token fails the job with exit 2", log)
                check("HTTP 401" in log, f"{kind} gate: the log names the 401", log)
                check(TOKEN not in log, f"{kind} gate: the token is not in the log", log)

            # A pull request from a fork gets no secrets: skipped with a notice, exit 0,
            # nothing installed. The same empty token on the repository's own
            # branch is a misconfiguration and still fails.
            code, log = github_gate("github-fork", c, a, {
                "secrets.TRAINQ_READ_TOKEN": "",
                "github.event.pull_request.head.repo.full_name": "someone/model"})
            check(code == 0 and "::notice::trainq gate skipped: this pull request comes from "
                  "the fork someone/model" in log, "github gate: a fork PR is skipped with a notice",
                  log)
            check("trainq 0.1.0" not in log and "Install trainq: skipped" in log,
                  "github gate: a fork PR installs nothing", log)
            code, log = github_gate("github-no-token", c, a, {"secrets.TRAINQ_READ_TOKEN": ""})
            check(code == 2, "github gate: an empty token on a same-repository PR fails (exit 2)",
                  log)
            code, log = gitlab_gate("gitlab-fork", c, a, {
                "TRAINQ_READ_TOKEN": "", "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "someone/model"})
            check(code == 0 and "trainq gate skipped: this merge request comes from the fork "
                  "someone/model" in log and "trainq 0.1.0" not in log,
                  "gitlab gate: a fork MR is skipped with a message", log)

            # The weekly report: the same files as `trainq report --out` on the server.
            expected = os.path.join(tmp, "expected")
            sh(f"{tq} report --since 7d --out {shlex.quote(expected)}")
            github = GitHubJob(os.path.join(templates, "github-weekly-report.yml"), "report",
                               {"vars.TRAINQ_SERVER": base, "vars.TRAINQ_DOWNLOAD_URL": url,
                                "vars.TRAINQ_PREFIX": os.path.join(tmp, "report-prefix-github"),
                                "secrets.TRAINQ_READ_TOKEN": TOKEN, "github.run_number": "7"})
            gitlab = GitLabJob(os.path.join(templates, "gitlab-weekly-report.yml"),
                               "trainq-weekly-report",
                               {"TRAINQ_SERVER": base, "TRAINQ_READ_TOKEN": TOKEN,
                                "TRAINQ_DOWNLOAD_URL": url,
                                "TRAINQ_PREFIX": os.path.join(tmp, "report-prefix-gitlab"),
                                "CI_PIPELINE_SOURCE": "schedule", "TRAINQ_REPORT": "1",
                                "CI_PIPELINE_ID": "7"})
            check(gitlab.rules_match(), "gitlab-weekly-report.yml runs on the weekly schedule")
            for kind, job, artifact in (
                    ("github", github, lambda: github.skipped[0]["with"]["path"]),
                    ("gitlab", gitlab, lambda: gitlab.job["artifacts"]["paths"][0])):
                workdir = job_dir(f"{kind}-report")
                code, log = job.run(workdir, base_env)
                check(code == 0, f"{kind} weekly report: the job passes", log)
                kept = os.path.join(workdir, artifact().rstrip("/"))
                files = ["report.md", "report.html", "report.json", "runs.csv"]
                match, mismatch, errors = filecmp.cmpfiles(expected, kept, files, shallow=False)
                check(match == files, f"{kind} weekly report: the artifact holds the server's "
                      f"report byte for byte (differ: {mismatch}, missing: {errors})", log)
                check("3 batches, 12 runs, 1 experiment(s)" in log,
                      f"{kind} weekly report: the log has the summary", log)
            check(github.skipped and github.skipped[0]["uses"].startswith("actions/upload-artifact"),
                  "github weekly report: the report is uploaded as an artifact")

            # nginx in front of the server, as ci/templates/nginx-trainq.conf has it.
            proxy_checks(tmp, templates, port, github_gate, b, a, c)
        finally:
            if download:
                download.close()
            os.killpg(serve.pid, 15)
            serve.wait(timeout=60)
            serve_log.close()
        if failures:
            print(open(os.path.join(tmp, "serve.log")).read())
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
