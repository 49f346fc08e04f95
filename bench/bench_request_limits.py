#!/usr/bin/env python3
"""Peak memory of `trainq serve` under oversized and abusive requests.

Starts a real `trainq serve` on loopback (one GitHub repository with a secret)
and, one scenario after the other, sends:

  big50      50 concurrent webhooks of 24 MB each (under GitHub's 25 MB limit)
             with a forged signature of the right form: every body must be read
             to be refused (one without a signature is refused from its headers).
  declared   4 connections that each declare a 10 GiB body and stream 150 MB
             of it (or until the server answers or closes).
  chunked    4 chunked bodies of 100 MB each.
  worker     50 concurrent 24 MB POSTs to the worker API without a token.

Each scenario runs against a fresh serve; it prints the daemon's RSS at the
start, its peak (VmHWM) and its RSS after, in MB. Usage:

  bench/bench_request_limits.py [--trainq build/agent/trainq] [--port 47390]
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def rss(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0]) // 1024
    return out


def send(port, head, body_bytes, chunk=1 << 20, chunked=False):
    """Sends head, then body_bytes in chunks until done or the server answers/closes."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(60)
    answered = b""
    try:
        s.sendall(head)
        s.setblocking(False)
        sent = 0
        block = b"x" * chunk
        while sent < body_bytes:
            try:
                answered += s.recv(4096)
                if answered:
                    break
            except BlockingIOError:
                pass
            s.setblocking(True)
            n = min(chunk, body_bytes - sent)
            piece = block[:n]
            if chunked:
                piece = b"%x\r\n" % n + piece + b"\r\n"
            try:
                s.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            s.setblocking(False)
            sent += n
        s.setblocking(True)
        s.settimeout(10)  # an answer that needs more than this after the body: none
        if not answered:
            try:
                answered = s.recv(4096)
            except (socket.timeout, ConnectionResetError):
                pass
    finally:
        s.close()
    return answered.split(b"\r\n", 1)[0].decode(errors="replace")


def run_many(n, fn):
    results = []
    lock = threading.Lock()

    def one():
        r = fn()
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = {}
    for r in results:
        counts[r] = counts.get(r, 0) + 1
    return counts


def start_serve(a, d):
    log = open(f"{d}/serve.log", "a")
    serve = subprocess.Popen([a.trainq, "--db", f"{d}/trainq.db", "serve", "--config",
                              f"{d}/server.yaml", "--listen", f"127.0.0.1:{a.port}"],
                             stdout=log, stderr=log)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", a.port)).close()
            return serve
        except OSError:
            time.sleep(0.1)
    sys.exit("serve did not start; see " + d + "/serve.log")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainq", default="build/agent/trainq")
    ap.add_argument("--port", type=int, default=47390)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="trainq-bench-limits-")
    with open(f"{d}/secret", "w") as f:
        f.write("bench-secret")
    with open(f"{d}/server.yaml", "w") as f:
        f.write(f"repositories:\n  - url: file://{d}/origin\n    forge: github\n"
                f"    secret: {{file: {d}/secret}}\npools:\n  - name: local\n    max: 0\n")
    big = 24 << 20
    hook = lambda n, extra=b"": (b"POST /hooks/github HTTP/1.1\r\nHost: x\r\n"
                                 b"X-GitHub-Event: push\r\nX-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n"
                                 b"Content-Length: %d\r\n" % n + extra + b"\r\n")
    scenarios = [
        ("big50", lambda: run_many(50, lambda: send(a.port, hook(big), big))),
        ("declared", lambda: run_many(4, lambda: send(a.port, hook(10 << 30), 150 << 20))),
        ("chunked", lambda: run_many(4, lambda: send(
            a.port, b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
            b"X-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n", 100 << 20, chunked=True))),
        ("worker", lambda: run_many(50, lambda: send(
            a.port, b"POST /api/v1/runs/1/log HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % big, big))),
    ]
    print(f"trainq: {a.trainq}; a fresh serve per scenario")
    for name, fn in scenarios:
        serve = start_serve(a, d)
        start = rss(serve.pid)["VmRSS"]
        t0 = time.time()
        answers = fn()
        took = time.time() - t0
        r = rss(serve.pid)
        print(f"{name:9s} {took:5.1f} s  answers {answers}  RSS at start {start} MB, "
              f"peak {r['VmHWM']} MB, after {r['VmRSS']} MB")
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)


if __name__ == "__main__":
    main()
