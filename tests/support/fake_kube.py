#!/usr/bin/env python3
"""A fake Kubernetes API server on loopback, for tests of trainq's kubernetes
provider (cloud/kubernetes_provider.h) and of `trainq serve` over it.

It speaks the core/v1 wire format for what the provider (and `kubectl get`)
uses: pods (create, get, list with labelSelector / fieldSelector / limit +
continue, delete with DeleteOptions, log), secrets (create, get, replace,
delete, list), events (list with fieldSelector), Status objects for errors,
resourceVersion on every object and list, and the discovery documents
kubectl reads first (/api, /apis, /api/v1). A `watch=1` list streams
newline-delimited watch events; a resourceVersion older than the fake keeps
(--watch-history) answers 410 Gone, as etcd's compaction does.

Request bodies of pods, secrets and DeleteOptions are checked against
Kubernetes' published OpenAPI v3 schema (tests/fixtures/kubernetes/, see
its README) the way the API server's strict field validation does: unknown
fields, wrong types and missing required fields are refused (400 / 422).

One fake node runs the pods: a pod is scheduled when its requests fit the
node's free capacity (--node-cpu, --node-memory, --node-gpus, the GPU
resource --gpu-resource), else it stays Pending with PodScheduled=False /
Unschedulable and a FailedScheduling event, as kube-scheduler writes them.
A scheduled pod's container runs as a local process: its command and args,
its env (values and the downward API's metadata.name, metadata.namespace,
status.podIP), its secret volumes written as files under the pod's
directory, and any argument or env value under a volume's mountPath pointed
at those files. Images named registry.invalid/... fail with ErrImagePull then
ImagePullBackOff (and the Failed/BackOff events). A container that exits
ends the pod (restartPolicy Never): Succeeded or Failed with its exit code.
Deleting a pod sends SIGTERM to the container's process group, SIGKILL
after the grace period, and removes the pod when the process is gone.

With --runtime podman the node is a real container runtime instead: a
scheduled pod is handed to `podman kube play` (with its Secrets) by a small
shim process that stands where the local process would (its exit is the
container's, its output the container's log; SIGTERM stops the pod with the
pod's grace period, and the pod is removed when it ends or is killed). What
podman's kube play lacks is filled in and listed in podman_manifest().

Test controls (not Kubernetes API), under /fake/:
  POST /fake/disrupt/NS/NAME   preemption: DisruptionTarget=True
                               (PreemptionByScheduler), then a deletion
  POST /fake/evict/NS/NAME     node-pressure eviction: phase Failed, reason Evicted
  POST /fake/node              {"cpu": "8", "nvidia.com/gpu": "2", ...}: capacity
  POST /fake/quota             {"pods": N} (null: none): a ResourceQuota on pods
  POST /fake/forbid            {"verb": "create", "resource": "pods"} (RBAC)
  GET  /fake/requests          every API request so far (method, path, body)

Usage: fake_kube.py --dir DIR [--token T] [--tls-cert C --tls-key K] [--port-file F]
       [--node-gpus N] [--runtime podman [--podman CMD] [--podman-bind HOST:PATH]...] ...
It writes its port to --port-file once it listens, and kills every pod's
process when it gets SIGTERM.
"""
import argparse
import base64
import copy
import datetime
import hashlib
import json
import os
import re
import shlex
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_FILE = os.path.join(HERE, "..", "fixtures", "kubernetes", "core_v1_pod_secret.openapi.json")

FATAL_IMAGE_PREFIX = "registry.invalid/"


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- OpenAPI v3 schema checks -------------------------------------------------

class Schema:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.schemas = json.load(f)["components"]["schemas"]

    def resolve(self, s):
        while "$ref" in s:
            s = self.schemas[s["$ref"].split("/")[-1]]
        return s

    def check(self, name, value):
        """[(http status, message)] of what is wrong with `value` as `name`."""
        errors = []
        self._check(self.schemas[name], value, "", errors)
        return errors

    def _check(self, s, v, path, errors):
        s = self.resolve(s)
        for part in s.get("allOf", []):
            self._check(part, v, path, errors)
        if s.get("x-kubernetes-int-or-string"):
            if not (isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))):
                errors.append((422, f"{path or '<root>'}: expected an integer or a string"))
            return
        t = s.get("type")
        where = path or "<root>"
        if t == "object" or ("properties" in s and t is None):
            if not isinstance(v, dict):
                errors.append((400, f"{where}: expected an object, got {type(v).__name__}"))
                return
            props = s.get("properties")
            extra = s.get("additionalProperties")
            for k, x in v.items():
                sub = f"{path}.{k}" if path else k
                if props is not None and k in props:
                    self._check(props[k], x, sub, errors)
                elif isinstance(extra, dict):
                    self._check(extra, x, sub, errors)
                elif props is not None:
                    errors.append((400, f'strict decoding error: unknown field "{sub}"'))
            for r in s.get("required", []):
                if r not in v:
                    errors.append((422, f"{path + '.' if path else ''}{r}: Required value"))
        elif t == "array":
            if not isinstance(v, list):
                errors.append((400, f"{where}: expected an array"))
                return
            for i, x in enumerate(v):
                self._check(s.get("items", {}), x, f"{path}[{i}]", errors)
        elif t == "string":
            if not isinstance(v, str):
                errors.append((400, f"{where}: expected a string, got {json.dumps(v)}"))
                return
            if s.get("format") == "byte":
                try:
                    base64.b64decode(v, validate=True)
                except Exception:
                    errors.append((400, f"{where}: illegal base64 data"))
            if "enum" in s and v not in s["enum"]:
                errors.append((422, f'{where}: Unsupported value: "{v}": supported values: '
                               + ", ".join(f'"{e}"' for e in s["enum"])))
        elif t == "integer":
            if not isinstance(v, int) or isinstance(v, bool):
                errors.append((400, f"{where}: expected an integer, got {json.dumps(v)}"))
        elif t == "number":
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                errors.append((400, f"{where}: expected a number"))
        elif t == "boolean":
            if not isinstance(v, bool):
                errors.append((400, f"{where}: expected a boolean"))


DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate_meta(meta, errors):
    name = meta.get("name", "")
    if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        errors.append((422, f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain'))
    for k, v in (meta.get("labels") or {}).items():
        if len(v) > 63 or not LABEL_VALUE.match(v):
            errors.append((422, f'metadata.labels: Invalid value: "{v}": a valid label value'))


def parse_quantity(q):
    """A resource quantity in base units (cpu in cores)."""
    q = str(q)
    m = re.match(r"^([0-9.]+)([a-zA-Z]*)$", q)
    if not m:
        raise ValueError(q)
    n, suffix = float(m.group(1)), m.group(2)
    mult = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
            "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4}
    if suffix not in mult:
        raise ValueError(q)
    return n * mult[suffix]


# ---- the cluster ---------------------------------------------------------------

class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def status_object(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason, "code": code}
    if details:
        s["details"] = details
    return s


class Cluster:
    def __init__(self, args):
        self.args = args
        self.lock = threading.RLock()
        self.rv = 100
        self.pods = {}      # (ns, name) -> pod
        self.secrets = {}   # (ns, name) -> secret
        self.events = []    # Event objects
        self.procs = {}     # (ns, name) -> Popen
        self.kill_at = {}   # (ns, name) -> time for SIGKILL
        self.gone_at = {}   # (ns, name) -> when a deleted pod whose process ended goes
        self.history = []   # (rv, type, pod) for watches
        self.capacity = {"cpu": parse_quantity(args.node_cpu),
                         "memory": parse_quantity(args.node_memory),
                         args.gpu_resource: float(args.node_gpus)}
        self.quota_pods = None
        self.forbidden = set()
        self.requests = []
        self.schema = Schema(SCHEMA_FILE)
        self.cond = threading.Condition(self.lock)
        self.podman_pods = set()  # (ns, name) handed to podman, not yet removed
        self.podman_version = (0, 0)
        if args.runtime == "podman":
            out = subprocess.run(shlex.split(args.podman) + ["version", "--format",
                                                             "{{.Client.Version}}"],
                                 capture_output=True, text=True, check=True).stdout
            self.podman_version = tuple(int(x) for x in re.findall(r"\d+", out)[:2])

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    def touch(self, obj, kind="MODIFIED"):
        obj["metadata"]["resourceVersion"] = self.next_rv()
        if obj.get("kind") == "Pod":
            self.history.append((self.rv, kind, copy.deepcopy(obj)))
            del self.history[:-self.args.watch_history]
            self.cond.notify_all()

    def event(self, pod, reason, message, type_="Normal", component="kubelet"):
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for e in self.events:
            io = e["involvedObject"]
            if io["name"] == name and io["namespace"] == ns and e["reason"] == reason \
                    and e["message"] == message:
                e["count"] += 1
                e["lastTimestamp"] = now_iso()
                e["metadata"]["resourceVersion"] = self.next_rv()
                return
        e = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": ns,
                          "uid": str(uuid.uuid4()), "resourceVersion": self.next_rv(),
                          "creationTimestamp": now_iso()},
             "involvedObject": {"kind": "Pod", "namespace": ns, "name": name,
                                "uid": pod["metadata"]["uid"], "apiVersion": "v1"},
             "reason": reason, "message": message, "type": type_,
             "source": {"component": component}, "count": 1,
             "firstTimestamp": now_iso(), "lastTimestamp": now_iso(),
             "reportingComponent": component}
        self.events.append(e)

    # -- pods --

    def requests_of(self, pod):
        total = {}
        for c in pod["spec"].get("containers", []):
            res = c.get("resources", {})
            for k, v in (res.get("requests") or res.get("limits") or {}).items():
                total[k] = total.get(k, 0) + parse_quantity(v)
        return total

    def used(self):
        used = {}
        for key, p in self.pods.items():
            if p["spec"].get("nodeName") and p["status"].get("phase") in ("Pending", "Running"):
                for k, v in self.requests_of(p).items():
                    used[k] = used.get(k, 0) + v
        return used

    def create_pod(self, ns, body):
        errors = self.schema.check("io.k8s.api.core.v1.Pod", body)
        meta = body.get("metadata", {})
        if not errors:
            validate_meta(meta, errors)
            if meta.get("namespace", ns) != ns:
                errors.append((400, "the namespace of the provided object does not match the "
                               "namespace sent on the request"))
            spec = body.get("spec", {})
            names = {v["name"] for v in spec.get("volumes", [])}
            for i, c in enumerate(spec.get("containers", [])):
                if not DNS1123_LABEL.match(c.get("name", "")):
                    errors.append((422, f"spec.containers[{i}].name: Invalid value"))
                for m in c.get("volumeMounts", []):
                    if m["name"] not in names:
                        errors.append((422, f"spec.containers[{i}].volumeMounts.name: Not found: "
                                       f"\"{m['name']}\""))
                # The API server's rule since 1.30: an unmasked /proc only
                # in a user namespace.
                if (c.get("securityContext") or {}).get("procMount") == "Unmasked" \
                        and spec.get("hostUsers") is not False:
                    errors.append((422, f"spec.containers[{i}].securityContext.procMount: "
                                   'Invalid value: "Unmasked": `hostUsers` must be false to use '
                                   "`Unmasked`"))
                res = c.get("resources", {})
                for k, v in (res.get("limits") or {}).items():
                    if "/" in k and res.get("requests", {}).get(k, v) != v:
                        errors.append((422, f"spec.containers[{i}].resources.requests[{k}]: "
                                       "Invalid value: must be equal to " + k + " limit"))
        if errors:
            code = max(c for c, _ in errors)
            reason = "BadRequest" if code == 400 else "Invalid"
            raise ApiError(code, reason, f'Pod "{meta.get("name", "")}" is invalid: '
                           + "; ".join(m for _, m in errors))
        name = meta["name"]
        if (ns, name) in self.pods:
            raise ApiError(409, "AlreadyExists", f'pods "{name}" already exists',
                           {"name": name, "kind": "pods"})
        if self.quota_pods is not None:
            used = sum(1 for (n, _), p in self.pods.items()
                       if n == ns and p["status"].get("phase") in ("Pending", "Running"))
            if used + 1 > self.quota_pods:
                raise ApiError(403, "Forbidden",
                               f'pods "{name}" is forbidden: exceeded quota: compute, requested: '
                               f"pods=1, used: pods={used}, limited: pods={self.quota_pods}",
                               {"name": name, "kind": "pods"})
        pod = copy.deepcopy(body)
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        m = pod["metadata"]
        m["namespace"] = ns
        m["uid"] = str(uuid.uuid4())
        m["creationTimestamp"] = now_iso()
        pod["spec"].setdefault("restartPolicy", "Always")
        pod["spec"].setdefault("terminationGracePeriodSeconds", 30)
        pod["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
        self.pods[(ns, name)] = pod
        self.touch(pod, "ADDED")
        self.schedule()
        return pod

    def schedule(self):
        """Binds Pending pods that fit; starts their containers."""
        for key in sorted(self.pods, key=lambda k: self.pods[k]["metadata"]["resourceVersion"]):
            pod = self.pods[key]
            if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            need = self.requests_of(pod)
            used = self.used()
            short = [k for k, v in need.items()
                     if v > 0 and used.get(k, 0) + v > self.capacity.get(k, 0)]
            if short:
                msg = ("0/1 nodes are available: "
                       + ", ".join(f"1 Insufficient {k}" for k in sorted(short))
                       + ". preemption: 0/1 nodes are available: 1 No preemption victims found "
                       "for incoming pod.")
                conds = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                          "message": msg, "lastProbeTime": None,
                          "lastTransitionTime": now_iso()}]
                if pod["status"].get("conditions") != conds:
                    pod["status"]["conditions"] = conds
                    self.touch(pod)
                self.event(pod, "FailedScheduling", msg, "Warning", "default-scheduler")
                continue
            pod["spec"]["nodeName"] = "fake-node-0"
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": now_iso()}]
            pod["status"]["hostIP"] = "127.0.0.1"
            self.event(pod, "Scheduled",
                       f"Successfully assigned {key[0]}/{key[1]} to fake-node-0", "Normal",
                       "default-scheduler")
            self.touch(pod)
            self.start(key, pod)

    def container_status(self, c, state, ready=False, started=False):
        return {"name": c["name"], "image": c["image"], "imageID": "", "ready": ready,
                "restartCount": 0, "started": started, "state": state}

    def start(self, key, pod):
        c = pod["spec"]["containers"][0]
        if c["image"].startswith(FATAL_IMAGE_PREFIX):
            msg = (f'Failed to pull image "{c["image"]}": failed to resolve reference '
                   f'"{c["image"]}": dial tcp: lookup registry.invalid: no such host')
            pod["status"]["containerStatuses"] = [self.container_status(
                c, {"waiting": {"reason": "ErrImagePull", "message": msg}})]
            self.event(pod, "Failed", msg, "Warning")
            self.touch(pod)
            return
        pod_dir = os.path.join(self.args.dir, key[0], key[1])
        os.makedirs(pod_dir, exist_ok=True)
        # Volumes: secrets written as files; mountPath -> local directory.
        mounts = {}
        vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        for m in c.get("volumeMounts", []):
            v = vols[m["name"]]
            local = os.path.join(pod_dir, "volumes", m["name"])
            os.makedirs(local, exist_ok=True)
            if "secret" in v:
                sec = self.secrets.get((key[0], v["secret"]["secretName"]))
                if sec is None:
                    pod["status"]["containerStatuses"] = [self.container_status(
                        c, {"waiting": {"reason": "ContainerCreating"}})]
                    self.event(pod, "FailedMount",
                               f'MountVolume.SetUp failed for volume "{m["name"]}" : secret '
                               f'"{v["secret"]["secretName"]}" not found', "Warning")
                    self.touch(pod)
                    pod["spec"]["nodeName"] = ""  # tried again on the next tick
                    return
                data = sec.get("data", {})
                items = v["secret"].get("items") or [{"key": k, "path": k} for k in data]
                for it in items:
                    p = os.path.join(local, it["path"])
                    with open(p, "wb") as f:
                        f.write(base64.b64decode(data[it["key"]]))
                    os.chmod(p, v["secret"].get("defaultMode", 0o644) & 0o777 | 0o400)
            mounts[m["mountPath"].rstrip("/")] = local

        def local_path(s):
            for mp, local in sorted(mounts.items(), key=lambda x: -len(x[0])):
                if s == mp or s.startswith(mp + "/"):
                    return local + s[len(mp):]
            return s

        pod["status"]["podIP"] = "127.0.0.1"
        pod["status"]["podIPs"] = [{"ip": "127.0.0.1"}]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": pod_dir,
               "HOSTNAME": key[1], "KUBERNETES_SERVICE_HOST": "127.0.0.1"}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = local_path(e["value"])
            elif "valueFrom" in e and "fieldRef" in e["valueFrom"]:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.name": key[1], "metadata.namespace": key[0],
                                  "status.podIP": "127.0.0.1",
                                  "spec.nodeName": "fake-node-0"}.get(field, "")
        argv = [local_path(a) for a in c.get("command", []) + c.get("args", [])]
        if self.args.runtime == "podman":
            # The shim runs podman with this server's environment
            # (CONTAINERS_CONF, PATH); the pod's own env goes in its manifest.
            argv, env = self.podman_shim_argv(key, pod, pod_dir), dict(os.environ)
        log = open(os.path.join(pod_dir, "container.log"), "ab")
        try:
            proc = subprocess.Popen(argv, cwd=pod_dir, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as e:
            pod["status"]["phase"] = "Failed"
            pod["status"]["containerStatuses"] = [self.container_status(
                c, {"terminated": {"exitCode": 128, "reason": "StartError",
                                   "message": str(e)}})]
            self.touch(pod)
            return
        finally:
            log.close()
        self.procs[key] = proc
        pod["status"]["phase"] = "Running"
        pod["status"]["startTime"] = now_iso()
        pod["status"]["containerStatuses"] = [self.container_status(
            c, {"running": {"startedAt": now_iso()}}, True, True)]
        pod["status"]["conditions"] += [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now_iso()}
            for t in ("Initialized", "ContainersReady", "Ready")]
        self.event(pod, "Started", "Started container " + c["name"])
        self.touch(pod)

    def tick(self):
        with self.lock:
            for key, pod in list(self.pods.items()):
                c = pod["spec"]["containers"][0]
                st = (pod["status"].get("containerStatuses") or [{}])[0].get("state", {})
                if st.get("waiting", {}).get("reason") == "ErrImagePull":
                    pod["status"]["containerStatuses"][0]["state"] = {"waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{c["image"]}"'}}
                    self.event(pod, "BackOff", f'Back-off pulling image "{c["image"]}"', "Warning")
                    self.touch(pod)
                proc = self.procs.get(key)
                if proc is not None and proc.poll() is not None:
                    del self.procs[key]
                    code = proc.returncode
                    if code < 0:
                        code = 128 - code
                    if pod["status"].get("reason") != "Evicted":
                        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
                    pod["status"]["containerStatuses"] = [self.container_status(
                        c, {"terminated": {"exitCode": code,
                                           "reason": "Completed" if code == 0 else "Error",
                                           "finishedAt": now_iso()}})]
                    for cond in pod["status"].get("conditions", []):
                        if cond["type"] in ("Ready", "ContainersReady"):
                            cond["status"] = "False"
                    self.touch(pod)
                if pod["metadata"].get("deletionTimestamp"):
                    if key in self.procs and time.time() >= self.kill_at.get(key, 0):
                        try:
                            os.killpg(self.procs[key].pid, signal.SIGKILL)
                        except OSError:
                            pass
                        self.podman_remove(key, wait=False)
                    # A pod that never ran goes at once; one that ran stays a
                    # moment after its container ended.
                    ran = "startTime" in pod["status"]
                    gone_at = self.gone_at.setdefault(
                        key, time.time() + (self.args.linger if ran else 0)) \
                        if key not in self.procs else None
                    if gone_at is not None and time.time() >= gone_at:
                        del self.pods[key]
                        self.gone_at.pop(key, None)
                        self.kill_at.pop(key, None)
                        self.touch(pod, "DELETED")
            self.schedule()

    def delete_pod(self, ns, name, grace=None):
        pod = self.pods.get((ns, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found',
                           {"name": name, "kind": "pods"})
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        if not pod["metadata"].get("deletionTimestamp"):
            pod["metadata"]["deletionTimestamp"] = now_iso()
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
            self.kill_at[(ns, name)] = time.time() + grace
            proc = self.procs.get((ns, name))
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except OSError:
                    pass
            self.touch(pod)
        return pod

    def kill_all(self):
        with self.lock:
            for key, proc in self.procs.items():
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.podman_remove(key, wait=True)

    # -- the podman node (--runtime podman) --

    def podman_manifest(self, key, pod):
        """The pod and its Secrets as documents for `podman kube play`.

        Changed for podman, and only these: each Secret is renamed after the
        pod and itself (a hash: two pods never share or remove each other's), and
        under podman 4.3 (Debian 12) its data is written decoded, since that
        version writes a Secret's base64 text into the file as it is (so only
        values that are themselves valid base64, such as 32 hex digits, pass
        through it); a secret volume gets `optional: false`
        when it has none (4.3 dereferences the missing field); env values from
        `status.*` fields (status.podIP) are dropped, since podman resolves
        only metadata fields; spec.nodeName (the fake scheduler's) is dropped;
        each --podman-bind adds a read-only hostPath volume (what the image
        would have installed, such as trainq itself). Also known, and left as
        is: podman before 4.7 ignores securityContext.procMount, before 4.5 a
        secret volume's items, before 4.8 its defaultMode (files are 0644)."""
        ns, name = key
        spec = copy.deepcopy(pod["spec"])
        spec.pop("nodeName", None)
        docs = []
        secrets = []
        for v in spec.get("volumes", []):
            if "secret" not in v:
                continue
            src = self.secrets[(ns, v["secret"]["secretName"])]
            # podman's secret names are at most 64 characters.
            pname = "fake-" + hashlib.sha256(
                f"{ns}/{name}/{v['secret']['secretName']}".encode()).hexdigest()[:20]
            data = dict(src.get("data", {}))
            if self.podman_version < (4, 4):
                data = {k: base64.b64decode(x).decode("utf-8", "replace") for k, x in data.items()}
            docs.append({"apiVersion": "v1", "kind": "Secret", "type": src.get("type", "Opaque"),
                         "metadata": {"name": pname}, "data": data})
            secrets.append(pname)
            v["secret"]["secretName"] = pname
            v["secret"].setdefault("optional", False)
        for c in spec.get("containers", []):
            c["env"] = [e for e in c.get("env", [])
                        if not e.get("valueFrom", {}).get("fieldRef", {})
                        .get("fieldPath", "").startswith("status.")]
            for i, bind in enumerate(self.args.podman_bind):
                host, path = bind.split(":", 1)
                vol = f"fake-bind-{i}"
                if not any(v["name"] == vol for v in spec.setdefault("volumes", [])):
                    spec["volumes"].append({"name": vol, "hostPath": {"path": host}})
                c.setdefault("volumeMounts", []).append(
                    {"name": vol, "mountPath": path, "readOnly": True})
        meta = {"name": name, "labels": pod["metadata"].get("labels", {}),
                "annotations": pod["metadata"].get("annotations", {})}
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        return docs, secrets

    def podman_shim_argv(self, key, pod, pod_dir):
        docs, secrets = self.podman_manifest(key, pod)
        play = os.path.join(pod_dir, "play.yaml")
        with open(play, "w", encoding="utf-8") as f:
            # JSON documents are YAML.
            f.write("\n---\n".join(json.dumps(d, indent=1) for d in docs) + "\n")
        # A user-namespaced pod cannot share the host's network namespace
        # (runc cannot mount its /sys there): it gets the CNI bridge.
        userns = pod["spec"].get("hostUsers") is False
        conf = {"podman": shlex.split(self.args.podman), "file": play, "pod": key[1],
                "container": f"{key[1]}-{pod['spec']['containers'][0]['name']}",
                "network": self.args.podman_userns_network if userns else self.args.podman_network,
                "grace": int(pod["spec"].get("terminationGracePeriodSeconds", 30)),
                "secrets": secrets}
        self.podman_pods.add(key)
        return [sys.executable, os.path.abspath(__file__), "--podman-shim", json.dumps(conf)]

    def podman_remove(self, key, wait):
        if self.args.runtime != "podman" or key not in self.podman_pods:
            return
        self.podman_pods.discard(key)
        argv = shlex.split(self.args.podman) + ["pod", "rm", "-f", "-t", "0", key[1]]
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        if wait:
            p.wait()


# ---- selectors -----------------------------------------------------------------

def label_match(selector, labels):
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "==" in term or "=" in term:
            k, v = re.split("==?", term, 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_value(obj, path):
    cur = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p, "")
    return cur if isinstance(cur, str) else str(cur)


def field_match(selector, obj):
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if field_value(obj, k) == v:
                return False
        else:
            k, v = re.split("==?", term, 1)
            if field_value(obj, k) != v:
                return False
    return True


# ---- HTTP ----------------------------------------------------------------------

RESOURCES = [
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
     "verbs": ["create", "delete", "get", "list", "watch"], "shortNames": ["po"]},
    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret",
     "verbs": ["create", "delete", "get", "list", "update"]},
    {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event",
     "verbs": ["list"], "shortNames": ["ev"]},
    {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
     "verbs": ["get", "list"], "shortNames": ["ns"]},
]


def pod_table(pods, include_object):
    rows = []
    now = time.time()
    for p in pods:
        st = p["status"]
        cs = (st.get("containerStatuses") or [{}])[0]
        state = cs.get("state", {})
        shown = st.get("reason") or st.get("phase", "")
        if "waiting" in state:
            shown = state["waiting"].get("reason", shown)
        elif "terminated" in state and st.get("phase") != "Running":
            shown = state["terminated"].get("reason", shown)
        if p["metadata"].get("deletionTimestamp"):
            shown = "Terminating"
        created = datetime.datetime.strptime(p["metadata"]["creationTimestamp"],
                                             "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        age = f"{int(now - created)}s"
        ready = sum(1 for c in st.get("containerStatuses") or [] if c.get("ready"))
        obj = p if include_object == "Object" else {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": p["metadata"]}
        rows.append({"cells": [p["metadata"]["name"],
                               f"{ready}/{len(p['spec']['containers'])}", shown, "0", age,
                               st.get("podIP", "<none>"), p["spec"].get("nodeName") or "<none>",
                               "<none>", "<none>"],
                     "object": obj})
    cols = [("Name", "string", "name"), ("Ready", "string", ""), ("Status", "string", ""),
            ("Restarts", "string", ""), ("Age", "string", ""), ("IP", "string", ""),
            ("Node", "string", ""), ("Nominated Node", "string", ""),
            ("Readiness Gates", "string", "")]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
            "columnDefinitions": [{"name": n, "type": t, "format": f, "description": "",
                                   "priority": 0 if i < 5 else 1}
                                  for i, (n, t, f) in enumerate(cols)],
            "rows": rows}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, obj, content_type="application/json"):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def fail(self, e):
        self.reply(e.code, status_object(e.code, e.reason, e.message, e.details))

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"the body of the request was in an unknown "
                           f"format: {e}")

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def handle_any(self, method):
        c = self.cluster
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        parts = [p for p in url.path.split("/") if p]
        try:
            body = self.body()
            if parts[:1] == ["fake"]:
                return self.control(method, parts[1:], body)
            with c.lock:
                c.requests.append({"method": method, "path": self.path, "body": body,
                                   "authorized": "Authorization" in self.headers,
                                   "at": time.time()})
            if c.args.token and self.headers.get("Authorization") != "Bearer " + c.args.token:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if parts == ["api"]:
                return self.reply(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [
                                            {"clientCIDR": "0.0.0.0/0",
                                             "serverAddress": "127.0.0.1"}]})
            if parts == ["apis"]:
                return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
            if parts == ["api", "v1"]:
                return self.reply(200, {"kind": "APIResourceList", "groupVersion": "v1",
                                        "resources": RESOURCES})
            if parts == ["version"]:
                return self.reply(200, {"major": "1", "minor": "35", "gitVersion": "v1.35.0-fake",
                                        "platform": "linux/amd64"})
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5:
                ns, resource, rest = parts[3], parts[4], parts[5:]
                verb = {"GET": "get" if rest else ("watch" if q.get("watch") in ("1", "true")
                                                   else "list"),
                        "POST": "create", "PUT": "update", "DELETE": "delete"}[method]
                sub = resource + ("/" + rest[1] if len(rest) > 1 else "")
                if (verb, sub) in c.forbidden:
                    raise ApiError(403, "Forbidden",
                                   f'{sub} is forbidden: User "system:serviceaccount:{ns}:trainq" '
                                   f'cannot {verb} resource "{sub}" in API group "" in the '
                                   f'namespace "{ns}"',
                                   {"kind": sub})
                if resource == "pods":
                    return self.pods(method, ns, rest, q, body)
                if resource == "secrets":
                    return self.secrets(method, ns, rest, q, body)
                if resource == "events" and method == "GET" and not rest:
                    with c.lock:
                        items = [e for e in c.events if e["metadata"]["namespace"] == ns
                                 and field_match(q.get("fieldSelector", ""), e)]
                        return self.reply(200, {"kind": "EventList", "apiVersion": "v1",
                                                "metadata": {"resourceVersion": str(c.rv)},
                                                "items": items})
            if parts[:3] == ["api", "v1", "pods"] and method == "GET":
                return self.pods(method, None, [], q, body)
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        except ApiError as e:
            self.fail(e)

    def list_reply(self, kind, items, q):
        c = self.cluster
        limit = int(q.get("limit", 0) or 0)
        start = int(q.get("continue", 0) or 0)
        meta = {"resourceVersion": str(c.rv)}
        if limit:
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            items = items[start:start + limit]
        accept = self.headers.get("Accept", "")
        if kind == "PodList" and "as=Table" in accept:
            t = pod_table(items, q.get("includeObject", "Metadata"))
            t["metadata"] = meta
            return self.reply(200, t, "application/json;as=Table;v=v1;g=meta.k8s.io")
        return self.reply(200, {"kind": kind, "apiVersion": "v1", "metadata": meta,
                                "items": items})

    def watch(self, ns, q):
        c = self.cluster
        since = int(q.get("resourceVersion") or c.rv)
        with c.lock:
            oldest = c.history[0][0] if c.history else c.rv
            if since < oldest - 1 and since != 0:
                raise ApiError(410, "Expired",
                               f"too old resource version: {since} ({oldest})")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.time() + min(float(q.get("timeoutSeconds", 30)), 30)
        sent = since
        try:
            while time.time() < deadline:
                with c.lock:
                    batch = [(rv, t, p) for rv, t, p in c.history if rv > sent
                             and (ns is None or p["metadata"]["namespace"] == ns)
                             and label_match(q.get("labelSelector", ""),
                                             p["metadata"].get("labels", {}))]
                    if not batch:
                        c.cond.wait(0.5)
                for rv, t, p in batch:
                    line = (json.dumps({"type": t, "object": p}) + "\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    sent = rv
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def pods(self, method, ns, rest, q, body):
        c = self.cluster
        if method == "GET" and not rest:
            if q.get("watch") in ("1", "true"):
                return self.watch(ns, q)
            with c.lock:
                items = [copy.deepcopy(p) for (n, _), p in sorted(c.pods.items())
                         if (ns is None or n == ns)
                         and label_match(q.get("labelSelector", ""),
                                         p["metadata"].get("labels", {}))
                         and field_match(q.get("fieldSelector", ""), p)]
            return self.list_reply("PodList", items, q)
        if method == "POST" and not rest:
            if body is None:
                raise ApiError(400, "BadRequest", "no body")
            with c.lock:
                pod = c.create_pod(ns, body)
                return self.reply(201, pod)
        if not rest:
            raise ApiError(405, "MethodNotAllowed", "method not allowed")
        name = rest[0]
        with c.lock:
            if method == "GET" and len(rest) == 2 and rest[1] == "log":
                pod = c.pods.get((ns, name))
                if pod is None:
                    raise ApiError(404, "NotFound", f'pods "{name}" not found')
                path = os.path.join(c.args.dir, ns, name, "container.log")
                if not os.path.exists(path):
                    raise ApiError(400, "BadRequest", f'container "worker" in pod "{name}" is '
                                   "waiting to start: trying and failing to pull image")
                data = open(path, "rb").read()
                if "tailLines" in q:
                    data = b"".join(data.splitlines(True)[-int(q["tailLines"]):])
                if "limitBytes" in q:
                    data = data[:int(q["limitBytes"])]
                return self.reply(200, data, "text/plain")
            if method == "GET" and len(rest) == 1:
                pod = c.pods.get((ns, name))
                if pod is None:
                    raise ApiError(404, "NotFound", f'pods "{name}" not found',
                                   {"name": name, "kind": "pods"})
                return self.reply(200, pod)
            if method == "DELETE" and len(rest) == 1:
                grace = None
                if body is not None:
                    errs = c.schema.check("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions", body)
                    if errs:
                        raise ApiError(max(e for e, _ in errs), "BadRequest",
                                       "; ".join(m for _, m in errs))
                    grace = body.get("gracePeriodSeconds")
                if "gracePeriodSeconds" in q:
                    grace = int(q["gracePeriodSeconds"])
                return self.reply(200, copy.deepcopy(c.delete_pod(ns, name, grace)))
        raise ApiError(405, "MethodNotAllowed", "method not allowed")

    def secrets(self, method, ns, rest, q, body):
        c = self.cluster
        with c.lock:
            if method == "GET" and not rest:
                items = [s for (n, _), s in sorted(c.secrets.items()) if n == ns
                         and label_match(q.get("labelSelector", ""), s["metadata"].get("labels", {}))]
                return self.list_reply("SecretList", items, q)
            if method in ("POST", "PUT"):
                errs = c.schema.check("io.k8s.api.core.v1.Secret", body or {})
                meta = (body or {}).get("metadata", {})
                if not errs:
                    validate_meta(meta, errs)
                if errs:
                    code = max(e for e, _ in errs)
                    raise ApiError(code, "BadRequest" if code == 400 else "Invalid",
                                   f'Secret "{meta.get("name", "")}" is invalid: '
                                   + "; ".join(m for _, m in errs))
                name = meta["name"]
                if method == "POST":
                    if rest:
                        raise ApiError(405, "MethodNotAllowed", "method not allowed")
                    if (ns, name) in c.secrets:
                        raise ApiError(409, "AlreadyExists", f'secrets "{name}" already exists',
                                       {"name": name, "kind": "secrets"})
                    s = copy.deepcopy(body)
                    s["metadata"].update({"namespace": ns, "uid": str(uuid.uuid4()),
                                          "creationTimestamp": now_iso()})
                    c.secrets[(ns, name)] = s
                    c.touch(s)
                    return self.reply(201, s)
                old = c.secrets.get((ns, rest[0] if rest else ""))
                if old is None or name != rest[0]:
                    raise ApiError(404, "NotFound", f'secrets "{name}" not found')
                if meta.get("resourceVersion") != old["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on secrets '
                                   f'"{name}": the object has been modified')
                s = copy.deepcopy(body)
                s["metadata"].update({"namespace": ns, "uid": old["metadata"]["uid"],
                                      "creationTimestamp": old["metadata"]["creationTimestamp"]})
                c.secrets[(ns, name)] = s
                c.touch(s)
                return self.reply(200, s)
            name = rest[0] if rest else ""
            s = c.secrets.get((ns, name))
            if s is None:
                raise ApiError(404, "NotFound", f'secrets "{name}" not found',
                               {"name": name, "kind": "secrets"})
            if method == "GET":
                return self.reply(200, s)
            if method == "DELETE":
                del c.secrets[(ns, name)]
                return self.reply(200, status_object(200, "", "") | {"status": "Success"})
        raise ApiError(405, "MethodNotAllowed", "method not allowed")

    def control(self, method, parts, body):
        c = self.cluster
        with c.lock:
            if method == "GET" and parts == ["requests"]:
                return self.reply(200, c.requests)
            if method == "GET" and parts == ["secrets"]:
                return self.reply(200, list(c.secrets.values()))
            if method == "POST" and len(parts) == 3 and parts[0] in ("disrupt", "evict"):
                key = (parts[1], parts[2])
                pod = c.pods.get(key)
                if pod is None:
                    raise ApiError(404, "NotFound", "no such pod")
                if parts[0] == "disrupt":
                    pod["status"].setdefault("conditions", []).append(
                        {"type": "DisruptionTarget", "status": "True",
                         "reason": "PreemptionByScheduler",
                         "message": "fake-scheduler: preempting to accommodate a higher "
                                    "priority pod", "lastProbeTime": None,
                         "lastTransitionTime": now_iso()})
                    c.touch(pod)
                    c.delete_pod(key[0], key[1], pod["spec"].get("terminationGracePeriodSeconds"))
                else:
                    pod["status"].update({"phase": "Failed", "reason": "Evicted",
                                          "message": "The node was low on resource: memory."})
                    proc = c.procs.get(key)
                    if proc is not None:
                        os.killpg(proc.pid, signal.SIGKILL)
                    c.touch(pod)
                return self.reply(200, pod)
            if method == "POST" and parts == ["node"]:
                for k, v in (body or {}).items():
                    c.capacity[k] = parse_quantity(v)
                return self.reply(200, {k: v for k, v in c.capacity.items()})
            if method == "POST" and parts == ["quota"]:
                c.quota_pods = (body or {}).get("pods")
                return self.reply(200, {"pods": c.quota_pods})
            if method == "POST" and parts == ["forbid"]:
                c.forbidden.add((body["verb"], body["resource"]))
                return self.reply(200, sorted(c.forbidden))
        raise ApiError(404, "NotFound", "no such control")


def podman_shim(conf):
    """One pod on podman, in the place of a pod's local process: plays it,
    streams its container's log to stdout, and exits with the container's
    exit code. SIGTERM stops the pod with its grace period (the container gets
    SIGTERM, then SIGKILL). The pod and its Secrets are removed at the end.
    podman's own children run in sessions of their own, so that the fake's
    signals to this process group reach only this process."""
    podman = conf["podman"]

    def run(*args):
        return subprocess.run(podman + list(args), capture_output=True, text=True,
                              start_new_session=True)

    def cleanup():
        run("pod", "rm", "-f", "-t", "0", conf["pod"])
        for s in conf["secrets"]:
            run("secret", "rm", s)

    def on_term(*_):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        run("pod", "stop", "-t", str(conf["grace"]), conf["pod"])

    signal.signal(signal.SIGTERM, on_term)
    played = run("kube", "play", "--network", conf["network"], conf["file"])
    print(f"fake kubelet: podman kube play --network {conf['network']}: "
          f"exit {played.returncode}\n{played.stdout}{played.stderr}", flush=True)
    if played.returncode != 0:
        cleanup()
        return 128
    logs = subprocess.Popen(podman + ["logs", "-f", conf["container"]], stdout=sys.stdout,
                            stderr=subprocess.STDOUT, start_new_session=True)
    waited = run("wait", conf["container"])
    try:
        logs.wait(timeout=5)
    except subprocess.TimeoutExpired:
        logs.kill()
    try:
        code = int(waited.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"fake kubelet: podman wait: {waited.stdout}{waited.stderr}", flush=True)
        code = 128
    cleanup()
    return code


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--podman-shim":
        sys.exit(podman_shim(json.loads(sys.argv[2])))
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="pods' working directories")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--token", default="", help="the bearer token every API call must carry")
    ap.add_argument("--node-cpu", default="64")
    ap.add_argument("--node-memory", default="256Gi")
    ap.add_argument("--node-gpus", default="0")
    ap.add_argument("--gpu-resource", default="nvidia.com/gpu")
    ap.add_argument("--watch-history", type=int, default=1000)
    ap.add_argument("--linger", type=float, default=2.0,
                    help="seconds a deleted pod stays after its container ended (the kubelet "
                         "reports the end before the object goes)")
    ap.add_argument("--runtime", choices=["process", "podman"], default="process",
                    help="how the node runs a pod: its container as a local process, or "
                         "`podman kube play` of the pod")
    ap.add_argument("--podman", default="podman --runtime runc --cgroup-manager=cgroupfs",
                    help="the podman command line (--runtime podman)")
    ap.add_argument("--podman-network", default="host", help="kube play --network for pods")
    ap.add_argument("--podman-userns-network", default="podman",
                    help="... for pods with hostUsers: false")
    ap.add_argument("--podman-bind", action="append", default=[], metavar="HOST:PATH",
                    help="a read-only hostPath volume added to every pod's container")
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM) ...")
    ap.add_argument("--tls-key", help="... and key")
    args = ap.parse_args()
    cluster = Cluster(args)
    Handler.cluster = cluster
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)

    def ticker():
        while True:
            time.sleep(0.1)
            cluster.tick()

    threading.Thread(target=ticker, daemon=True).start()

    def stop(*_):
        cluster.kill_all()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(server.server_address[1]))
        os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
