#!/usr/bin/python3
"""A stand-in OpenID Connect issuer, speaking the published wire format:
OpenID Connect Discovery 1.0 (GET /.well-known/openid-configuration), the
authorization code flow of OpenID Connect Core 1.0 section 3.1 with PKCE
(RFC 7636) at /authorize and /token (RFC 6749 sections 4.1 and 5: client
authentication by HTTP Basic or in the body, errors as {"error": ...}), and
a JWK Set (RFC 7517) at /jwks. ID tokens are real RS256 JWS signed with PyJWT
(Debian's python3-jwt) under a 2048-bit RSA key made at start with
python3-cryptography; nothing is pre-made.

--config (JSON), changed by POST /_fake/config (a merge of the same keys):
  {"client_id": "trainq", "client_secret": "...",
   "as": {"sub": "u1", "email": "ada@example.com", "groups": ["ml-platform"]},
   "now": 1800000000,          # the issuer's clock, seconds (default: real time)
   "tamper": null}             # the next ID token's flaw, for the refusal tests:
   #  bad_sig, aud, iss, expired, nbf, alg_none, hs256 (an HMAC keyed with the
   #  public key's PEM), nonce, unknown_kid (a key the JWKS does not have),
   #  wrong_key (another key signs, under the published key's kid)
POST /_fake/rotate: a new key (a new kid) signs from now on, and the JWKS
lists only it. /authorize approves at once as "as". Each request is appended
to --dir/requests.jsonl (without secrets' values) for the test to read.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

LOCK = threading.Lock()
STATE = {"config": {}, "codes": {}, "key": None, "kid": None, "issued": 0}


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def s256(verifier):
    return b64url(hashlib.sha256(verifier.encode()).digest())


def new_key():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    STATE["key"] = key
    STATE["kid"] = "k" + secrets.token_hex(4)


def jwk(key, kid):
    pub = key.public_key().public_numbers()
    size = (pub.n.bit_length() + 7) // 8
    return {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
            "n": b64url(pub.n.to_bytes(size, "big")), "e": b64url(pub.e.to_bytes(3, "big"))}


def pem(key, private):
    if private:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def id_token(cfg, code):
    now = int(cfg.get("now") or time.time())
    person = cfg["as"]
    claims = {"iss": ISSUER, "sub": person["sub"], "aud": cfg["client_id"],
              "exp": now + 300, "iat": now, "nonce": code["nonce"], "auth_time": now}
    for k in ("email", "email_verified", "preferred_username", "groups", "name"):
        if k in person:
            claims[k] = person[k]
    tamper = cfg.get("tamper")
    cfg["tamper"] = None  # one flawed token, then good ones again
    if tamper == "aud":
        claims["aud"] = "someone-else"
    if tamper == "iss":
        claims["iss"] = "https://evil.example.com"
    if tamper == "expired":
        claims["iat"], claims["exp"] = now - 7200, now - 3600
    if tamper == "nbf":
        claims["nbf"] = now + 3600
    if tamper == "nonce":
        claims["nonce"] = "not-the-nonce-sent"
    key, kid = STATE["key"], STATE["kid"]
    if tamper == "alg_none":
        head = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        return head + "." + b64url(json.dumps(claims).encode()) + "."
    if tamper == "hs256":
        # The classic confusion: HMAC keyed with the issuer's public key.
        head = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
        body = b64url(json.dumps(claims).encode())
        mac = hmac.new(pem(key, False), (head + "." + body).encode(), hashlib.sha256).digest()
        return head + "." + body + "." + b64url(mac)
    if tamper == "unknown_kid":
        key, kid = rsa.generate_private_key(public_exponent=65537, key_size=2048), "k-unpublished"
    if tamper == "wrong_key":
        # Another RSA key, under the kid of the key the JWKS publishes.
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode(claims, pem(key, True), algorithm="RS256", headers={"kid": kid})
    if tamper == "bad_sig":
        head, body, sig = token.split(".")
        raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
        raw[10] ^= 0x01
        token = head + "." + body + "." + b64url(bytes(raw))
    return token


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
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        cfg = STATE["config"]
        if url.path == "/.well-known/openid-configuration":
            self.record()
            return self.reply(200, {
                "issuer": ISSUER,
                "authorization_endpoint": ISSUER + "/authorize",
                "token_endpoint": ISSUER + "/token",
                "jwks_uri": ISSUER + "/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic",
                                                          "client_secret_post"],
                "scopes_supported": ["openid", "email", "profile", "groups"],
            })
        if url.path == "/jwks":
            with LOCK:
                keys = [jwk(STATE["key"], STATE["kid"])]
            self.record(kids=[k["kid"] for k in keys])
            return self.reply(200, {"keys": keys})
        if url.path == "/authorize":
            self.record(query_keys=sorted(q), scope=q.get("scope", ""))
            redirect = q.get("redirect_uri", "")
            if q.get("client_id") != cfg["client_id"] or not redirect:
                return self.reply(400, {"error": "invalid_request"})
            sep = "&" if "?" in redirect else "?"
            if q.get("response_type") != "code" or "openid" not in q.get("scope", "").split():
                loc = redirect + sep + urllib.parse.urlencode(
                    {"error": "invalid_scope" if q.get("response_type") == "code"
                     else "unsupported_response_type", "state": q.get("state", "")})
                return self.reply(302, b"", {"Location": loc})
            code = secrets.token_urlsafe(24)
            with LOCK:
                STATE["codes"][code] = {
                    "redirect_uri": redirect, "nonce": q.get("nonce"),
                    "challenge": q.get("code_challenge"), "method": q.get("code_challenge_method"),
                    "expires": time.time() + 600,
                }
            loc = redirect + sep + urllib.parse.urlencode({"code": code, "state": q.get("state", "")})
            return self.reply(302, b"", {"Location": loc})
        return self.reply(404, {"error": "not_found"})

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n).decode() if n else ""
        cfg = STATE["config"]
        if url.path == "/_fake/config":
            with LOCK:
                cfg.update(json.loads(raw))
            return self.reply(200, {"ok": True})
        if url.path == "/_fake/rotate":
            with LOCK:
                new_key()
                kid = STATE["kid"]
            return self.reply(200, {"kid": kid})
        if url.path == "/token":
            f = dict(urllib.parse.parse_qsl(raw))
            auth = self.headers.get("Authorization", "")
            how = "basic" if auth.startswith("Basic ") else "post"
            self.record(keys=sorted(f), client_auth=how)
            client_id, secret = f.get("client_id"), f.get("client_secret")
            if how == "basic":
                user, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
                client_id, secret = urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(pw)
            if client_id != cfg["client_id"] or secret != cfg["client_secret"]:
                return self.reply(401, {"error": "invalid_client"},
                                  {"WWW-Authenticate": 'Basic realm="fake"'})
            if f.get("grant_type") != "authorization_code":
                return self.reply(400, {"error": "unsupported_grant_type"})
            with LOCK:
                c = STATE["codes"].pop(f.get("code", ""), None)  # once
            if not c or c["expires"] < time.time() or f.get("redirect_uri") != c["redirect_uri"]:
                return self.reply(400, {"error": "invalid_grant"})
            if c["challenge"] and (c["method"] != "S256" or
                                   s256(f.get("code_verifier", "")) != c["challenge"]):
                return self.reply(400, {"error": "invalid_grant",
                                        "error_description": "PKCE verification failed"})
            with LOCK:
                token = id_token(cfg, c)
            return self.reply(200, {"access_token": secrets.token_urlsafe(24),
                                    "token_type": "Bearer", "expires_in": 300,
                                    "id_token": token})
        return self.reply(404, {"error": "not_found"})


def main():
    global ARGS, ISSUER
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--port-file", required=True)
    ARGS = p.parse_args()
    with open(ARGS.config) as f:
        STATE["config"] = json.load(f)
    new_key()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ISSUER = "http://127.0.0.1:%d" % server.server_address[1]
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, ARGS.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
