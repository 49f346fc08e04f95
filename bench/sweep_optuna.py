#!/usr/bin/python3
"""Optuna's TPE for bench_sweep, driven over pipes (ask/tell).

argv[1] is JSON: {"params": [{"name", "kind": uniform|log_uniform|int_log, "lo", "hi"}],
                  "seed": S, "startup": N, "trials": T}
For each of T trials it prints the trial's parameters as one JSON line and reads
the run's value (maximised) as one line from stdin. The objective and its noise
stay in bench_sweep, so every strategy sees the same values. Needs Debian's
python3-optuna (3.1.0; ci/install-deps installs it).
"""
import json
import sys

try:
    import optuna
except ImportError:
    sys.stderr.write("sweep_optuna.py: python3-optuna is not installed "
                     "(apt-get install python3-optuna, or ci/install-deps)\n")
    sys.exit(3)


def main():
    spec = json.loads(sys.argv[1])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=spec["seed"], n_startup_trials=spec["startup"])
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(spec["trials"]):
        trial = study.ask()
        params = {}
        for p in spec["params"]:
            if p["kind"] == "int_log":
                params[p["name"]] = trial.suggest_int(p["name"], int(p["lo"]), int(p["hi"]), log=True)
            else:
                params[p["name"]] = trial.suggest_float(p["name"], p["lo"], p["hi"],
                                                        log=p["kind"] == "log_uniform")
        sys.stdout.write(json.dumps(params) + "\n")
        sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            return
        study.tell(trial, float(line))
    sys.stdout.write(json.dumps({"optuna": optuna.__version__}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
