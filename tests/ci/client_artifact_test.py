#!/usr/bin/env python3
"""The hosted-CI client archive (ci/client-artifact) against the templates' install step.

This checks, on this Debian 12 machine (tests/ci/templates_clean_root_test.py
runs the install step itself in a clean Debian 12 root):
  - the archive unpacked into an empty prefix holds a stripped trainq (no
    debug info) that runs;
  - every library `ldd` resolves for it comes from a package in the apt
    dependency closure of the packages that each template's install step
    lists (dpkg -S of each resolved file; apt-cache depends --recurse for the
    closure), plus the Essential packages a debian:12 image has;
  - each template lists every package of the archive's runtime-packages;
  - the same check does fail for a list without libnlopt0 (issue 27's gap).
tests/ci/templates_test.py then runs the templates' real install step with
this archive.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tarfile
import tempfile

import yaml

failures = []


def check(ok, what, log=""):
    if ok:
        print("ok   " + what)
    else:
        print("FAIL " + what + ("\n" + log if log else ""))
        failures.append(what)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def install_steps(templates):
    """{template file: the text of its install step} for every template that installs trainq."""
    steps = {}
    for path in sorted(glob.glob(os.path.join(templates, "*.yml"))):
        doc = yaml.safe_load(open(path))
        name = os.path.basename(path)
        for job in (doc.get("jobs") or {}).values():  # GitHub
            for step in job.get("steps", []):
                if step.get("name") == "Install trainq":
                    steps[name] = step["run"]
        for key, job in doc.items():  # GitLab
            if isinstance(job, dict) and "before_script" in job:
                steps[name] = "\n".join(job["before_script"])
    return steps


def listed_packages(step):
    """The packages of the step's `packages="..."` assignment."""
    m = re.search(r'packages="([^"]*)"', step)
    return m.group(1).split() if m else []


def owner(path):
    """The package that owns a file, under merged /usr or not."""
    real = os.path.realpath(path)
    for p in (path, real, path.removeprefix("/usr"), "/usr" + path, real.removeprefix("/usr"),
              "/usr" + real):
        r = run(["dpkg", "-S", p])
        if r.returncode == 0:
            return r.stdout.split(":")[0]
    return None


def closure(packages):
    """The packages apt installs for `packages` (Depends and Pre-Depends, recursively)."""
    r = run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
             "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] + packages)
    names = set(packages)
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith(("Depends:", "PreDepends:")):
            line = line.split(":", 1)[1].strip()
        names.add(line.strip("<>").split(":")[0])
    return names


def essential():
    r = run(["dpkg-query", "-W", "-f=${Package} ${Essential}\n"])
    return {l.split()[0] for l in r.stdout.splitlines() if l.endswith(" yes")}


def uncovered(libraries, packages):
    """The (library, package) pairs whose package apt would not bring for `packages`."""
    have = closure(packages) | essential()
    return [(lib, pkg) for lib, pkg in libraries if pkg not in have]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifact-dir", required=True)
    ap.add_argument("--templates", required=True)
    args = ap.parse_args()
    archives = glob.glob(os.path.join(args.artifact_dir, "trainq-client-*.tar.gz"))
    if len(archives) != 1:
        print(f"FAIL one archive from ci/client-artifact in {args.artifact_dir}: {archives}")
        return 1
    archive = archives[0]
    print(f"archive {archive}: {os.path.getsize(archive)} bytes")

    with tempfile.TemporaryDirectory(prefix="trainq-client-") as prefix:
        with tarfile.open(archive) as t:
            names = sorted(t.getnames())
            t.extractall(prefix, filter="data")
        check("bin/trainq" in names and "share/trainq/runtime-packages" in names,
              f"the archive holds bin/trainq and share/trainq/runtime-packages ({names})")
        trainq = os.path.join(prefix, "bin", "trainq")
        r = run(["file", "-L", trainq])
        check("stripped" in r.stdout and "not stripped" not in r.stdout
              and "debug_info" not in r.stdout, "trainq is stripped, without debug info",
              r.stdout)
        print(f"trainq: {os.path.getsize(trainq)} bytes")
        r = run([trainq, "--version"], env={"PATH": "/usr/bin:/bin"})
        check(r.returncode == 0 and r.stdout.startswith("trainq "), "the unpacked trainq runs",
              r.stdout + r.stderr)
        runtime = open(os.path.join(prefix, "share/trainq/runtime-packages")).read().split()
        check("libnlopt0" in runtime, f"runtime-packages names libnlopt0 ({' '.join(runtime)})")

        # Every library the loader resolves, and its package.
        r = run(["ldd", trainq])
        check("not found" not in r.stdout, "ldd resolves every library", r.stdout)
        libraries, unowned = [], []
        for line in r.stdout.splitlines():
            m = re.match(r"\s*(\S+) => (/\S+)", line)
            if m:
                pkg = owner(m.group(2))
                if pkg is None:
                    unowned.append(m.group(2))
                libraries.append((m.group(1), pkg))
        check(libraries and not unowned,
              f"every resolved library belongs to a Debian package (not: {unowned})")
        print(f"{len(libraries)} libraries from {len({p for _, p in libraries})} packages")

        steps = install_steps(args.templates)
        check(len(steps) == 4, f"four templates install trainq ({sorted(steps)})")
        for name, step in steps.items():
            listed = listed_packages(step)
            missing = [p for p in runtime if p not in listed]
            check(listed and not missing,
                  f"{name}: the install step lists every runtime package (missing: {missing})",
                  step)
            gaps = uncovered(libraries, listed)
            check(not gaps, f"{name}: every library comes from a listed package or its "
                  f"dependencies (not: {gaps})")
        # The check finds the gap the newcomer found.
        old = [p for p in runtime if p != "libnlopt0"]
        gaps = uncovered(libraries, old)
        check(any(pkg == "libnlopt0" for _, pkg in gaps),
              f"without libnlopt0 the check reports it ({gaps})")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
