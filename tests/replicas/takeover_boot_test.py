#!/usr/bin/env python3
"""The replica holding the duties killed between a boot's answer and its
record: the survivor makes those machines its own (Fleet::
RecordUnansweredBoots, docs/design/postgres.md, "Replicas").

Two replicas on one PostgreSQL behind nginx (the fixture of chaos_test.py),
a local pool of 2 workers x 2 slots, 4 runs of 3 s. Replica A boots the two
workers; once both registered (through nginx, at either replica) and before
A's next fleet pass records the boots' answers (its log's "pool local:
booted" lines), A is killed with SIGKILL. Checks: B's log says each machine
"is <pid> (its boot answered a trainq serve that stopped before recording
it)"; no machine is stopped as "tagged machine not wanted"; all 4 runs
succeed within 30 s of the kill (before, the runs of those workers waited
45 s for their rows to be found silent); no machine is left running.

The window is one fleet pass (1 s); when A records the answers first, the
scenario is run again (at most 3 times) rather than pass without having
tested anything.

Usage: takeover_boot_test.py TRAINQ_BINARY   (exit 77: PostgreSQL or nginx missing)
"""
import os
import signal
import subprocess
import sys
import time

import chaos_test as ct


def attempt(trainq):
    """True/False: the checks' outcome; None: the window was missed."""
    fx = ct.Fixture(trainq)
    try:
        fx.start_postgres()
        work = fx.local_repo(
            "takeover", 4,
            "sleep 3\nprintf '{\"name\": \"accuracy\", \"value\": 0.5%s, \"final\": "
            "true}\\n' \"$1\" >> \"$TRAINQ_METRICS_FILE\"\n")
        port_a, port_b = ct.free_port(), ct.free_port()
        fx.start_nginx([port_a, port_b])
        fx.write_local_config("takeover-read-token",
                              ["max: 2", "slots: 2", "idle_grace: 3s"])
        proc_a, log_a = fx.start_replica("a", port_a)
        ct.wait_for(lambda: "duties: this replica holds them" in ct.slurp(log_a), 30,
                    "A to hold the duties")
        proc_b, log_b = fx.start_replica("b", port_b)
        ct.wait_for(lambda: "duties: held by another replica" in ct.slurp(log_b), 30,
                    "B to start")
        subprocess.run([trainq, "--db", fx.db, "submit", "--repo", work], check=True,
                       capture_output=True)

        def registered():
            return (ct.slurp(log_a) + ct.slurp(log_b)).count("worker registered") >= 2 or \
                "pool local: booted" in ct.slurp(log_a)
        ct.wait_for(registered, 30, "both workers to register")
        ct.live_worker_pids(fx)  # remembers the workers A started
        proc_a.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        proc_a.wait()
        if "pool local: booted" in ct.slurp(log_a):
            print("A recorded the boots before the kill: the window was missed", flush=True)
            return None
        ok = True

        def succeeded():
            return fx.psql("trainq", "SELECT count(*) FROM runs WHERE state = 'succeeded'")[0][0]
        try:
            ct.wait_for(lambda: succeeded() == "4", 30, "all 4 runs to succeed")
            print("ok: all 4 runs succeeded %.1f s after the kill" %
                  (time.monotonic() - killed_at))
        except AssertionError as e:
            ok = ct.check(False, str(e))
        log = ct.slurp(log_b)
        matched = log.count("(its boot answered a trainq serve that stopped before recording it)")
        ok &= ct.check(matched == 2, "B made both machines its own (%d lines)" % matched)
        ok &= ct.check("tagged machine not wanted" not in log, "B stopped no worker as unknown")
        try:
            ct.wait_for(lambda: fx.psql("trainq", "SELECT count(*) FROM machines WHERE state "
                                                  "NOT IN ('stopped','failed')")[0][0] == "0"
                        and not ct.live_worker_pids(fx), 60, "every machine stopped")
            ct.check(True, "no machine left running")
        except AssertionError as e:
            ok = ct.check(False, str(e))
        if not ok:
            print("--- A\n" + ct.slurp(log_a)[-4000:] + "\n--- B\n" + log[-6000:])
        return ok
    finally:
        fx.cleanup()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not os.path.exists(ct.PG_BIN + "/initdb") or not os.path.exists(ct.NGINX):
        print("skipped: needs PostgreSQL 15 (%s) and nginx" % ct.PG_BIN)
        return 77
    trainq = os.path.abspath(sys.argv[1])
    for _ in range(3):
        outcome = attempt(trainq)
        if outcome is not None:
            return 0 if outcome else 1
    print("FAIL: the window between a boot's answer and its record was missed 3 times")
    return 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
