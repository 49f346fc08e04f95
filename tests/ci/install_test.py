#!/usr/bin/env python3
"""`cmake --install BUILD --prefix P` into an empty prefix, and what it put there.

Checks: both binaries (trainq-train when the build has it), the systemd unit
naming the installed trainq and /etc/trainq/server.yaml and passing
`systemd-analyze verify` (a unit whose binary is missing must fail it, so the
check can fail), the hardening settings and `systemd-analyze security`'s
exposure level, a man page per command that `man -l` renders with the
command's options, bash completion of commands, subcommands and options
through the installed binary, stripped binaries, and the install's word on
what the unit still needs (the trainq user, /etc/trainq/server.yaml).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(ok, what, log=""):
    if ok:
        print("ok   " + what)
    else:
        print("FAIL " + what + ("\n" + log if log else ""))
        failures.append(what)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def commands(trainq):
    """The commands of `trainq --help` (its SUBCOMMANDS section)."""
    out = run([trainq, "--help"]).stdout
    names, inside = [], False
    for line in out.splitlines():
        if re.fullmatch(r"[A-Z][A-Za-z ]*:", line):
            inside = line.rstrip(":").upper() == "SUBCOMMANDS"
            continue
        if inside and re.match(r"  [a-z]", line):
            names.append(line.split()[0])
    return names


def complete(prefix, words, cword):
    """COMPREPLY of the installed completion for `words` with the cursor on word `cword`."""
    script = (f"source {prefix}/share/bash-completion/completions/trainq\n"
              f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={cword}\n"
              "_trainq; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    env = {"PATH": f"{prefix}/bin:/usr/bin:/bin", "HOME": prefix}
    return run(["bash", "--norc", "-c", script], env=env).stdout.split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    with_trainer = os.path.exists(os.path.join(build, "agent", "trainq-train"))

    with tempfile.TemporaryDirectory(prefix="trainq-install-") as prefix:
        r = run(["cmake", "--install", build, "--prefix", prefix])
        check(r.returncode == 0, "cmake --install into an empty prefix", r.stdout + r.stderr)
        trainq = os.path.join(prefix, "bin", "trainq")
        check(os.access(trainq, os.X_OK), "bin/trainq is installed")
        # Issue 38.9: what the unit still needs (the user, the config) is said
        # at the end, and the binaries are stripped (203 MB with debug info).
        said = r.stdout + r.stderr
        has_user = run(["getent", "passwd", "trainq"]).returncode == 0
        has_config = os.path.exists("/etc/trainq/server.yaml")
        check("trainq.service" in said and
              (has_user or "adduser --system --group --home /var/lib/trainq" in said) and
              (has_config or f"{prefix}/share/trainq/server.yaml /etc/trainq/server.yaml" in said) and
              f"systemctl link {prefix}/lib/systemd/system/trainq.service" in said,
              "cmake --install says what the unit still needs (the trainq user, "
              "/etc/trainq/server.yaml, systemctl link)", said[-2000:])
        binaries = [trainq] + ([os.path.join(prefix, "bin", "trainq-train")] if with_trainer else [])
        for b in binaries:
            sections = run(["readelf", "-S", "--wide", b]).stdout
            check(".symtab" not in sections and ".debug_info" not in sections,
                  f"{os.path.basename(b)} is installed stripped "
                  f"({os.path.getsize(b) / 1e6:.1f} MB)")
        version = run([trainq, "--version"]).stdout.strip()
        check(version.startswith("trainq "), f"the installed trainq runs: {version}")
        if with_trainer:
            train = os.path.join(prefix, "bin", "trainq-train")
            check(os.access(train, os.X_OK), "bin/trainq-train is installed beside trainq")
            r = run([train, "--help"])
            check(r.returncode == 0 and "spec" in r.stdout, "the installed trainq-train runs",
                  r.stdout + r.stderr)
        else:
            print("note: this build has no trainq-train (TRAINQ_BUILD_TRAINER=OFF or no "
                  "libtorch); its install is not checked")

        # The unit: the installed path, the config, the hardening.
        unit = os.path.join(prefix, "lib", "systemd", "system", "trainq.service")
        text = open(unit).read() if os.path.exists(unit) else ""
        check(bool(text), "lib/systemd/system/trainq.service is installed")
        check(f"ExecStart={prefix}/bin/trainq serve --config /etc/trainq/server.yaml" in text,
              "the unit starts the installed trainq with /etc/trainq/server.yaml", text)
        for setting in ("User=trainq", "ProtectSystem=strict", "ReadWritePaths=/var/lib/trainq",
                        "StateDirectory=trainq", "NoNewPrivileges=true", "PrivateTmp=true",
                        "ProtectHome=true", "Environment=TRAINQ_DB=/var/lib/trainq/trainq.db",
                        # The runs' sandbox (issue 36): bwrap's namespaces, no network one.
                        "RestrictNamespaces=user mnt pid uts ipc cgroup"):
            check(re.search(rf"^{re.escape(setting)}$", text, re.M) is not None,
                  f"the unit sets {setting}")
        # Settings that would keep bwrap from starting runs: no namespaces at all,
        # or mounts over /proc's files (then no fresh /proc can be mounted).
        for setting in ("RestrictNamespaces=true", "ProtectKernelTunables=true",
                        "ProtectKernelLogs=true"):
            check(re.search(rf"^{re.escape(setting)}$", text, re.M) is None,
                  f"the unit does not set {setting} (the runs' sandbox needs it off)")
        if shutil.which("systemd-analyze"):
            # verify also runs `man trainq-serve` for the unit's Documentation=:
            # the prefix's pages are found through MANPATH.
            manpath = dict(os.environ, MANPATH=os.path.join(prefix, "share", "man"))
            r = run(["systemd-analyze", "verify", unit], env=manpath)
            check(r.returncode == 0 and "trainq.service" not in r.stdout + r.stderr,
                  "systemd-analyze verify passes on the installed unit", r.stdout + r.stderr)
            # The same check fails for a unit whose binary is missing.
            broken_dir = os.path.join(prefix, "broken")
            os.mkdir(broken_dir)
            broken = os.path.join(broken_dir, "trainq.service")
            with open(broken, "w") as f:
                f.write(text.replace(f"{prefix}/bin/trainq", f"{prefix}/nowhere/trainq"))
            r = run(["systemd-analyze", "verify", broken], env=manpath)
            check(r.returncode != 0 and "nowhere/trainq" in r.stdout + r.stderr,
                  "systemd-analyze verify fails on a unit whose ExecStart is missing",
                  r.stdout + r.stderr)
            r = run(["systemd-analyze", "security", "--offline=true", unit])
            m = re.search(r"Overall exposure level for trainq.service: ([0-9.]+) (\S+)", r.stdout)
            check(m is not None and float(m.group(1)) <= 4.0,
                  "systemd-analyze security rates the unit's exposure 4.0 or lower "
                  f"({m.group(1) + ' ' + m.group(2) if m else 'no rating'})", r.stdout + r.stderr)
        else:
            check(False, "systemd-analyze is installed (ci/install-deps: systemd)")

        # Man pages: trainq.1 and one per command, rendered by man.
        mandir = os.path.join(prefix, "share", "man", "man1")
        names = commands(trainq)
        check(len(names) >= 10, f"trainq --help lists its commands ({len(names)})")
        missing = [n for n in names if not os.path.exists(os.path.join(mandir, f"trainq-{n}.1"))]
        check(os.path.exists(os.path.join(mandir, "trainq.1")) and not missing,
              f"share/man/man1 has trainq.1 and a page per command (missing: {missing})")
        if with_trainer:
            check(os.path.exists(os.path.join(mandir, "trainq-train.1")),
                  "share/man/man1 has trainq-train.1")
        page = os.path.join(mandir, "trainq-serve.1")
        r = run(["man", "-l", page], env=dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING=""))
        check(r.returncode == 0 and "trainq-serve" in r.stdout and "--until-idle" in r.stdout,
              "man -l trainq-serve.1 renders the command's name and its --until-idle option",
              r.stdout[:2000] + r.stderr)

        # Bash completion, through the installed binary.
        check(complete(prefix, ["trainq", "ser"], 1) == ["serve"], "completion: trainq ser -> serve",
              str(complete(prefix, ["trainq", "ser"], 1)))
        got = complete(prefix, ["trainq", "serve", "--until"], 2)
        check(got == ["--until-idle"], "completion: trainq serve --until -> --until-idle", str(got))
        got = complete(prefix, ["trainq", "--db", "x.db", "gate", "--bas"], 4)
        check(got == ["--baseline"], "completion: a command after --db FILE", str(got))
        got = complete(prefix, ["trainq", ""], 1)
        check(sorted(got) == sorted(names), "completion: every command, and nothing else", str(got))
        # Issue 38.9: a command with subcommands completes them, not file names.
        got = complete(prefix, ["trainq", "sweep", "''"], 2)
        check(sorted(got) == ["best", "plot", "resume", "start", "status", "stop"],
              "completion: trainq sweep <TAB> -> its subcommands", str(got))
        got = complete(prefix, ["trainq", "sweep", "st"], 2)
        check(sorted(got) == ["start", "status", "stop"], "completion: trainq sweep st", str(got))
        got = complete(prefix, ["trainq", "-q", "pools", "''"], 3)
        check(got == ["reset"], "completion: trainq -q pools <TAB> -> reset", str(got))
        got = complete(prefix, ["trainq", "sweep", "start", "--"], 3)
        check("--commit" in got and "--until-idle" not in got,
              "completion: trainq sweep start --<TAB> -> start's options", str(got))
        got = complete(prefix, ["trainq", "help", "logs"], 2)
        check(got == ["logs"], "completion: trainq help logs -> logs", str(got))
        got = complete(prefix, ["trainq", "help", "lo"], 2)
        check(sorted(got) == ["login", "logout", "logs"],
              "completion: trainq help lo -> login, logout, logs", str(got))
        got = complete(prefix, ["trainq", "help", "sweep", "b"], 3)
        check(got == ["best"], "completion: trainq help sweep b -> best", str(got))
        # A command without subcommands still completes files.
        open(os.path.join(prefix, "notes-for-completion.txt"), "w").close()
        got = complete(prefix, ["trainq", "submit", f"{prefix}/notes-for"], 2)
        check(got == [f"{prefix}/notes-for-completion.txt"],
              "completion: trainq submit FILE completes files", str(got))

        config = os.path.join(prefix, "share", "trainq", "server.yaml")
        check(os.path.exists(config), "share/trainq/server.yaml (the service's starting config)")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
