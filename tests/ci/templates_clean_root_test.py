#!/usr/bin/env python3
"""The hosted-CI templates' install step (ci/templates/*.yml) in a clean Debian 12.

Each template's job runs in `debian:12`; its install step apt-gets the Debian
packages of trainq's libraries, downloads the archive of ci/client-artifact
(TRAINQ_DOWNLOAD_URL) and unpacks it. tests/ci/templates_test.py runs the
step on this machine, where every package is already installed; here it runs
in a container of a minbase Debian 12 root (ci/container-image clean, from
this machine's apt sources) that has none of them, as root like the CI job:
apt-get fetches the lists and the packages from the mirror, the archive comes
over HTTP from loopback, and the unpacked trainq must run (`trainq
--version`), so a library missing from the template's list fails here.

The steps are read with PyYAML: GitHub's step named "Install trainq" (its
`run:`, with $GITHUB_PATH honoured), GitLab's before_script entries from the
one that installs through `trainq --version`. Each distinct install script
runs once, in a fresh container (about 12 s each). Exit 77 (skipped, with the
reason) only when podman or mmdebstrap is missing or cannot run a container.
"""
import argparse
import functools
import glob
import http.server
import os
import shutil
import subprocess
import sys
import threading

import yaml

SKIP = 77
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
failures = []


def check(ok, what, log=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not log else "\n" + log), flush=True)
    if not ok:
        failures.append(what)


def install_script(path):
    """The template's install step as one bash script that ends printing the
    installed trainq's version, or None."""
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if "jobs" in doc:  # GitHub Actions
        for job in doc["jobs"].values():
            for step in job.get("steps", []):
                if step.get("name") == "Install trainq":
                    return ('export GITHUB_PATH=/tmp/github_path\n' + step["run"] +
                            '\nexport PATH="$(cat /tmp/github_path):$PATH"\ntrainq --version\n')
        return None
    for job in doc.values():  # GitLab CI
        if isinstance(job, dict) and "before_script" in job:
            lines = job["before_script"]
            start = next((i for i, l in enumerate(lines) if "apt_install" in l), None)
            if start is None:
                continue
            end = next((i for i in range(start, len(lines)) if "trainq --version" in lines[i]),
                       None)
            variables = "".join(f'export {k}="${{{k}:-{v}}}"\n'
                                for k, v in (job.get("variables") or {}).items())
            return variables + "\n".join(lines[start:(end + 1 if end is not None else None)]) + \
                ("\n" if end is not None else "\ntrainq --version\n")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifact-dir", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    missing = [t for t in ("podman", "runc", "mmdebstrap") if not shutil.which(t)]
    if missing:
        print(f"SKIP: {', '.join(missing)} not installed (ci/install-deps installs them)")
        return SKIP
    if os.geteuid() != 0:
        print("SKIP: rootful podman needs root (this test runs as root in CI)")
        return SKIP
    archives = glob.glob(os.path.join(args.artifact_dir, "trainq-client-*.tar.gz"))
    if not archives:
        check(False, f"the client archive is in {args.artifact_dir} (ci/client-artifact)")
        return 1
    r = subprocess.run([os.path.join(args.source_dir, "ci", "container-image"), "clean"],
                       capture_output=True, text=True)
    sys.stdout.write(r.stderr)
    image = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""
    if not image:
        check(False, "ci/container-image clean built or found the image")
        return 1
    smoke = subprocess.run(PODMAN + ["run", "--rm", *ULIMITS, image, "true"],
                           capture_output=True, text=True)
    if smoke.returncode != 0:
        print("SKIP: podman cannot run a container here: " + smoke.stderr)
        return SKIP
    absent = subprocess.run(PODMAN + ["run", "--rm", *ULIMITS, image, "sh", "-c",
                                      "command -v curl || dpkg -s libgit2-1.5 2>/dev/null | head -1"],
                            capture_output=True, text=True).stdout.strip()
    check(absent == "", "the clean root has neither curl nor trainq's libraries", absent)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    handler = functools.partial(Quiet, directory=args.artifact_dir)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{os.path.basename(archives[0])}"

    scripts = {}
    for path in sorted(glob.glob(os.path.join(args.templates, "*.yml"))):
        script = install_script(path)
        check(script is not None, f"{os.path.basename(path)}: has an install step")
        if script:
            scripts.setdefault(script, []).append(os.path.basename(path))
    for script, names in scripts.items():
        r = subprocess.run(
            PODMAN + ["run", "--rm", "--network=host", *ULIMITS,
                      "-e", f"TRAINQ_DOWNLOAD_URL={url}", "-e", "TRAINQ_PREFIX=/usr/local",
                      image, "bash", "-eo", "pipefail", "-c", script],
            capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        check(r.returncode == 0 and "trainq 0.1" in r.stdout,
              f"{', '.join(names)}: the install step in a clean Debian 12 root installs a trainq "
              f"that runs ({r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else ''})",
              out[-3000:])
    server.shutdown()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
