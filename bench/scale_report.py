#!/usr/bin/env python3
"""Tables and curves of bench/README.md "Scale" from bench/scale.sh's output.

Reads DIR/{history,queue,fleet,fleet-slow,workers}-N.txt (`figure name=value`
lines and the load average before and after each part) and DIR/rss-N.txt
(serve's RSS over a long run: `rss SECONDS MB` lines), writes DIR/figures.csv
(one row per part) and docs/images/scale_{reads,http,dispatch,fleet,
heartbeats,rss}.svg, and prints the markdown tables.

    bench/scale_report.py bench/results/scale
"""
import csv
import math
import os
import re
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]


def load(directory):
    parts = {}
    for name in sorted(os.listdir(directory)):
        m = re.fullmatch(r"(history|queue|fleet|fleet-slow|workers)-(\d+)\.txt", name)
        if not m:
            continue
        figures, load_before, load_after = {}, "", ""
        with open(os.path.join(directory, name)) as f:
            for line in f:
                if line.startswith("figure "):
                    k, v = line[7:].strip().split("=", 1)
                    figures[k] = float(v)
                elif line.startswith("load "):
                    load_before = line[5:].strip()
                elif line.startswith("load_after "):
                    load_after = line[11:].strip()
        parts[(m.group(1), int(m.group(2)))] = (figures, load_before, load_after)
    return parts


def load_rss(directory):
    """{workers: ([(minutes, MB)], {figure: value}, "load ...")} of DIR/rss-N.txt."""
    out = {}
    for name in sorted(os.listdir(directory)):
        m = re.fullmatch(r"rss-(\d+)\.txt", name)
        if not m:
            continue
        curve, figures, meta = [], {}, {}
        with open(os.path.join(directory, name)) as f:
            for line in f:
                w = line.split()
                if len(w) == 3 and w[0] == "rss":
                    curve.append((float(w[1]) / 60, float(w[2])))
                elif line.startswith("figure "):
                    k, v = line[7:].strip().split("=", 1)
                    figures[k] = float(v)
                elif w and w[0] in ("load", "load_after", "start", "end"):
                    meta[w[0]] = " ".join(w[1:])
        out[int(m.group(1))] = (curve, figures, meta)
    return out


def ticks(lo, hi):
    out = []
    e = math.floor(math.log10(lo))
    while 10**e <= hi * 1.0001:
        if 10**e >= lo / 1.0001:
            out.append(10**e)
        e += 1
    return out


def fmt(v):
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def chart(path, title, xlabel, ylabel, series, logy=True, logx=True):
    """series: [(label, [(x, y), ...])]; log (or linear) x, log (or linear) y."""
    pts = [p for _, s in series for p in s if p[1] > 0]
    if not pts:
        return
    W, H, L, R, T, B = 640, 400, 70, 190, 40, 50
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    if not logx:
        x0 = 0
    if x0 == x1:
        x1 = x0 * 10 if x0 > 0 else 1
    if logy:
        y0 = 10 ** math.floor(math.log10(min(ys)))
        y1 = 10 ** math.ceil(math.log10(max(ys)))
    else:
        y0, y1 = 0, max(ys) * 1.1
    def X(x):
        if not logx:
            return L + (x - x0) / (x1 - x0) * (W - L - R)
        return L + (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * (W - L - R)
    def Y(y):
        if logy:
            f = (math.log10(max(y, y0)) - math.log10(y0)) / (math.log10(y1) - math.log10(y0))
        else:
            f = (y - y0) / (y1 - y0)
        return H - B - f * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2 - R / 2}" y="20" text-anchor="middle" font-size="13">{title}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">{xlabel}</text>',
         f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 {(T + H - B) / 2})">{ylabel}</text>']
    for t in (ticks(x0, x1) if logx else [x1 * k / 6 for k in range(7)]):
        o.append(f'<line x1="{X(t):.1f}" y1="{H - B}" x2="{X(t):.1f}" y2="{H - B + 4}" stroke="black"/>')
        o.append(f'<text x="{X(t):.1f}" y="{H - B + 16}" text-anchor="middle">{fmt(t) if logx else f"{t:.0f}"}</text>')
    yt = ticks(y0, y1) if logy else [y1 * k / 5 for k in range(6)]
    for t in yt:
        o.append(f'<line x1="{L}" y1="{Y(t):.1f}" x2="{W - R}" y2="{Y(t):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{fmt(t) if t >= 1 else f"{t:g}"}</text>')
    for i, (label, s) in enumerate(series):
        s = sorted(p for p in s if p[1] > 0)
        if not s:
            continue
        c = COLORS[i % len(COLORS)]
        o.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' %
                 (c, " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s)))
        for x, y in s:
            o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{c}"/>')
        ly = T + 14 + 18 * i
        o.append(f'<line x1="{W - R + 10}" y1="{ly - 4}" x2="{W - R + 30}" y2="{ly - 4}" stroke="{c}" stroke-width="2"/>')
        o.append(f'<text x="{W - R + 34}" y="{ly}">{label}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "bench/results/scale"
    images = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "images")
    parts = load(directory)
    names = sorted({k for f, _, _ in parts.values() for k in f})
    with open(os.path.join(directory, "figures.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["part", "size", "load_before", "load_after"] + names)
        for (kind, n), (fig, lb, la) in sorted(parts.items()):
            w.writerow([kind, n, lb, la] + [fig.get(k, "") for k in names])

    def series(kind, key, scale=1.0):
        return [(n, fig[key] * scale) for (k, n), (fig, _, _) in parts.items() if k == kind and key in fig]

    chart(os.path.join(images, "scale_reads.svg"),
          "Reads with 1,000 queued on N finished runs", "runs in the store", "ms (log)",
          [("trainq status", series("history", "cli_status_ms")),
           ("status, before", series("history", "base_cli_status_ms")),
           ("status in process", series("history", "status_ms")),
           ("show COMMIT", series("history", "cli_show_ms")),
           ("show, before", series("history", "base_cli_show_ms")),
           ("report --since 1d", series("history", "cli_report_1d_ms")),
           ("report (newest 50)", series("history", "cli_report_ms")),
           ("report, before", series("history", "base_cli_report_1d_ms"))])
    chart(os.path.join(images, "scale_http.svg"),
          "serve's routes over HTTP, 1,000 queued on N runs", "runs in the store", "ms (log)",
          [("dashboard overview (3 routes)", series("history", "http_dash_overview_ms")),
           ("/dash/api/status", series("history", "http_dash_status_ms")),
           ("/dash/api/experiments", series("history", "http_dash_experiments_ms")),
           ("/dash/api/commit/SHA", series("history", "http_dash_commit_ms")),
           ("/api/v1/status", series("history", "http_status_ms")),
           ("/api/v1/report (table)", series("history", "http_report_table_ms")),
           ("/dash/api/report?since=1d", series("history", "http_dash_report_1d_ms"))])
    chart(os.path.join(images, "scale_dispatch.svg"),
          "Lease + complete with N runs queued", "runs queued", "runs/s",
          [("Lease(1) (serve --inproc)", series("queue", "lease1_runs_per_s")),
           ("Lease(8)", series("queue", "lease8_runs_per_s")),
           ("LeaseForMachine(1) (worker API)", series("queue", "machine_lease1_runs_per_s")),
           ("LeaseForMachine(4)", series("queue", "machine_lease4_runs_per_s"))], logy=False)
    chart(os.path.join(images, "scale_fleet.svg"),
          "Fleet tick (Fleet::Step) at N machines", "machines", "ms (log)",
          [("tick, all busy", series("fleet", "fleet_tick_busy_ms")),
           ("tick, a tenth idle", series("fleet", "fleet_tick_some_idle_ms"))])

    chart(os.path.join(images, "scale_heartbeats.svg"),
          "Heartbeats over HTTP: N workers, one each per 10 s", "workers", "ms (log)",
          [("heartbeat p50", series("workers", "heartbeat_p50_ms")),
           ("heartbeat p99", series("workers", "heartbeat_p99_ms")),
           ("webhook p50 (meanwhile)", series("workers", "webhook_p50_ms")),
           ("webhook p99 (meanwhile)", series("workers", "webhook_p99_ms"))])

    rss = load_rss(directory)
    if rss:
        chart(os.path.join(images, "scale_rss.svg"),
              "serve's RSS, N workers beating every 10 s", "minutes", "MB",
              [(f"{w:,} workers", curve) for w, (curve, _, _) in sorted(rss.items())],
              logy=False, logx=False)

    def table(kind, rows):
        sizes = sorted(n for (k, n) in parts if k == kind)
        if not sizes:
            return
        print(f"| {kind} | " + " | ".join(f"{n:,}" for n in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        for label, key in rows:
            cells = []
            for n in sizes:
                v = parts[(kind, n)][0].get(key)
                cells.append("" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3g}"))
            print(f"| {label} | " + " | ".join(cells) + " |")
        print("| load average before / after | " +
              " | ".join(f"{parts[(kind, n)][1]} / {parts[(kind, n)][2]}" for n in sizes) + " |")
        print()

    table("history", [("fill, s", "fill_s"), ("database, MB", "db_mb"),
                      ("`trainq status`, ms", "cli_status_ms"),
                      ("`trainq status`, before (schema 11), ms", "base_cli_status_ms"),
                      ("`trainq status --json`, ms", "cli_status_json_ms"),
                      ("status in process, ms", "status_ms"),
                      ("status in process, VM steps", "status_vm_steps"),
                      ("`trainq show COMMIT`, ms", "cli_show_ms"),
                      ("`trainq show`, before, ms", "base_cli_show_ms"),
                      ("`trainq report --since 1d`, ms", "cli_report_1d_ms"),
                      ("`trainq report --since 1d`, before, ms", "base_cli_report_1d_ms"),
                      ("costs (status), VM steps", "costs_vm_steps"),
                      ("runnable demand (fleet), VM steps", "runnable_demand_vm_steps"),
                      ("lease+complete (Lease 1), runs/s", "lease1_runs_per_s"),
                      ("lease+complete (LeaseForMachine 4), runs/s", "machine_lease4_runs_per_s")])
    table("queue", [("fill, s", "fill_s"), ("database, MB", "db_mb"),
                    ("`trainq status`, ms", "cli_status_ms"),
                    ("status in process, ms", "status_ms"),
                    ("lease+complete, Lease(1), runs/s", "lease1_runs_per_s"),
                    ("lease+complete, Lease(8), runs/s", "lease8_runs_per_s"),
                    ("lease+complete, LeaseForMachine(1), runs/s", "machine_lease1_runs_per_s"),
                    ("lease+complete, LeaseForMachine(4), runs/s", "machine_lease4_runs_per_s"),
                    ("VM steps per run, LeaseForMachine(1)", "machine_lease1_vm_steps_per_run"),
                    ("runnable demand (fleet), ms", "runnable_demand_ms"),
                    ("runnable demand, VM steps", "runnable_demand_vm_steps")])
    table("history", [("show in process, ms", "show_ms"),
                      ("show in process, VM steps", "show_vm_steps"),
                      ("`trainq report` (newest 50), ms", "cli_report_ms"),
                      ("report in process, VM steps", "report_table_vm_steps"),
                      ("report --experiment in process, VM steps", "report_experiment_vm_steps"),
                      ("`trainq machines --batches`, ms", "cli_machines_batches_ms"),
                      ("per-batch costs (newest 50), VM steps", "costs_per_batch_vm_steps"),
                      ("HTTP: dashboard overview (status + experiments + sweeps), ms",
                       "http_dash_overview_ms"),
                      ("HTTP: /dash/api/status, ms", "http_dash_status_ms"),
                      ("HTTP: /dash/api/experiments, ms", "http_dash_experiments_ms"),
                      ("HTTP: /dash/api/sweeps, ms", "http_dash_sweeps_ms"),
                      ("HTTP: /dash/api/commit/SHA, ms", "http_dash_commit_ms"),
                      ("HTTP: /dash/api/run/1, ms", "http_dash_run_ms"),
                      ("HTTP: /dash/api/report?since=1d, ms", "http_dash_report_1d_ms"),
                      ("HTTP: /api/v1/status, ms", "http_status_ms"),
                      ("HTTP: /api/v1/report (table, newest 50), ms", "http_report_table_ms"),
                      ("HTTP: /api/v1/report?since=1d, ms", "http_report_1d_ms")])
    table("fleet-slow", [("boot delay, ms", "fleet_boot_delay_ms"),
                         ("boot failure rate", "fleet_boot_fail"),
                         ("first tick (boots), s", "fleet_boot_step_s"),
                         ("ticks until all up", "fleet_boot_ticks"),
                         ("longest tick, s", "fleet_boot_tick_max_s"),
                         ("boots tried", "fleet_boots"),
                         ("boots failed", "fleet_boots_failed"),
                         ("machines up", "fleet_machines_booted"),
                         ("fleet tick, all busy, ms", "fleet_tick_busy_ms")])
    table("fleet", [("boot step (all machines), s", "fleet_boot_step_s"),
                    ("fleet tick, all busy, ms", "fleet_tick_busy_ms"),
                    ("fleet tick, all busy, VM steps", "fleet_tick_busy_vm_steps"),
                    ("fleet tick, a tenth idle, ms", "fleet_tick_some_idle_ms"),
                    ("heartbeats through the store, /s", "store_heartbeat_per_s"),
                    ("VM steps per heartbeat", "store_heartbeat_vm_steps")])
    table("workers", [("register + lease over HTTP, workers/s", "register_lease_per_s"),
                      ("heartbeats sent, /s", "heartbeats_per_s"),
                      ("heartbeat p50, ms", "heartbeat_p50_ms"),
                      ("heartbeat p99, ms", "heartbeat_p99_ms"),
                      ("heartbeat max, ms", "heartbeat_max_ms"),
                      ("heartbeats failed", "heartbeat_failed"),
                      ("webhook p50, ms", "webhook_p50_ms"),
                      ("webhook p99, ms", "webhook_p99_ms"),
                      ("webhooks failed", "webhook_failed"),
                      ("serve RSS before, MB", "serve_rss_before_mb"),
                      ("serve RSS max, MB", "serve_rss_max_mb"),
                      ("serve RSS after, MB", "serve_rss_after_mb")])

    for w, (curve, figures, meta) in sorted(rss.items()):
        if not curve:
            continue
        mbs = [mb for _, mb in curve]
        print(f"RSS at {w:,} workers: {meta.get('start', '?')} to {meta.get('end', 'cut short')}, "
              f"{curve[-1][0]:.0f} min sampled; {mbs[0]:.1f} MB at start, {max(mbs):.1f} MB max, "
              f"{mbs[-1]:.1f} MB last; load before {meta.get('load', '?')}, after "
              f"{meta.get('load_after', '?')}; heartbeat p99 {figures.get('heartbeat_p99_ms', float('nan')):.1f} ms, "
              f"failed {figures.get('heartbeat_failed', float('nan')):.0f}")


if __name__ == "__main__":
    main()