#!/usr/bin/env python3
"""A fake MLflow tracking server for trainq's tests (issue 43).

Written for trainq from MLflow's public REST API documentation
(https://mlflow.org/docs/latest/rest-api.html): the endpoint paths, field
names, enum values, error codes and the documented per-call limits of
runs/log-batch are facts taken from it; no MLflow code or .proto file is used.

It keeps experiments and runs in memory and checks every request strictly:
unknown fields, wrong types and missing required fields answer 400
INVALID_PARAMETER_VALUE, as do log-batch calls over 1,000 metrics, 100 params,
100 tags or 1,000 items in all, too long keys and values, and a param logged
again with another value. A metric point logged again with the same
(key, value, timestamp, step) is kept once, as MLflow's SQL store does.

Test controls (no auth):
  POST /fake/fail   {"endpoint": "runs/create", "status": 500, "times": 1, "after": 0}
                    the next `times` calls to `endpoint`, after `after` more, answer `status`
                    (429 with Retry-After: `retry_after` seconds, default 1; 404 as RESOURCE_DOES_NOT_EXIST; 5xx with an
                    INTERNAL_ERROR body)
  GET  /fake/state  {"experiments": [...], "runs": [...], "calls": {endpoint: n}, "errors": [...]}

Usage: fake_mlflow.py --port-file FILE [--token TOKEN]
"""
import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PREFIX = "/api/2.0/mlflow/"
RUN_STATUSES = {"RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"}
VIEW_TYPES = {"ACTIVE_ONLY", "DELETED_ONLY", "ALL"}
MAX_METRICS, MAX_PARAMS, MAX_TAGS, MAX_TOTAL = 1000, 100, 100, 1000
MAX_KEY, MAX_PARAM_VALUE, MAX_TAG_VALUE = 250, 6000, 5000


class ApiError(Exception):
    def __init__(self, code, message, status=400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def bad(message):
    return ApiError("INVALID_PARAMETER_VALUE", message)


# Field types: "string", "int64", "int32", "double", ("array", item), ("object", schema)
KV = {"key": ("string", True), "value": ("string", True)}
METRIC = {"key": ("string", True), "value": ("double", True), "timestamp": ("int64", True),
          "step": ("int64", False)}
SCHEMAS = {
    "experiments/create": {"name": ("string", True), "artifact_location": ("string", False),
                           "tags": (("array", ("object", KV)), False)},
    "experiments/get-by-name": {"experiment_name": ("string", True)},
    "runs/create": {"experiment_id": ("string", True), "user_id": ("string", False),
                    "run_name": ("string", False), "start_time": ("int64", False),
                    "tags": (("array", ("object", KV)), False)},
    "runs/update": {"run_id": ("string", False), "run_uuid": ("string", False),
                    "status": ("string", False), "end_time": ("int64", False),
                    "run_name": ("string", False)},
    "runs/log-batch": {"run_id": ("string", True),
                       "metrics": (("array", ("object", METRIC)), False),
                       "params": (("array", ("object", KV)), False),
                       "tags": (("array", ("object", KV)), False)},
    "runs/search": {"experiment_ids": (("array", "string"), True), "filter": ("string", False),
                    "run_view_type": ("string", False), "max_results": ("int32", False),
                    "order_by": (("array", "string"), False), "page_token": ("string", False)},
}


def check(value, typ, path):
    """Checks value against typ (proto3 JSON mapping: 64-bit ints may be strings)."""
    if typ == "string":
        if not isinstance(value, str):
            raise bad(f"Invalid value {json.dumps(value)} for parameter '{path}': expected a string")
        return value
    if typ in ("int64", "int32"):
        if isinstance(value, bool) or not (isinstance(value, int) or
                                           (isinstance(value, str) and re.fullmatch(r"-?\d+", value))):
            raise bad(f"Invalid value {json.dumps(value)} for parameter '{path}': expected an integer")
        return int(value)
    if typ == "double":
        if isinstance(value, bool):
            raise bad(f"Invalid value {json.dumps(value)} for parameter '{path}': expected a number")
        if isinstance(value, (int, float)):
            return float(value)
        if value in ("NaN", "Infinity", "-Infinity"):
            return float(value.replace("Infinity", "inf"))
        raise bad(f"Invalid value {json.dumps(value)} for parameter '{path}': expected a number")
    kind, inner = typ
    if kind == "array":
        if not isinstance(value, list):
            raise bad(f"Invalid value {json.dumps(value)[:80]} for parameter '{path}': expected an array")
        return [check(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "object":
        return check_object(value, inner, path)
    raise AssertionError(typ)


def check_object(value, schema, path):
    if not isinstance(value, dict):
        raise bad(f"Invalid value for parameter '{path}': expected an object")
    for k in value:
        if k not in schema:
            raise bad(f"Unknown field '{(path + '.' if path else '') + k}'")
    out = {}
    for k, (typ, required) in schema.items():
        where = (path + "." if path else "") + k
        if k not in value or value[k] is None:
            if required:
                raise bad(f"Missing value for required parameter '{where}'")
            continue
        out[k] = check(value[k], typ, where)
    return out


def check_key(key, what):
    if not key or len(key) > MAX_KEY:
        raise bad(f"{what} key '{key[:300]}' has length {len(key)}, which exceeds the limit of {MAX_KEY}")
    if not re.fullmatch(r"[\w\-. /]+", key):
        raise bad(f"Invalid {what.lower()} name: '{key}'. Names may only contain alphanumerics, "
                  "underscores (_), dashes (-), periods (.), spaces ( ), and slashes (/).")


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.experiments = {}  # id -> dict
        self.runs = {}         # id -> dict
        self.calls = {}
        self.errors = []
        self.failures = []     # [{"endpoint", "status", "times", "after"}]

    def experiment_json(self, e):
        return {"experiment_id": e["id"], "name": e["name"], "artifact_location": e["artifact_location"],
                "lifecycle_stage": "active", "creation_time": e["created"], "last_update_time": e["created"],
                "tags": [{"key": k, "value": v} for k, v in e["tags"].items()]}

    def run_json(self, r):
        latest = {}
        for (k, v, ts, step) in r["metrics"]:
            if k not in latest or (step, ts) >= (latest[k]["step"], latest[k]["timestamp"]):
                latest[k] = {"key": k, "value": v, "timestamp": ts, "step": step}
        info = {"run_id": r["id"], "run_uuid": r["id"], "run_name": r["name"],
                "experiment_id": r["experiment_id"], "user_id": r["user_id"], "status": r["status"],
                "start_time": r["start_time"], "artifact_uri": f"mlflow-artifacts:/{r['id']}/artifacts",
                "lifecycle_stage": "active"}
        if r["end_time"] is not None:
            info["end_time"] = r["end_time"]
        return {"info": info,
                "data": {"metrics": list(latest.values()),
                         "params": [{"key": k, "value": v} for k, v in r["params"].items()],
                         "tags": [{"key": k, "value": v} for k, v in r["tags"].items()]}}

    def run(self, run_id):
        r = self.runs.get(run_id)
        if r is None:
            raise ApiError("RESOURCE_DOES_NOT_EXIST", f"Run with id={run_id} not found", 404)
        return r

    def handle(self, endpoint, body):
        if endpoint == "experiments/get-by-name":
            for e in self.experiments.values():
                if e["name"] == body["experiment_name"]:
                    return {"experiment": self.experiment_json(e)}
            raise ApiError("RESOURCE_DOES_NOT_EXIST",
                           f"Could not find experiment with name '{body['experiment_name']}'", 404)
        if endpoint == "experiments/create":
            name = body["name"]
            if not name:
                raise bad("Invalid experiment name: ''")
            if any(e["name"] == name for e in self.experiments.values()):
                raise ApiError("RESOURCE_ALREADY_EXISTS", f"Experiment '{name}' already exists.")
            eid = str(len(self.experiments) + 1)
            self.experiments[eid] = {"id": eid, "name": name, "created": int(time.time() * 1000),
                                     "artifact_location": body.get("artifact_location", f"mlflow-artifacts:/{eid}"),
                                     "tags": {t["key"]: t["value"] for t in body.get("tags", [])}}
            return {"experiment_id": eid}
        if endpoint == "runs/create":
            eid = body["experiment_id"]
            if eid not in self.experiments:
                raise ApiError("RESOURCE_DOES_NOT_EXIST", f"No Experiment with id={eid} exists", 404)
            tags = {}
            for t in body.get("tags", []):
                check_key(t["key"], "Tag")
                if len(t["value"]) > MAX_TAG_VALUE:
                    raise bad(f"Tag value for '{t['key']}' exceeds {MAX_TAG_VALUE} characters")
                tags[t["key"]] = t["value"]
            rid = uuid.uuid4().hex
            name = body.get("run_name") or tags.get("mlflow.runName") or "run-" + rid[:6]
            tags["mlflow.runName"] = name
            self.runs[rid] = {"id": rid, "experiment_id": eid, "name": name,
                              "user_id": body.get("user_id", ""), "status": "RUNNING",
                              "start_time": body.get("start_time", int(time.time() * 1000)),
                              "end_time": None, "tags": tags, "params": {}, "metrics": [],
                              "metric_set": set()}
            return {"run": self.run_json(self.runs[rid])}
        if endpoint == "runs/update":
            rid = body.get("run_id") or body.get("run_uuid")
            if not rid:
                raise bad("Missing value for required parameter 'run_id'")
            r = self.run(rid)
            if "status" in body:
                if body["status"] not in RUN_STATUSES:
                    raise bad(f"Invalid value {body['status']} for parameter 'status'")
                r["status"] = body["status"]
            if "end_time" in body:
                r["end_time"] = body["end_time"]
            if "run_name" in body:
                r["name"] = body["run_name"]
            info = self.run_json(r)["info"]
            return {"run_info": info}
        if endpoint == "runs/log-batch":
            r = self.run(body["run_id"])
            metrics, params, tags = body.get("metrics", []), body.get("params", []), body.get("tags", [])
            if len(metrics) > MAX_METRICS:
                raise bad(f"A batch logging request can contain at most {MAX_METRICS} metrics. Got {len(metrics)} metrics.")
            if len(params) > MAX_PARAMS:
                raise bad(f"A batch logging request can contain at most {MAX_PARAMS} params. Got {len(params)} params.")
            if len(tags) > MAX_TAGS:
                raise bad(f"A batch logging request can contain at most {MAX_TAGS} tags. Got {len(tags)} tags.")
            if len(metrics) + len(params) + len(tags) > MAX_TOTAL:
                raise bad(f"A batch logging request can contain at most {MAX_TOTAL} total items.")
            seen = set()
            for p in params:
                check_key(p["key"], "Param")
                if len(p["value"]) > MAX_PARAM_VALUE:
                    raise bad(f"Param value for '{p['key']}' exceeds {MAX_PARAM_VALUE} characters")
                if p["key"] in seen:
                    raise bad(f"Duplicate parameter keys have been submitted: '{p['key']}'")
                seen.add(p["key"])
                old = r["params"].get(p["key"])
                if old is not None and old != p["value"]:
                    raise bad(f"Changing param values is not allowed. Param with key='{p['key']}' was "
                              f"already logged with value='{old}' for run ID='{r['id']}'. "
                              f"Attempted logging new value '{p['value']}'.")
            for t in tags:
                check_key(t["key"], "Tag")
                if len(t["value"]) > MAX_TAG_VALUE:
                    raise bad(f"Tag value for '{t['key']}' exceeds {MAX_TAG_VALUE} characters")
            for m in metrics:
                check_key(m["key"], "Metric")
            for p in params:
                r["params"][p["key"]] = p["value"]
            for t in tags:
                r["tags"][t["key"]] = t["value"]
            for m in metrics:
                point = (m["key"], m["value"], m["timestamp"], m.get("step", 0))
                if point not in r["metric_set"]:
                    r["metric_set"].add(point)
                    r["metrics"].append(point)
            return {}
        if endpoint == "runs/search":
            view = body.get("run_view_type", "ACTIVE_ONLY")
            if view not in VIEW_TYPES:
                raise bad(f"Invalid value {view} for parameter 'run_view_type'")
            mr = body.get("max_results", 1000)
            if mr <= 0 or mr > 50000:
                raise bad(f"Invalid value {mr} for parameter 'max_results' supplied.")
            for eid in body["experiment_ids"]:
                if eid not in self.experiments:
                    raise ApiError("RESOURCE_DOES_NOT_EXIST", f"No Experiment with id={eid} exists", 404)
            want = None
            f = body.get("filter", "").strip()
            if f:
                m = re.fullmatch(r"tags\.(?:`([^`]+)`|\"([^\"]+)\"|([\w.]+))\s*=\s*'([^']*)'", f)
                if not m:
                    raise bad(f"Invalid filter '{f}' (this fake knows tags.<key> = '<value>' only)")
                want = (m.group(1) or m.group(2) or m.group(3), m.group(4))
            runs = [r for r in self.runs.values() if r["experiment_id"] in body["experiment_ids"]
                    and (want is None or r["tags"].get(want[0]) == want[1])]
            runs.sort(key=lambda r: -r["start_time"])
            return {"runs": [self.run_json(r) for r in runs[:mr]]} if runs else {}
        raise ApiError("ENDPOINT_NOT_FOUND", f"No API endpoint for {endpoint}", 404)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None
    token = None

    def log_message(self, fmt, *args):
        sys.stderr.write("fake mlflow: " + fmt % args + "\n")

    def send(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.serve("GET")

    def do_POST(self):
        self.serve("POST")

    def serve(self, method):
        st = self.state
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if url.path == "/fake/state":
            with st.lock:
                runs = []
                for r in st.runs.values():
                    j = st.run_json(r)
                    j["metric_points"] = [{"key": k, "value": v, "timestamp": ts, "step": s}
                                          for (k, v, ts, s) in r["metrics"]]
                    runs.append(j)
                return self.send(200, {"experiments": [st.experiment_json(e) for e in st.experiments.values()],
                                       "runs": runs, "calls": st.calls, "errors": st.errors})
        if url.path == "/fake/fail":
            with st.lock:
                st.failures.append(json.loads(raw))
            return self.send(200, {})
        if not url.path.startswith(PREFIX):
            return self.send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": "no such path"})
        endpoint = url.path[len(PREFIX):]
        try:
            if self.token is not None and self.headers.get("Authorization") != "Bearer " + self.token:
                raise ApiError("UNAUTHENTICATED", "You are not authenticated.", 401)
            schema = SCHEMAS.get(endpoint)
            if schema is None:
                raise ApiError("ENDPOINT_NOT_FOUND", f"No API endpoint for {endpoint}", 404)
            want = "GET" if endpoint == "experiments/get-by-name" else "POST"
            if method != want:
                raise ApiError("ENDPOINT_NOT_FOUND", f"{endpoint} takes {want}", 405)
            if method == "GET":
                q = parse_qs(url.query, keep_blank_values=True)
                body = {k: v[0] for k, v in q.items()}
            else:
                if "application/json" not in (self.headers.get("Content-Type") or ""):
                    raise bad("Content-Type must be application/json")
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    raise ApiError("MALFORMED_REQUEST", "request body is not JSON")
            body = check_object(body, schema, "")
            with st.lock:
                st.calls[endpoint] = st.calls.get(endpoint, 0) + 1
                for f in st.failures:
                    if f["endpoint"] == endpoint and f.get("times", 1) > 0:
                        if f.get("after", 0) > 0:
                            f["after"] -= 1
                            continue
                        f["times"] = f.get("times", 1) - 1
                        status = f.get("status", 500)
                        st.errors.append({"endpoint": endpoint, "status": status})
                        if status == 429:
                            return self.send(429, {"error_code": "REQUEST_LIMIT_EXCEEDED",
                                                   "message": "Too many requests"},
                                             [("Retry-After", str(f.get("retry_after", 1)))])
                        if status == 404:  # as if what was asked for was not there (yet)
                            return self.send(404, {"error_code": "RESOURCE_DOES_NOT_EXIST",
                                                   "message": "injected: not found"})
                        return self.send(status, {"error_code": "INTERNAL_ERROR",
                                                  "message": "injected failure"})
                out = st.handle(endpoint, body)
            self.send(200, out)
        except ApiError as e:
            with st.lock:
                st.errors.append({"endpoint": endpoint, "status": e.status, "error_code": e.code,
                                  "message": e.message})
            self.send(e.status, {"error_code": e.code, "message": e.message})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token")
    a = ap.parse_args()
    Handler.state = State()
    Handler.token = a.token
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
