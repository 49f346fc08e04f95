#!/usr/bin/env python3
"""ci/check-includes: the real tree passes; planted wrong-way includes fail,
each named by file and line; a missing rules table is an error (exit 2)."""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "ci", "check-includes")
FOLDERS = ["core", "stats", "cloud", "queue", "trainer", "agent", "docs"]
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures += 1


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def copy_tree(dst):
    for f in FOLDERS:
        shutil.copytree(os.path.join(ROOT, f), os.path.join(dst, f),
                        ignore=shutil.ignore_patterns("build*", "*.o"))


def plant(root, rel, line):
    path = os.path.join(root, rel)
    text = open(path).read().split("\n")
    # After the file's first include, so the reported line is known.
    first = next(i for i, l in enumerate(text) if l.startswith("#include"))
    text.insert(first + 1, line)
    open(path, "w").write("\n".join(text))
    return first + 2  # 1-based line of the planted include


code, out = run(ROOT)
check(code == 0, f"the real tree has no wrong-way include (exit {code}): {out.strip()[-200:]}")

with tempfile.TemporaryDirectory() as tmp:
    copy_tree(tmp)
    code, out = run(tmp)
    check(code == 0, "the copied tree passes before anything is planted")

    # A lower library reaching up: repo -> cli.
    n = plant(tmp, "agent/repo/mirror.cc", '#include "agent/cli/cli.h"')
    code, out = run(tmp)
    check(code == 1, f"repo including cli fails (exit {code})")
    check(f"agent/repo/mirror.cc:{n}: includes agent/cli/cli.h (cli), but repo may include only"
          in out, "the message names the file, the line, the header and the rule:\n    " +
          out.strip().splitlines()[0])

    # queue may include cloud/autoscaler.h, but no other header of cloud.
    m = plant(tmp, "queue/pushes.cc", '#include "cloud/provider.h"')
    code, out = run(tmp)
    check(f"queue/pushes.cc:{m}: includes cloud/provider.h (cloud)" in out,
          "queue including cloud/provider.h fails: only cloud/autoscaler.h is allowed")
    check("queue/machines.h" not in out, "queue/machines.h's include of cloud/autoscaler.h stays allowed")
    check("2 wrong-way include(s)" in out, "both planted includes are counted, nothing else")

with tempfile.TemporaryDirectory() as tmp:
    copy_tree(tmp)
    doc = os.path.join(tmp, "docs", "ARCHITECTURE.md")
    open(doc, "w").write(open(doc).read().replace("<!-- include-rules: begin -->", ""))
    code, out = run(tmp)
    check(code == 2 and "no include-rules table" in out,
          f"a document without the rules table is an error, not a pass (exit {code})")

sys.exit(1 if failures else 0)
