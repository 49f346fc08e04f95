#!/usr/bin/env python3
"""ci/include-cleaner: the real tree passes; in a copy, a planted include of a
header whose names the file does not use fails, named by file and line; an
allowed one passes; an allow line that matches nothing fails."""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "ci", "include-cleaner")
FOLDERS = ["core", "stats", "cloud", "queue", "trainer", "agent"]
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures += 1


def run(root, *args):
    p = subprocess.run([sys.executable, SCRIPT, "--root", root, *args], capture_output=True,
                       text=True)
    return p.returncode, p.stdout + p.stderr


def plant(root, rel, line):
    path = os.path.join(root, rel)
    text = open(path).read().split("\n")
    first = next(i for i, l in enumerate(text) if l.startswith("#include"))
    text.insert(first + 1, line)
    open(path, "w").write("\n".join(text))
    return first + 2  # 1-based line of the planted include


code, out = run(ROOT)
check(code == 0, f"the real tree has no dead include (exit {code}): {out.strip()[-300:]}")

with tempfile.TemporaryDirectory() as tmp:
    for f in FOLDERS:
        shutil.copytree(os.path.join(ROOT, f), os.path.join(tmp, f),
                        ignore=shutil.ignore_patterns("build*", "*.o"))
    os.makedirs(os.path.join(tmp, "ci"))
    shutil.copy(os.path.join(ROOT, "ci", "include-cleaner.allow"), os.path.join(tmp, "ci"))
    code, out = run(tmp)
    check(code == 0, f"the copied tree passes before anything is planted: {out.strip()[-300:]}")

    # core/fatal_signals.h's names (InstallFatalSignalHandlers, ...) appear
    # nowhere in worker_link.cc.
    line = plant(tmp, "agent/runner/worker_link.cc", '#include "core/fatal_signals.h"')
    code, out = run(tmp)
    want = f'agent/runner/worker_link.cc:{line}: "core/fatal_signals.h" is not used'
    check(code == 1 and want in out, f"a planted dead include fails, named ({want}): {out[-400:]}")
    check("1 dead" in out, "the summary counts it")

    # A used one: worker_link.cc names Clock and TimeMs (core/clock.h).
    plant(tmp, "agent/runner/worker_link.cc", '#include "core/clock.h"')
    code, out = run(tmp)
    check("core/clock.h" not in out and "1 dead" in out,
          f"an include whose names the file uses passes: {out[-300:]}")

    # Allowed, it passes; an allow line for an include that is not dead fails.
    with open(os.path.join(tmp, "ci", "include-cleaner.allow"), "a") as f:
        f.write("agent/runner/worker_link.cc core/fatal_signals.h  # planted\n")
    code, out = run(tmp)
    check(code == 0, f"an allowed dead include passes (exit {code}): {out[-300:]}")
    code, out = run(tmp, "--list")
    check("(allowed)" in out, "--list names the allowed ones too")
    with open(os.path.join(tmp, "ci", "include-cleaner.allow"), "a") as f:
        f.write("agent/runner/worker.cc core/clock.h  # not dead\n")
    code, out = run(tmp)
    check(code == 1 and "agent/runner/worker.cc core/clock.h: not a dead include any more" in out,
          f"a stale allow line fails: {out[-300:]}")

print(f"{failures} failure(s)")
sys.exit(1 if failures else 0)
