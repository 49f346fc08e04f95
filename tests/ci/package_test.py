#!/usr/bin/env python3
"""The Debian package built by ci/package, installed on this machine for real.

As root (CI): `dpkg -i` of the .deb, then checks what it installed (the
binaries in /usr/bin, the unit that `systemd-analyze verify` passes, the
`trainq` user that postinst made, /etc/trainq/server.yaml readable by it) and
runs a `trainer:` experiment from the installed paths only: a real git
repository, `trainq submit` and `trainq serve --config /etc/trainq/server.yaml
--until-idle` as the `trainq` user with PATH=/usr/bin:/bin, whose worker
finds trainq-train beside itself. Then `dpkg -r` and the files are gone.
A machine where trainq is already installed is left alone (skipped), as is a
build without trainq-train.
"""
import argparse
import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile

SKIP = 77
failures = []

TRAINQ_YAML = """version: 1
defaults:
  repeats: 2
  max_attempts: 1
experiments:
  iris:
    trainer: configs/iris_mlp.yaml
    watch: [configs/**, data/**]
"""


def check(ok, what, log=""):
    if ok:
        print("ok   " + what)
    else:
        print("FAIL " + what + ("\n" + log if log else ""))
        failures.append(what)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def installed(package):
    r = run(["dpkg-query", "-W", "-f=${Status}", package])
    return r.returncode == 0 and "install ok installed" in r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    source = os.path.abspath(args.source_dir)
    build = os.path.abspath(args.build_dir)
    if os.geteuid() != 0:
        print("skipped: installing a package needs root (CI runs as root)")
        return SKIP
    if not os.path.exists(os.path.join(build, "agent", "trainq-train")):
        print("skipped: this build has no trainq-train (TRAINQ_BUILD_TRAINER=OFF or no libtorch)")
        return SKIP
    if installed("trainq"):
        print("skipped: a trainq package is installed on this machine; not replacing it")
        return SKIP

    out = tempfile.mkdtemp(prefix="trainq-package-")
    try:
        r = run([os.path.join(source, "ci", "package")],
                env=dict(os.environ, BUILD_DIR=build, OUT_DIR=out))
        check(r.returncode == 0, "ci/package builds the .deb", r.stdout + r.stderr)
        debs = glob.glob(os.path.join(out, "trainq_*.deb"))
        if len(debs) != 1:
            check(False, f"one .deb in {out}: {debs}")
            return 1
        deb = debs[0]
        print(r.stdout.strip())
        depends = run(["dpkg-deb", "--field", deb, "Depends"]).stdout
        for dep in ("adduser", "bubblewrap", "libgit2-1.5", "libnlopt0", "libtorch"):
            check(dep in depends, f"Depends names {dep}", depends)
        contents = run(["dpkg-deb", "--contents", deb]).stdout
        for path in ("./usr/bin/trainq\n", "./usr/bin/trainq-train\n",
                     "./usr/lib/systemd/system/trainq.service\n",
                     "./usr/share/bash-completion/completions/trainq\n",
                     "./usr/share/man/man1/trainq-serve.1\n", "./usr/share/trainq/server.yaml\n"):
            check(path.rstrip() in contents, f"the package holds {path.strip()}", contents)

        r = run(["dpkg", "-i", deb])
        check(r.returncode == 0, "dpkg -i installs it", r.stdout + r.stderr)
        try:
            user = pwd.getpwnam("trainq") if run(["getent", "passwd", "trainq"]).stdout else None
            check(user is not None, "postinst made the trainq user")
            if user is None:
                return 1
            check(user.pw_dir == "/var/lib/trainq" and user.pw_uid < 1000,
                  f"trainq is a system user with home /var/lib/trainq ({user.pw_uid}, {user.pw_dir})")
            st = os.stat("/var/lib/trainq")
            check(st.st_uid == user.pw_uid and oct(st.st_mode & 0o777) == "0o750",
                  "/var/lib/trainq belongs to trainq, mode 0750")
            st = os.stat("/etc/trainq/server.yaml")
            check(st.st_gid == user.pw_gid and oct(st.st_mode & 0o777) == "0o640",
                  "/etc/trainq/server.yaml is root:trainq 0640")
            unit = "/usr/lib/systemd/system/trainq.service"
            text = open(unit).read()
            check("ExecStart=/usr/bin/trainq serve --config /etc/trainq/server.yaml" in text,
                  "the unit starts /usr/bin/trainq", text)
            r = run(["systemd-analyze", "verify", unit])
            check(r.returncode == 0 and "trainq.service" not in r.stdout + r.stderr,
                  "systemd-analyze verify passes on the installed unit", r.stdout + r.stderr)
            r = run(["man", "-w", "trainq-gate"])
            check(r.stdout.strip() == "/usr/share/man/man1/trainq-gate.1",
                  "man finds trainq-gate(1)", r.stdout + r.stderr)

            # A trainer: experiment from the installed paths, as the trainq user.
            work = tempfile.mkdtemp(prefix="trainq-package-run-")
            os.chmod(work, 0o755)
            repo = os.path.join(work, "repo")
            os.makedirs(os.path.join(repo, "configs"))
            os.makedirs(os.path.join(repo, "data"))
            shutil.copy(os.path.join(source, "examples", "configs", "iris_mlp.yaml"),
                        os.path.join(repo, "configs"))
            shutil.copy(os.path.join(source, "examples", "data", "iris.csv"),
                        os.path.join(repo, "data"))
            with open(os.path.join(repo, "trainq.yaml"), "w") as f:
                f.write(TRAINQ_YAML)
            data = os.path.join(work, "data")
            os.mkdir(data)
            for d in (work, repo, data):
                for root, dirs, files in os.walk(d):
                    for n in dirs + files + [""]:
                        os.chown(os.path.join(root, n), user.pw_uid, user.pw_gid)
            env = {"PATH": "/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8",
                   "TRAINQ_DB": os.path.join(data, "trainq.db"),
                   "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}

            def as_trainq(cmd, cwd=repo, timeout=600):
                return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                                       "--init-groups", "--"] + cmd, cwd=cwd, env=env,
                                      capture_output=True, text=True, timeout=timeout)

            r = as_trainq(["sh", "-c", "git init -q -b main && git add -A && git commit -q -m iris"])
            check(r.returncode == 0, "a git repository with a trainer: experiment", r.stderr)
            r = as_trainq(["trainq", "submit"])
            check(r.returncode == 0 and "2 runs queued" in r.stdout,
                  "trainq submit queues the trainer experiment", r.stdout + r.stderr)
            check("warning" not in r.stderr,
                  "submit does not warn: trainq-train is beside the installed trainq", r.stderr)
            port = free_port()
            r = as_trainq(["trainq", "serve", "--config", "/etc/trainq/server.yaml",
                           "--listen", f"127.0.0.1:{port}", "--data-dir",
                           os.path.join(data, "serve"), "--until-idle"], cwd=work)
            log = r.stdout + r.stderr
            check(r.returncode == 0, "trainq serve --until-idle with /etc/trainq/server.yaml", log)
            check(log.count("succeeded: iris seed") == 2, "both trainer runs succeeded", log)
            r = as_trainq(["trainq", "runs", "--json"], cwd=work)
            try:
                states = [row["state"] for row in json.loads(r.stdout)]
            except (ValueError, KeyError, TypeError):
                states = []
            check(states == ["succeeded", "succeeded"], f"trainq runs: 2 succeeded ({states})",
                  r.stdout + r.stderr)
            shutil.rmtree(work, ignore_errors=True)
        finally:
            r = run(["dpkg", "-r", "trainq"])
            check(r.returncode == 0, "dpkg -r removes it", r.stdout + r.stderr)
        for path in ("/usr/bin/trainq", "/usr/bin/trainq-train",
                     "/usr/lib/systemd/system/trainq.service"):
            check(not os.path.exists(path), f"{path} is gone after dpkg -r")
        check(os.path.exists("/etc/trainq/server.yaml"), "dpkg -r keeps /etc/trainq/server.yaml")
        r = run(["dpkg", "--purge", "trainq"])
        check(r.returncode == 0 and not os.path.exists("/etc/trainq"),
              "dpkg --purge removes /etc/trainq", r.stdout + r.stderr)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
