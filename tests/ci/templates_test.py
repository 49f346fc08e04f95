#!/usr/bin/env python3
"""Runs the shell steps of ci/templates/*.yml against a real `trainq serve`.

The templates are read with a YAML parser (PyYAML); each job's shell steps
(GitHub `run:`, GitLab `before_script:` + `script:`) run as the hosted runner
would run them: GitHub's `${{ ... }}` expressions substituted from the event,
`vars` and `secrets`, each step with `bash -e`, `$GITHUB_PATH` honoured;
GitLab's lines in one `bash -eo pipefail` shell with the job's variables. The
`trainq` under test is on PATH, as on a runner image that has it (the install
step then only prints its version). `uses:` steps (the artifact upload) cannot
run here; the test checks what they would upload.

The server is a real `trainq serve` on loopback with a real store: a git
repository with a baseline commit, a worse one, a better one and one that ran
nothing, whose runs the server's own local worker executes while the gate
waits.
"""
import argparse
import filecmp
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
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

    def run(self, workdir, base_env):
        log = ""
        github_path = os.path.join(workdir, ".github_path")
        open(github_path, "w").close()
        for step in self.job["steps"]:
            if "uses" in step:
                self.skipped.append(step)
                continue
            env = dict(base_env)
            for scope in (self.doc.get("env") or {}, self.job.get("env") or {}, step.get("env") or {}):
                env.update({k: self.substitute(v) for k, v in scope.items()})
            added = [line for line in open(github_path).read().splitlines() if line]
            env["PATH"] = ":".join(list(reversed(added)) + [base_env["PATH"]])
            env["GITHUB_PATH"] = github_path
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
        env.update(self.variables)
        env.update({k: str(v) for k, v in (self.job.get("variables") or {}).items()})
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
    args = ap.parse_args()
    trainq = os.path.abspath(args.trainq)
    templates = os.path.abspath(args.templates)

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

        try:
            if not wait_for(healthy, 30):
                raise RuntimeError("trainq serve did not come up:\n" +
                                   open(os.path.join(tmp, "serve.log")).read())

            # The runner: trainq on PATH, nothing else of this machine's environment.
            bindir = os.path.join(tmp, "bin")
            os.mkdir(bindir)
            os.symlink(trainq, os.path.join(bindir, "trainq"))
            base_env = {"PATH": bindir + ":/usr/local/bin:/usr/bin:/bin", "HOME": tmp,
                        "LANG": "C.UTF-8"}

            def job_dir(name):
                path = os.path.join(tmp, "jobs", name)
                os.makedirs(path)
                return path

            def github_gate(name, head, base_sha, extra=None):
                context = {"vars.TRAINQ_SERVER": base, "vars.TRAINQ_DOWNLOAD_URL": "",
                           "secrets.TRAINQ_READ_TOKEN": TOKEN, "github.repository": "acme/model",
                           "github.event.pull_request.head.sha": head,
                           "github.event.pull_request.base.sha": base_sha}
                context.update(extra or {})
                job = GitHubJob(os.path.join(templates, "github-gate.yml"), "gate", context)
                return job.run(job_dir(name), base_env)

            def gitlab_gate(name, head, base_sha, extra=None):
                variables = {"TRAINQ_SERVER": base, "TRAINQ_READ_TOKEN": TOKEN,
                             "CI_PIPELINE_SOURCE": "merge_request_event", "CI_COMMIT_SHA": head,
                             "CI_MERGE_REQUEST_DIFF_BASE_SHA": base_sha,
                             "CI_PROJECT_PATH": "acme/model"}
                variables.update(extra or {})
                job = GitLabJob(os.path.join(templates, "gitlab-gate.yml"), "trainq-gate", variables)
                check(job.rules_match(), "gitlab-gate.yml runs on a merge request event")
                return job.run(job_dir(name), base_env)

            # Right away, while the runs are queued or running: --wait holds the
            # job until they end, then the regression fails it.
            for kind, gate in (("github", github_gate), ("gitlab", gitlab_gate)):
                code, log = gate(f"{kind}-worse", b, a)
                check(code == 1, f"{kind} gate: a worse head fails the job with exit 1", log)
                check("significant regression" in log, f"{kind} gate: the log says why", log)
                check("trainq 0.1.0" in log, f"{kind} gate: the install step ran", log)

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

            # The weekly report: the same files as `trainq report --out` on the server.
            expected = os.path.join(tmp, "expected")
            sh(f"{tq} report --since 7d --out {shlex.quote(expected)}")
            github = GitHubJob(os.path.join(templates, "github-weekly-report.yml"), "report",
                               {"vars.TRAINQ_SERVER": base, "vars.TRAINQ_DOWNLOAD_URL": "",
                                "secrets.TRAINQ_READ_TOKEN": TOKEN, "github.run_number": "7"})
            gitlab = GitLabJob(os.path.join(templates, "gitlab-weekly-report.yml"),
                               "trainq-weekly-report",
                               {"TRAINQ_SERVER": base, "TRAINQ_READ_TOKEN": TOKEN,
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
        finally:
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
