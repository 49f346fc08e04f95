#!/usr/bin/env python3
"""Two `trainq serve` replicas on one real PostgreSQL behind a real nginx, and
the one holding the singleton duties killed with SIGKILL mid-work
(issue 42; docs/deployment.md, "Two replicas on PostgreSQL").

The fixture: PostgreSQL 15 (initdb into a temporary directory, run as nobody
when the test runs as root, on a loopback TCP port); nginx as nobody with its
own config in the temporary directory, on loopback, in front of both
replicas: the address workers (the local pool's `server_url`), webhooks and
`trainq gate --server` use. Both replicas share the database and one data
directory (run logs, pool tokens, the local provider's machine records, the
mirror).

In flight: a stream of signed GitHub push webhooks, one commit each, each
touching the one experiment (4 seeds of a run that takes about a second),
each delivered three times at once: through nginx and straight to each
replica; local-provider workers running those seeds; `trainq gate --server`
through nginx every few tenths of a second. Then replica A, which holds the
duties, is killed with SIGKILL.

Checks: B takes the duties over within TAKEOVER_LIMIT_S of the kill (its log
says "duties: taken over"); every push recorded once and processed once
(one "push N (...)" line in the two logs together, state done); every
delivery stored once; one batch per pushed commit, and every seed of every
batch succeeded with exactly one final metric point; every gate call through
the proxy answered (exit 0, 1 or 3 with a JSON decision); afterwards no
machine row is live and every worker process the replicas started is gone.
Every wait is on a condition with a deadline.

Usage: chaos_test.py TRAINQ_BINARY   (exit 77: PostgreSQL or nginx missing)
"""
import hashlib
import hmac
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

PG_BIN = os.environ.get("TRAINQ_PG_BIN", "/usr/lib/postgresql/15/bin")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
PUSHES = 8
SEEDS = 4
# docs/deployment.md: a survivor takes the duties over within a few seconds
# of the holder's death on a live host (its connection closes at once; the
# others try every 2 s).
TAKEOVER_LIMIT_S = 10

SECRET = "chaos-webhook-secret"
READ_TOKEN = "chaos-read-token"

failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures += 1
    return cond


def wait_for(cond, deadline_s, what):
    end = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %ss waiting for %s" % (deadline_s, what))
        time.sleep(0.1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Fixture:
    def __init__(self, trainq):
        self.trainq = trainq
        self.tmp = tempfile.mkdtemp(prefix="trainq-chaos-")
        os.chmod(self.tmp, 0o755)
        self.as_user = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "nobody", "--"]
        self.procs = []
        self.pg_started = False

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def give_to_nobody(self, d):
        os.makedirs(d, exist_ok=True)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("nobody")
            os.chown(d, pw.pw_uid, pw.pw_gid)

    # PostgreSQL on a loopback TCP port (the path a replica on another host
    # takes), trust authentication, no fsync (durability is not checked here).
    def start_postgres(self):
        pg = self.path("pg")
        self.give_to_nobody(pg)
        self.pg_port = free_port()
        run(self.as_user + [PG_BIN + "/initdb", "-D", pg + "/data", "-U", "trainq",
                            "--auth=trust", "--locale=C", "--encoding=UTF8", "-N"])
        run(self.as_user + [PG_BIN + "/pg_ctl", "-D", pg + "/data", "-w", "-s", "-l",
                            pg + "/log", "-o",
                            "-k %s -c listen_addresses=127.0.0.1 -p %d -c fsync=off "
                            "-c synchronous_commit=off -c full_page_writes=off" % (pg, self.pg_port),
                            "start"])
        self.pg_started = True
        self.psql("postgres", "CREATE DATABASE trainq")
        self.db = "postgres://trainq@127.0.0.1:%d/trainq" % self.pg_port

    def psql(self, db, sql):
        out = run([PG_BIN + "/psql", "-X", "-q", "-At", "-h", "127.0.0.1", "-p",
                   str(self.pg_port), "-U", "trainq", "-d", db, "-c", sql])
        return [line.split("|") for line in out.stdout.splitlines() if line]

    def start_nginx(self, upstreams):
        d = self.path("nginx")
        self.give_to_nobody(d)
        self.nginx_port = free_port()
        servers = "".join("    server 127.0.0.1:%d max_fails=1 fail_timeout=5s;\n" % p
                          for p in upstreams)
        conf = """worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 512; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  client_max_body_size 30m;
  upstream trainq {{
{servers}  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://trainq;
      # A replica that refuses or drops the connection: the other one
      # answers (worker calls and webhooks are POSTs; each is safe to repeat:
      # fencing tokens and delivery ids).
      proxy_next_upstream error timeout non_idempotent;
      proxy_connect_timeout 2s;
      proxy_read_timeout 120s;
      proxy_buffering off;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
""".format(d=d, servers=servers, port=self.nginx_port)
        with open(d + "/nginx.conf", "w") as f:
            f.write(conf)
        p = subprocess.Popen(self.as_user + [NGINX, "-p", d, "-c", d + "/nginx.conf",
                                             "-e", d + "/error.log"],
                             stdout=subprocess.DEVNULL, stderr=open(d + "/stderr", "w"))
        self.procs.append(p)
        self.nginx = "http://127.0.0.1:%d" % self.nginx_port
        wait_for(lambda: self.listening(self.nginx_port), 10, "nginx to listen")

    def listening(self, port):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    def healthz(self, base):
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
                return r.status == 200
        except Exception:
            return False

    def start_replica(self, name, port):
        log = self.path("serve-%s.log" % name)
        p = subprocess.Popen([self.trainq, "--db", self.db, "serve", "--config",
                              self.path("server.yaml"), "--listen", "127.0.0.1:%d" % port,
                              "--data-dir", self.path("data"), "--poll-ms", "100"],
                             stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p, log

    def local_repo(self, who, repeats, script):
        """A git repository (the work tree "work") with one experiment `e`
        running `sh run.sh {seed}` `repeats` times; returns its path."""
        work = self.path("work")
        subprocess.run(["git", "init", "-q", "-b", "main", work], check=True)
        git(work, "config", "user.email", "%s@example.com" % who)
        git(work, "config", "user.name", who)
        with open(work + "/trainq.yaml", "w") as f:
            f.write("version: 1\nexperiments:\n  e:\n    command: sh run.sh {seed}\n"
                    "    repeats: %d\n    baseline: \"off\"\n" % repeats)
        with open(work + "/run.sh", "w") as f:
            f.write(script)
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", who)
        return work

    def write_local_config(self, read_token, pool):
        """server.yaml with a read token (from a file) and one local pool
        whose workers reach the proxy; `pool` holds the pool's own lines."""
        with open(self.path("read-token"), "w") as f:
            f.write(read_token + "\n")
        with open(self.path("server.yaml"), "w") as f:
            f.write("read_token: {file: %s/read-token}\npools:\n  - name: local\n"
                    "    provider: local\n" % self.tmp)
            for line in pool:
                f.write("    %s\n" % line)
            f.write("    sandbox: none\n    params: {server_url: %s}\n" % self.nginx)

    def cleanup(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.pg_started:
            subprocess.run(self.as_user + [PG_BIN + "/pg_ctl", "-D", self.path("pg", "data"),
                                           "-s", "-m", "fast", "-w", "stop"])
        if os.environ.get("TRAINQ_KEEP_TMP"):
            print("kept", self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def slurp(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def git(repo, *args):
    return run(["git", "-C", repo] + list(args)).stdout.strip()


def send_webhook(base, body, delivery):
    sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(base + "/hooks/github", data=body, method="POST", headers={
        "Content-Type": "application/json", "X-GitHub-Event": "push",
        "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + sig})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None  # a replica that is gone


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    trainq = os.path.abspath(sys.argv[1])
    if not os.path.exists(PG_BIN + "/initdb") or not os.path.exists(NGINX):
        print("skipped: needs PostgreSQL 15 (%s) and nginx" % PG_BIN)
        return 77
    fx = Fixture(trainq)
    try:
        return scenario(fx)
    except AssertionError as e:  # a wait that ran past its deadline
        print("FAIL: %s" % e)
        for name in ("serve-a.log", "serve-b.log", "nginx/error.log"):
            print("--- %s\n%s" % (name, slurp(fx.path(name))[-6000:]))
        return 1
    finally:
        fx.cleanup()


def scenario(fx):
    fx.start_postgres()
    # The repository: a bare origin and a working copy with one experiment.
    origin = fx.path("origin.git")
    work = fx.path("work")
    run(["git", "init", "-q", "--bare", "-b", "main", origin])
    run(["git", "init", "-q", "-b", "main", work])
    git(work, "config", "user.email", "chaos@example.com")
    git(work, "config", "user.name", "chaos")
    with open(work + "/trainq.yaml", "w") as f:
        f.write("version: 1\ndefaults:\n  repeats: %d\nexperiments:\n  e:\n"
                "    command: sh run.sh {seed}\n    watch: [conf.yaml, run.sh]\n" % SEEDS)
    with open(work + "/run.sh", "w") as f:
        f.write("sleep 1\nprintf '{\"name\": \"accuracy\", \"value\": 0.5%s, \"final\": true}\\n'"
                " \"$1\" >> \"$TRAINQ_METRICS_FILE\"\n")
    with open(work + "/conf.yaml", "w") as f:
        f.write("v: 0\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "base")
    git(work, "remote", "add", "origin", origin)
    git(work, "push", "-q", "origin", "main")
    base_sha = git(work, "rev-parse", "HEAD")
    origin_url = "file://" + origin

    with open(fx.path("secret"), "w") as f:
        f.write(SECRET + "\n")
    with open(fx.path("read-token"), "w") as f:
        f.write(READ_TOKEN + "\n")
    port_a, port_b = free_port(), free_port()
    fx.start_nginx([port_a, port_b])
    with open(fx.path("server.yaml"), "w") as f:
        f.write("""read_token: {{file: {tmp}/read-token}}
repositories:
  - url: {origin}
    forge: github
    project: test/origin
    branches: [main]
    secret: {{file: {tmp}/secret}}
pools:
  - name: local
    provider: local
    max: 2
    slots: 2
    idle_grace: 3s
    sandbox: none
    params: {{server_url: {nginx}}}
""".format(tmp=fx.tmp, origin=origin_url, nginx=fx.nginx))

    # A first: it takes the duties. Then B, which waits for them.
    proc_a, log_a = fx.start_replica("a", port_a)
    wait_for(lambda: "duties: this replica holds them" in slurp(log_a), 30,
             "replica A to hold the duties:\n" + slurp(log_a))
    proc_b, log_b = fx.start_replica("b", port_b)
    wait_for(lambda: "duties: held by another replica" in slurp(log_b), 30,
             "replica B to start without the duties:\n" + slurp(log_b))
    wait_for(lambda: fx.healthz("http://127.0.0.1:%d" % port_b), 10, "replica B's /healthz")

    # `trainq gate --server` through the proxy, all along.
    gate_results = []
    gate_stop = threading.Event()
    gate_rev = [base_sha]

    def gate_loop():
        while not gate_stop.is_set():
            t = time.monotonic()
            r = subprocess.run([fx.trainq, "gate", "--server", fx.nginx, "--token-file",
                                fx.path("read-token"), "--repo", origin_url, "--json",
                                gate_rev[0]], capture_output=True, text=True, timeout=60)
            ok = r.returncode in (0, 1, 3)
            if ok:
                try:
                    json.loads(r.stdout)
                except ValueError:
                    ok = False
            gate_results.append((t, r.returncode, ok, r.stdout[-300:] + r.stderr[-300:]))
            gate_stop.wait(0.3)

    gate_thread = threading.Thread(target=gate_loop)
    gate_thread.start()

    # The pushes: each commit changes conf.yaml; each delivery goes through
    # nginx and straight to each replica at once.
    pushed = []  # (sha, delivery)
    sent_replies = []
    replica_urls = ["http://127.0.0.1:%d" % port_a, "http://127.0.0.1:%d" % port_b]

    def push_loop():
        before = base_sha
        for i in range(1, PUSHES + 1):
            with open(work + "/conf.yaml", "w") as f:
                f.write("v: %d\n" % i)
            git(work, "commit", "-q", "-am", "push %d" % i)
            git(work, "push", "-q", "origin", "main")
            after = git(work, "rev-parse", "HEAD")
            delivery = str(uuid.uuid4())
            body = json.dumps({"ref": "refs/heads/main", "before": before, "after": after,
                               "repository": {"clone_url": origin_url,
                                              "full_name": "test/origin",
                                              "default_branch": "main"}}).encode()
            replies = [None] * 3
            threads = []
            for k, base in enumerate([fx.nginx] + replica_urls):
                def send(k=k, base=base):
                    replies[k] = send_webhook(base, body, delivery)
                threads.append(threading.Thread(target=send))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sent_replies.append(replies)
            pushed.append((after, delivery))
            gate_rev[0] = after
            before = after
            time.sleep(0.5)  # pacing of the stream, not a wait for a condition

    push_thread = threading.Thread(target=push_loop)
    push_thread.start()

    # The kill: once pushes are flowing and runs are on workers.
    def in_flight():
        live_worker_pids(fx)  # remembers the workers A started
        rows = fx.psql("trainq", "SELECT count(*) FROM runs WHERE state IN ('leased','running')")
        return len(pushed) >= 3 and int(rows[0][0]) >= 2
    wait_for(in_flight, 60, "runs in flight and 3 pushes sent")
    proc_a.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    proc_a.wait()
    print("killed replica A (pid %d) with SIGKILL" % proc_a.pid, flush=True)
    wait_for(lambda: "duties: taken over by this replica" in slurp(log_b), 30,
             "replica B to take the duties over:\n" + slurp(log_b))
    took = time.monotonic() - killed_at
    for line in slurp(log_b).splitlines():
        if "pool local:" in line or "duties:" in line:
            print("  B: " + line[:200])
    check(took <= TAKEOVER_LIMIT_S,
          "B took the duties over %.1f s after the kill (limit %d s)" % (took, TAKEOVER_LIMIT_S))

    push_thread.join()
    check(len(pushed) == PUSHES, "%d pushes sent" % len(pushed))
    check(all(r[0] in (200, 202) for r in sent_replies),
          "every push's delivery through nginx answered 200/202: %s" % sent_replies)

    # Everything processed and run: pushes done, every run ended.
    def drained():
        live_worker_pids(fx)
        p = fx.psql("trainq", "SELECT count(*) FROM pushes WHERE state = 'pending'")
        r = fx.psql("trainq", "SELECT count(*) FROM runs WHERE state NOT IN "
                              "('succeeded','dead','cancelled')")
        b = fx.psql("trainq", "SELECT count(*) FROM batches")
        return int(p[0][0]) == 0 and int(r[0][0]) == 0 and int(b[0][0]) >= PUSHES
    wait_for(drained, 180, "every push processed and every run ended")

    # No machine left: B stops the idle ones, the workers A started included.
    def machines_gone():
        live = fx.psql("trainq", "SELECT count(*) FROM machines WHERE state NOT IN "
                                 "('stopped','failed')")
        return int(live[0][0]) == 0 and not live_worker_pids(fx)
    try:
        wait_for(machines_gone, 60, "every machine stopped")
        check(True, "no machine left running (store rows stopped, worker processes gone)")
    except AssertionError as e:
        check(False, "%s: %s; live pids %s" % (e, fx.psql(
            "trainq", "SELECT id, name, state FROM machines"), live_worker_pids(fx)))

    gate_stop.set()
    gate_thread.join()

    # Deliveries and pushes: once each.
    deliveries = fx.psql("trainq", "SELECT delivery_id, count(*) FROM deliveries GROUP BY 1")
    check(len(deliveries) == PUSHES and all(c == "1" for _, c in deliveries),
          "each of the %d deliveries stored once (sent 3 times each): %s" % (PUSHES, deliveries))
    pushes = fx.psql("trainq", "SELECT id, delivery_id, state FROM pushes ORDER BY id")
    check(len(pushes) == PUSHES and {d for _, d, _ in pushes} == {d for _, d in pushed},
          "one push row per delivery: %s" % pushes)
    check(all(s == "done" for _, _, s in pushes), "every push done: %s" % pushes)
    logs = slurp(log_a) + slurp(log_b)
    for pid, _, _ in pushes:
        n = logs.count("push %s (github" % pid)
        check(n == 1, "push %s processed once (%d log lines in A and B)" % (pid, n))

    # Every seed ran and counted once.
    for sha, _ in pushed:
        rows = fx.psql("trainq", "SELECT count(*) FROM batches b JOIN commits c ON "
                                 "c.id = b.commit_id WHERE c.sha = '%s'" % sha)
        check(rows[0][0] == "1", "one batch for %s" % sha[:8])
    runs = fx.psql("trainq", "SELECT r.id, r.batch_id, r.seed, r.state, "
                             "(SELECT count(*) FROM metrics m WHERE m.run_id = r.id AND m.final = 1)"
                             " FROM runs r ORDER BY r.id")
    check(len(runs) >= PUSHES * SEEDS, "%d runs in all" % len(runs))
    bad = [r for r in runs if r[3] != "succeeded" or r[4] != "1"]
    check(not bad, "every run succeeded with exactly one final metric point: bad %s" % bad)
    seeds = fx.psql("trainq", "SELECT batch_id, count(*), count(DISTINCT seed) FROM runs "
                              "GROUP BY batch_id")
    check(all(n == d for _, n, d in seeds), "no seed twice in a batch: %s" % seeds)

    # The gate answered throughout, through the proxy, after the kill too.
    after_kill = [g for g in gate_results if g[0] > killed_at]
    unanswered = [g for g in gate_results if not g[2]]
    check(len(after_kill) >= 3, "%d gate calls after the kill" % len(after_kill))
    check(not unanswered, "every one of %d gate calls answered: failed %s" %
          (len(gate_results), unanswered[:3]))

    if failures:
        print("--- replica A log\n" + slurp(log_a)[-6000:])
        print("--- replica B log\n" + slurp(log_b)[-6000:])
        print("--- nginx errors\n" + slurp(fx.path("nginx", "error.log"))[-3000:])
    print("%d failure(s)" % failures)
    return 1 if failures else 0


# The local provider's records (data/providers/local/*.json) name each
# worker's pid and start time: those still alive with that start time.
# Every record seen is remembered (a record is removed when its worker is
# stopped): a worker whose record vanished while it lives still counts.
seen_workers = {}


def live_worker_pids(fx):
    d = fx.path("data", "providers", "local")
    if os.path.isdir(d):
        for name in os.listdir(d):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(d, name)) as f:
                    rec = json.load(f)
                seen_workers[rec["pid"]] = str(rec["start"])
            except (OSError, ValueError, KeyError):
                continue
    live = []
    for pid, start in seen_workers.items():
        try:
            with open("/proc/%d/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] not in ("Z", "X") and start == fields[19]:
            live.append(pid)
    return live


if __name__ == "__main__":
    sys.exit(main())
