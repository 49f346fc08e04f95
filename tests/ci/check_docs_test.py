#!/usr/bin/env python3
"""ci/check-docs: the real tree passes; a small tree whose links all resolve
passes; a broken file link and a broken #anchor each fail, named by file,
line and link; a root without README.md is an error (exit 2). In
docs/ARCHITECTURE.md and docs/design/*.md, a path that does not exist and a
C++ name the sources do not have (or have only in a comment) each fail,
named by file and line; names and paths that exist, and words that are
neither, pass."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "ci", "check-docs")
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures += 1


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# Every kind of link the checker must accept: a file, a heading's anchor in
# another file and in the same file, punctuation and code in a heading, a
# repeated heading (-1), a directory, an image, a link text wrapped over two
# lines, a reference definition; and what it must not follow: a URL, a link in
# a code block or a code span.
GOOD_README = """# Project

See [the guide](docs/guide.md), [its setup](docs/guide.md#setup-the-first-time),
[`trainq worker`'s flags](docs/guide.md#workers-trainq-worker), the
[second notes](docs/guide.md#notes-1), [below](#more), [the docs](docs/),
![a picture](docs/images/p.png) and [a link whose text
goes on](docs/guide.md#setup-the-first-time). [ref]: docs/guide.md

[ref]: docs/guide.md#notes

Not links: [a site](https://example.com/missing.md#x), `[code](nope.md)`,

```
[in a block](nowhere.md#gone)
```

## More
"""
GUIDE = """# Guide

## Setup: the first time!

## Workers: `trainq worker`

## Notes

## Notes

Back to [the README](../README.md#project).
"""


def good_tree(root):
    write(root, "README.md", GOOD_README)
    write(root, "docs/guide.md", GUIDE)
    write(root, "docs/images/p.png", "png")
    write(root, "CONTRIBUTING.md", "[readme](README.md#more)\n")
    write(root, "examples/sub/x.md", "[up](../../docs/guide.md#notes)\n")


code, out = run(ROOT)
check(code == 0, f"the real tree's docs resolve (exit {code}):\n{out}")

with tempfile.TemporaryDirectory() as t:
    good_tree(t)
    code, out = run(t)
    check(code == 0, f"a tree whose links all resolve passes (exit {code}):\n{out}")

with tempfile.TemporaryDirectory() as t:
    good_tree(t)
    write(t, "docs/guide.md", GUIDE + "\nSee [the missing page](missing.md).\n")
    code, out = run(t)
    check(code == 1, f"a link to a missing file fails (exit {code})")
    check("docs/guide.md:13: missing.md: no such file docs/missing.md" in out,
          f"it names the file, line and link:\n{out}")

with tempfile.TemporaryDirectory() as t:
    good_tree(t)
    write(t, "CONTRIBUTING.md", "line one\n\n[readme](README.md#no-such-heading)\n")
    code, out = run(t)
    check(code == 1, f"a link to a missing anchor fails (exit {code})")
    check("CONTRIBUTING.md:3: README.md#no-such-heading: no heading with the anchor "
          "#no-such-heading in README.md" in out, f"it names the file, line and anchor:\n{out}")

with tempfile.TemporaryDirectory() as t:
    good_tree(t)
    write(t, "examples/sub/x.md", "[same file](#nothing-here)\n[gone](../gone.md#a)\n"
          "a [wrapped\nlink](../../docs/guide.md#nope)\n\n[def]: ../../docs/nothing.md\n")
    code, out = run(t)
    check(code == 1 and "examples/sub/x.md:1: #nothing-here" in out
          and "examples/sub/x.md:2: ../gone.md#a: no such file examples/gone.md" in out
          and "examples/sub/x.md:3: ../../docs/guide.md#nope: no heading" in out
          and "examples/sub/x.md:6: ../../docs/nothing.md: no such file" in out
          and "4 broken link(s)" in out, f"every broken link is named, not only the first:\n{out}")

# The architecture docs' names and paths, against a small source tree.
SOURCES = {
    "src/engine/worker.h": "namespace demo {\nclass Worker {\n public:\n  int Run();\n"
                           "  int slots_ = 0;\n};\nstruct LeaseLimits { int max_runs; };\n"
                           "constexpr int kMaxSlots = 4;\n"
                           "// OnlyInAComment() is mentioned here and nowhere else.\n}\n",
    "src/engine/worker.cc": "#include \"src/engine/worker.h\"\n"
                            "int demo::Worker::Run() { return LeaseForMachine(); }\n",
    "tests/engine/worker_test.cc": "TEST_CASE(\"x\") { FakeQueue q; }\n",
    "CMakeLists.txt": "target_link_libraries(x PUBLIC SQLite::SQLite3)\n",
}
GOOD_ARCH = """# Map

`src/engine/worker.h` owns `Worker` (`Worker::Run()`, `demo::Worker::slots_`,
`LeaseForMachine(machine, limits)`, `LeaseLimits::max_runs`, `kMaxSlots`);
src/engine/worker.cc, `src/engine/`, `src/engine/worker.{h,cc}`, `src/*/worker.h`
and `src/engine/worker.cc:2` exist, tested by `tests/engine/worker_test.cc`
with a `FakeQueue`; linked with `SQLite::SQLite3`; `std::expected<T, E>`.
Not names or paths: `trainq serve --inproc`, `runs/<id>/output.log`,
`data/x.y`, `max_runs`, `BEGIN IMMEDIATE`, `HF_HOME`, `src/<name>.cc`,
`src/...`, /tmp/src/nothing.h, `Authorization: Bearer TOKEN`.

```
src/engine/in_a_block.h `NotInABlock`
```
"""


def source_tree(root):
    good_tree(root)
    for rel, text in SOURCES.items():
        write(root, rel, text)
    write(root, "docs/ARCHITECTURE.md", GOOD_ARCH)
    write(root, "docs/design/engine.md", "# Engine\n\n`Worker` in src/engine/worker.h.\n")


with tempfile.TemporaryDirectory() as t:
    source_tree(t)
    code, out = run(t)
    check(code == 0 and "2 architecture doc(s) name" in out,
          f"names and paths that exist pass, and are counted (exit {code}):\n{out}")

with tempfile.TemporaryDirectory() as t:
    source_tree(t)
    write(t, "docs/ARCHITECTURE.md", GOOD_ARCH + "\nThe engine in `src/engine/made_up.h` calls\n"
          "`MadeUpFunction()` of `Worker::MadeUpMember`, and src/nowhere/x.cc\n"
          "`OnlyInAComment()`.\n")
    write(t, "docs/design/engine.md", "# Engine\n\n`MadeUpType` in `tests/made_up/`.\n")
    code, out = run(t)
    n = GOOD_ARCH.count("\n") + 2
    check(code == 1, f"a made-up path or name fails (exit {code})")
    for line in (f"docs/ARCHITECTURE.md:{n}: src/engine/made_up.h: no such file or folder",
                 f"docs/ARCHITECTURE.md:{n + 1}: MadeUpFunction: not found in the sources",
                 f"docs/ARCHITECTURE.md:{n + 1}: Worker::MadeUpMember: not found in the sources",
                 f"docs/ARCHITECTURE.md:{n + 1}: src/nowhere/x.cc: no such file or folder",
                 f"docs/ARCHITECTURE.md:{n + 2}: OnlyInAComment: not found in the sources",
                 "docs/design/engine.md:3: MadeUpType: not found in the sources",
                 "docs/design/engine.md:3: tests/made_up/: no such file or folder",
                 "7 missing path(s) or name(s)"):
        check(line in out, f"it says {line!r}:\n{out}")

with tempfile.TemporaryDirectory() as t:
    code, out = run(t)
    check(code == 2 and "no README.md" in out, f"a root without README.md is an error:\n{out}")

sys.exit(1 if failures else 0)
