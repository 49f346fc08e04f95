#!/usr/bin/python3
"""A stand-in for a forge's OAuth endpoints and the REST calls trainq makes at
sign-in, speaking the forge's documented wire format; "forge" in --config
picks which:
  github (default; docs.github.com: "Authorizing OAuth apps" for
    /login/oauth/authorize and /login/oauth/access_token, with PKCE; REST
    "Get the authenticated user" GET /user and "Get a repository"
    GET /repos/{owner}/{repo}, whose `permissions` object is
    {admin, maintain, push, triage, pull}; errors of the token endpoint are
    200 documents {"error": "bad_verification_code", ...});
  gitlab (docs.gitlab.com: "OAuth 2.0 identity provider API" for
    /oauth/authorize and /oauth/token with grant_type and PKCE, errors 400/401
    {"error": "invalid_grant"}; REST v4 GET /api/v4/user {"username", ...}
    and GET /api/v4/projects/{url-encoded path}, whose `permissions` are
    {"project_access": {"access_level": N}, "group_access": ...} with 10
    guest, 20 reporter, 30 developer, 40 maintainer, 50 owner; 404
    {"message": "404 Project Not Found"});
  gitea (docs.gitea.com: "OAuth2 provider" for /login/oauth/authorize and
    /login/oauth/access_token with grant_type and PKCE, errors 400
    {"error": "invalid_grant"}; API v1 GET /api/v1/user {"login", ...} and
    GET /api/v1/repos/{owner}/{repo}, `permissions` {admin, push, pull}).

Who is "signed in to the forge" in the browser, and each user's access to each
repository, come from --config (JSON):
  {"forge": "github", "client_id": "...", "client_secret": "...", "as": "octocat",
   "users": {"octocat": {"acme/model": "write"}, "reader": {"acme/model": "read"}}}
(levels: read, triage, write, maintain, admin; GitLab: guest, read = reporter,
write = developer, maintain = maintainer, admin = owner). The test changes
them with POST /_fake/config (a JSON merge of the same keys).
/authorize approves at once as the current user (a forge shows a consent page
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
# Where each forge has its pages and API (API under the forge's own address,
# as the tests configure web_url = api_url base = this server).
PATHS = {
    "github": {"authorize": "/login/oauth/authorize", "token": "/login/oauth/access_token",
               "api": ""},
    "gitlab": {"authorize": "/oauth/authorize", "token": "/oauth/token", "api": "/api/v4"},
    "gitea": {"authorize": "/login/oauth/authorize", "token": "/login/oauth/access_token",
              "api": "/api/v1"},
}
GITLAB_LEVEL = {"guest": 10, "read": 20, "triage": 20, "write": 30, "maintain": 40, "admin": 50}


def forge():
    return STATE["config"].get("forge", "github")


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
        paths = PATHS[forge()]
        if url.path == paths["authorize"]:
            self.record(query_keys=sorted(q), scope=q.get("scope", ""))
            if q.get("client_id") != cfg["client_id"]:
                return self.reply(404, {"message": "Not Found"})
            if forge() != "github" and q.get("response_type") != "code":
                return self.reply(400, {"error": "unsupported_response_type"})
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
        api = paths["api"]
        if url.path == api + "/user":
            login = self.bearer_user()
            self.record(authorized=login is not None)
            if not login:
                return self.unauthorized()
            uid = abs(hash(login)) % 10**7
            if forge() == "gitlab":
                return self.reply(200, {"id": uid, "username": login, "name": login.title(),
                                        "state": "active", "web_url": "/" + login})
            if forge() == "gitea":
                return self.reply(200, {"id": uid, "login": login, "full_name": login.title(),
                                        "email": login + "@example.com"})
            return self.reply(200, {"login": login, "id": uid, "type": "User",
                                    "site_admin": False})
        parts = url.path[len(api):].strip("/").split("/") if url.path.startswith(api + "/") else []
        if forge() == "gitlab" and len(parts) == 2 and parts[0] == "projects":
            login = self.bearer_user()
            full = urllib.parse.unquote(parts[1])
            self.record(authorized=login is not None, user=login, project=full)
            if not login:
                return self.unauthorized()
            with LOCK:
                perm = cfg["users"].get(login, {}).get(full, "none")
            if perm == "none":
                return self.reply(404, {"message": "404 Project Not Found"})
            access = {"access_level": GITLAB_LEVEL[perm], "notification_level": 3}
            return self.reply(200, {"id": 7, "path_with_namespace": full,
                                    "visibility": "private",
                                    "permissions": {"project_access": access,
                                                    "group_access": None}})
        if forge() != "gitlab" and len(parts) == 3 and parts[0] == "repos":
            login = self.bearer_user()
            self.record(authorized=login is not None, user=login)
            if not login:
                return self.unauthorized()
            full = parts[1] + "/" + parts[2]
            with LOCK:
                perm = cfg["users"].get(login, {}).get(full, "none")
            if perm == "none":  # a private repository one cannot see is a 404
                return self.reply(404, {"message": "Not Found", "documentation_url": DOCS})
            level = {"read": 0, "triage": 1, "write": 2, "maintain": 3, "admin": 4}[perm]
            if forge() == "gitea":
                perms = {"admin": level >= 4, "push": level >= 2, "pull": True}
            else:
                order = ["pull", "triage", "push", "maintain", "admin"]
                perms = {k: i <= level for i, k in enumerate(order)}
            return self.reply(200, {"id": 1, "name": parts[2], "full_name": full, "private": True,
                                    "owner": {"login": parts[1]}, "permissions": perms})
        return self.reply(404, {"message": "Not Found", "documentation_url": DOCS})

    def unauthorized(self):
        if forge() == "gitlab":
            return self.reply(401, {"message": "401 Unauthorized"})
        if forge() == "gitea":
            return self.reply(401, {"message": "token is required", "url": "/api/swagger"})
        return self.reply(401, {"message": "Bad credentials", "documentation_url": DOCS})

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        raw = self.body()
        cfg = STATE["config"]
        if url.path == "/_fake/config":
            with LOCK:
                cfg.update(json.loads(raw))
            return self.reply(200, {"ok": True})
        if url.path == PATHS[forge()]["token"]:
            if self.headers.get("Content-Type", "").startswith("application/json"):
                f = json.loads(raw)
            else:
                f = dict(urllib.parse.parse_qsl(raw))
            self.record(keys=sorted(f), accept=self.headers.get("Accept", ""))

            def error(code, text):
                if forge() == "github":
                    # GitHub answers these with 200 and an error document.
                    return self.reply(200, {"error": code, "error_description": text,
                                            "error_uri": "https://docs.github.com/apps"})
                # GitLab and Gitea: RFC 6749 section 5.2.
                std = {"incorrect_client_credentials": "invalid_client",
                       "bad_verification_code": "invalid_grant",
                       "redirect_uri_mismatch": "invalid_grant"}.get(code, code)
                return self.reply(401 if std == "invalid_client" else 400,
                                  {"error": std, "error_description": text})
            if f.get("client_id") != cfg["client_id"] or f.get("client_secret") != cfg["client_secret"]:
                return error("incorrect_client_credentials",
                             "The client_id and/or client_secret passed are incorrect.")
            if forge() != "github" and f.get("grant_type") != "authorization_code":
                return error("unsupported_grant_type", "grant_type must be authorization_code")
            with LOCK:
                c = STATE["codes"].pop(f.get("code", ""), None)  # once
            if not c or c["expires"] < time.time():
                return error("bad_verification_code", "The code passed is incorrect or expired.")
            if f.get("redirect_uri") and f["redirect_uri"] != c["redirect_uri"]:
                return error("redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.")
            if c["challenge"]:
                if c["method"] != "S256" or s256(f.get("code_verifier", "")) != c["challenge"]:
                    return error("bad_verification_code", "The code_verifier does not match the code_challenge.")
            if forge() != "github":
                token = secrets.token_hex(32)
                with LOCK:
                    STATE["tokens"][token] = c["login"]
                return self.reply(200, {"access_token": token, "token_type": "bearer",
                                        "expires_in": 7200 if forge() == "gitlab" else 3600,
                                        "refresh_token": secrets.token_hex(32),
                                        "created_at": int(time.time())})
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
