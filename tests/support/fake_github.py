#!/usr/bin/python3
"""A stand-in for GitHub's OAuth endpoints and the REST calls trainq makes at
sign-in, speaking GitHub's documented wire format (docs.github.com:
"Authorizing OAuth apps" for /login/oauth/authorize and
/login/oauth/access_token, with PKCE; REST "Get the authenticated user"
GET /user and "Get a repository" GET /repos/{owner}/{repo}, whose
`permissions` object is {admin, maintain, push, triage, pull}).

Who is "signed in to GitHub" in the browser, and each user's access to each
repository, come from --config (JSON):
  {"client_id": "...", "client_secret": "...", "as": "octocat",
   "users": {"octocat": {"acme/model": "write"}, "reader": {"acme/model": "read"}}}
The test changes them with POST /_fake/config (a JSON merge of the same keys).
/authorize approves at once as the current user (GitHub shows a consent page
the first time). Each request is appended to --dir/requests.jsonl (without
secrets' values) for the test to read.
"""
import argparse
import base64
import hashlib
import json
import os
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"config": {}, "codes": {}, "tokens": {}}
DOCS = "https://docs.github.com/rest"


def s256(verifier):
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet; requests.jsonl has them
        pass

    def record(self, **extra):
        entry = {"method": self.command, "path": self.path.split("?")[0], **extra}
        with open(os.path.join(ARGS.dir, "requests.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    def reply(self, status, body, headers=None):
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode() if n else ""

    def bearer_user(self):
        auth = self.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() not in ("bearer", "token"):
            return None
        with LOCK:
            return STATE["tokens"].get(token)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        cfg = STATE["config"]
        if url.path == "/login/oauth/authorize":
            self.record(query_keys=sorted(q))
            if q.get("client_id") != cfg["client_id"]:
                return self.reply(404, {"message": "Not Found"})
            redirect = q.get("redirect_uri", "")
            code = secrets.token_hex(10)  # GitHub's codes are 20 characters
            with LOCK:
                STATE["codes"][code] = {
                    "login": cfg["as"], "redirect_uri": redirect,
                    "challenge": q.get("code_challenge"),
                    "method": q.get("code_challenge_method"),
                    "expires": time.time() + 600,
                }
            sep = "&" if "?" in redirect else "?"
            loc = redirect + sep + urllib.parse.urlencode({"code": code, "state": q.get("state", "")})
            return self.reply(302, b"", {"Location": loc})
        if url.path == "/user":
            login = self.bearer_user()
            self.record(authorized=login is not None)
            if not login:
                return self.reply(401, {"message": "Bad credentials", "documentation_url": DOCS})
            return self.reply(200, {"login": login, "id": abs(hash(login)) % 10**7,
                                    "type": "User", "site_admin": False})
        parts = url.path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "repos":
            login = self.bearer_user()
            self.record(authorized=login is not None, user=login)
            if not login:
                return self.reply(401, {"message": "Bad credentials", "documentation_url": DOCS})
            full = parts[1] + "/" + parts[2]
            with LOCK:
                perm = cfg["users"].get(login, {}).get(full, "none")
            if perm == "none":  # a private repository one cannot see is a 404
                return self.reply(404, {"message": "Not Found", "documentation_url": DOCS})
            order = ["pull", "triage", "push", "maintain", "admin"]
            level = {"read": 0, "triage": 1, "write": 2, "maintain": 3, "admin": 4}[perm]
            perms = {k: i <= level for i, k in enumerate(order)}
            return self.reply(200, {"id": 1, "name": parts[2], "full_name": full, "private": True,
                                    "owner": {"login": parts[1]}, "permissions": perms})
        return self.reply(404, {"message": "Not Found", "documentation_url": DOCS})

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        raw = self.body()
        cfg = STATE["config"]
        if url.path == "/_fake/config":
            with LOCK:
                cfg.update(json.loads(raw))
            return self.reply(200, {"ok": True})
        if url.path == "/login/oauth/access_token":
            if self.headers.get("Content-Type", "").startswith("application/json"):
                f = json.loads(raw)
            else:
                f = dict(urllib.parse.parse_qsl(raw))
            self.record(keys=sorted(f), accept=self.headers.get("Accept", ""))

            def error(code, text):
                # GitHub answers these with 200 and an error document.
                return self.reply(200, {"error": code, "error_description": text,
                                        "error_uri": "https://docs.github.com/apps"})
            if f.get("client_id") != cfg["client_id"] or f.get("client_secret") != cfg["client_secret"]:
                return error("incorrect_client_credentials",
                             "The client_id and/or client_secret passed are incorrect.")
            with LOCK:
                c = STATE["codes"].pop(f.get("code", ""), None)  # once
            if not c or c["expires"] < time.time():
                return error("bad_verification_code", "The code passed is incorrect or expired.")
            if f.get("redirect_uri") and f["redirect_uri"] != c["redirect_uri"]:
                return error("redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.")
            if c["challenge"]:
                if c["method"] != "S256" or s256(f.get("code_verifier", "")) != c["challenge"]:
                    return error("bad_verification_code", "The code_verifier does not match the code_challenge.")
            token = "gho_" + secrets.token_hex(18)
            with LOCK:
                STATE["tokens"][token] = c["login"]
            if "application/json" in self.headers.get("Accept", ""):
                return self.reply(200, {"access_token": token, "token_type": "bearer", "scope": "repo"})
            body = urllib.parse.urlencode({"access_token": token, "token_type": "bearer", "scope": "repo"})
            self.send_response(200)
            self.send_header("Content-Type", "application/x-www-form-urlencoded")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
            return None
        return self.reply(404, {"message": "Not Found"})


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--port-file", required=True)
    ARGS = p.parse_args()
    with open(ARGS.config) as f:
        STATE["config"] = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, ARGS.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
