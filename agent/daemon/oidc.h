// "Sign in with OIDC" (issue 41): an OpenID Connect issuer's discovery
// document, its signing keys, and the check of the ID tokens it signs.
//
// The ID token is a JWS (RFC 7515) in compact form. It is accepted only when
//   - its header's `alg` is RS256, RS384 or RS512 (`none` and the HMAC
//     algorithms are refused outright: an HS256 token "signed" with the
//     issuer's public key would otherwise pass),
//   - its signature verifies (OpenSSL EVP) under the JWKS key named by its
//     `kid` (an RSA key, 2048 bits or more, meant for signatures),
//   - `iss` is the configured issuer exactly, `aud` is (or contains) the
//     client ID, and `azp`, when present, is the client ID,
//   - `exp` is in the future and `iat` (required) and `nbf` (when present)
//     not in the future, each with `skew_s` of slack for clocks,
//   - `nonce` is the one sent with this sign-in
// (OpenID Connect Core 1.0, section 3.1.3.7).
// Threading: OidcIssuer is safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

struct IdTokenExpect {
  std::string issuer;
  std::string client_id;
  std::string nonce;
  std::int64_t now_s = 0;
  std::int64_t skew_s = 120;
};

// The ID token's claims when it passes every check above; else an error
// saying which. kNotFound: no key of `jwks` has the token's `kid` (the
// caller may fetch the keys again: the issuer may have rotated them).
Result<nlohmann::json> VerifyIdToken(std::string_view jwt, const nlohmann::json& jwks,
                                     const IdTokenExpect& expect);

// Unpadded base64url (RFC 4648 section 5) to bytes; nullopt when `s` has a
// character outside that alphabet or a length no encoding has.
std::optional<std::string> Base64UrlDecode(std::string_view s);

class OidcIssuer {
 public:
  OidcIssuer(const OidcAuthConfig& config, HttpClient& http, const Clock& clock)
      : config_(config), http_(http), clock_(clock) {}

  struct Endpoints {
    std::string authorization;  // authorization_endpoint
    std::string token;          // token_endpoint
    std::string jwks_uri;
    bool basic_auth = true;  // client_secret_basic (the default), else client_secret_post
  };
  // ISSUER/.well-known/openid-configuration, read once (again after a failure,
  // at most every kRetryMs). Its `issuer` must be the configured one.
  Result<Endpoints> Discover();
  // VerifyIdToken against the issuer's keys: fetched at the first use and
  // again when a token names a `kid` they lack (at most every kRetryMs, so
  // tokens with made-up kids cannot make trainq hammer the issuer).
  Result<nlohmann::json> Verify(std::string_view jwt, const std::string& nonce);

  static constexpr TimeMs kRetryMs = 60'000;

 private:
  Result<nlohmann::json> FetchJson(const std::string& url, const char* what);

  const OidcAuthConfig& config_;
  HttpClient& http_;
  const Clock& clock_;
  std::mutex mu_;  // guards what follows
  std::optional<Endpoints> endpoints_;
  TimeMs discovered_ms_ = -kRetryMs;  // when discovery was last tried
  nlohmann::json jwks_;               // null until fetched
  TimeMs jwks_ms_ = -kRetryMs;        // when the keys were last fetched
};

}  // namespace trainq
