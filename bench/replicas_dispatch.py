#!/usr/bin/env python3
"""Runs dispatched per second with one and with two `trainq serve` replicas on
one PostgreSQL, behind nginx (bench/README.md, "Replicas").

For each replica count: a fresh PostgreSQL and nginx (the fixture of
tests/replicas/chaos_test.py), the replicas with a local pool of MACHINES
workers x SLOTS slots whose server_url is nginx, and one batch of RUNS runs
of `true` submitted with `trainq submit`. The figure is RUNS divided by the
time from the first run's start to the last run's end, read from the store
(workers' boot time left out).

Usage: replicas_dispatch.py TRAINQ_BINARY [RUNS]
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "replicas"))
import chaos_test as ct  # noqa: E402

MACHINES = 4
SLOTS = 4


def count(fx, sql):
    try:
        return int(fx.psql("trainq", sql)[0][0])
    except subprocess.CalledProcessError:
        return -1  # no schema yet: serve is starting


def measure(trainq, replicas, runs):
    fx = ct.Fixture(trainq)
    try:
        fx.start_postgres()
        work = fx.local_repo(
            "bench", runs,
            "printf '{\"name\": \"accuracy\", \"value\": 0.5, \"final\": true}\\n'"
            " >> \"$TRAINQ_METRICS_FILE\"\n")
        ports = [ct.free_port() for _ in range(replicas)]
        fx.start_nginx(ports)
        fx.write_local_config("bench-read-token", ["max: %d" % MACHINES, "min: %d" % MACHINES,
                                                   "slots: %d" % SLOTS, "idle_grace: 10m"])
        for i, port in enumerate(ports):
            fx.start_replica(str(i), port)
        ct.wait_for(lambda: count(fx, "SELECT count(*) FROM machines WHERE state = 'ready'")
                    == MACHINES,
                    60, "the workers to register")
        subprocess.run([trainq, "--db", fx.db, "submit", "--repo", work, "--experiment", "e"],
                       check=True, capture_output=True)
        ct.wait_for(lambda: int(fx.psql("trainq", "SELECT count(*) FROM runs WHERE state = "
                                                  "'succeeded'")[0][0]) == runs,
                    600, "every run to succeed")
        span_ms = int(fx.psql("trainq", "SELECT max(finished_ms) - min(started_ms) FROM runs")
                      [0][0])
        return runs / (span_ms / 1000.0), span_ms
    finally:
        fx.cleanup()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    trainq = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    for replicas in (1, 2):
        rate, span = measure(trainq, replicas, runs)
        print("%d replica(s): %d runs in %.1f s: %.1f runs/s dispatched" %
              (replicas, runs, span / 1000.0, rate), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
