#include "agent/daemon/oidc.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <memory>
#include <optional>

#include "core/crypto.h"
#include "core/strings.h"

namespace trainq {

using nlohmann::json;

std::optional<std::string> Base64UrlDecode(std::string_view s) {
  if (s.size() % 4 == 1) return std::nullopt;
  std::string b64;
  b64.reserve(s.size() + 3);
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      b64.push_back(c);
    } else if (c == '-') {
      b64.push_back('+');
    } else if (c == '_') {
      b64.push_back('/');
    } else {
      return std::nullopt;  // '=', '+', '/', spaces: not unpadded base64url
    }
  }
  const std::size_t pad = (4 - b64.size() % 4) % 4;
  b64.append(pad, '=');
  std::string out(b64.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(b64.data()),
                          static_cast<int>(b64.size()));
  if (n < 0 || static_cast<std::size_t>(n) < pad) return std::nullopt;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

Error Refused(const std::string& why) { return {ErrorKind::kInvalidArgument, why}; }

// j[k] when it is a string, else "" (json::value would throw on another type,
// and the token's header is the sender's to choose).
std::string Str(const json& j, const char* k) {
  auto it = j.is_object() ? j.find(k) : j.end();
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// An RSA public key from a JWK's `n` and `e` (RFC 7518 section 6.3.1).
Result<Pkey> RsaKey(const json& jwk) {
  auto n = Base64UrlDecode(Str(jwk, "n"));
  auto e = Base64UrlDecode(Str(jwk, "e"));
  if (!n || !e || n->empty() || e->empty()) {
    return std::unexpected(Refused("the issuer's key has no valid n and e"));
  }
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(
      BN_bin2bn(reinterpret_cast<const unsigned char*>(n->data()), static_cast<int>(n->size()),
                nullptr),
      BN_free);
  std::unique_ptr<BIGNUM, decltype(&BN_free)> be(
      BN_bin2bn(reinterpret_cast<const unsigned char*>(e->data()), static_cast<int>(e->size()),
                nullptr),
      BN_free);
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(),
                                                                     OSSL_PARAM_BLD_free);
  if (!bn || !be || !bld || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, bn.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, be.get()) != 1) {
    return Fail(ErrorKind::kInternal, "OpenSSL could not hold the issuer's key");
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(bld.get()),
                                                                 OSSL_PARAM_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY* raw = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return std::unexpected(Refused("the issuer's key is not a valid RSA key"));
  }
  Pkey key(raw);
  if (EVP_PKEY_get_bits(key.get()) < 2048) {
    return std::unexpected(Refused("the issuer's key is shorter than 2048 bits"));
  }
  return key;
}

std::optional<std::int64_t> NumericDate(const json& claims, const char* name) {
  auto it = claims.find(name);
  if (it == claims.end() || !it->is_number()) return std::nullopt;
  return static_cast<std::int64_t>(it->get<double>());
}

}  // namespace

Result<json> VerifyIdToken(std::string_view jwt, const json& jwks, const IdTokenExpect& expect) {
  auto parts = Split(jwt, '.');
  if (parts.size() != 3) return std::unexpected(Refused("the ID token is not a signed JWT"));
  auto header_bytes = Base64UrlDecode(parts[0]);
  auto claim_bytes = Base64UrlDecode(parts[1]);
  auto sig = Base64UrlDecode(parts[2]);
  if (!header_bytes || !claim_bytes || !sig) {
    return std::unexpected(Refused("the ID token is not base64url"));
  }
  json header = json::parse(*header_bytes, nullptr, false);
  if (!header.is_object() || !header.contains("alg") || !header["alg"].is_string()) {
    return std::unexpected(Refused("the ID token's header has no alg"));
  }
  const std::string alg = header["alg"];
  const EVP_MD* md = alg == "RS256"   ? EVP_sha256()
                     : alg == "RS384" ? EVP_sha384()
                     : alg == "RS512" ? EVP_sha512()
                                      : nullptr;
  if (alg == "none") return std::unexpected(Refused("the ID token is unsigned (alg none)"));
  if (alg.starts_with("HS")) {
    return std::unexpected(Refused("the ID token uses " + alg +
                                   " (an HMAC: refused, the issuer's keys are public)"));
  }
  if (md == nullptr) {
    return std::unexpected(Refused("the ID token's alg " + alg.substr(0, 16) +
                                   " is not one trainq accepts (RS256, RS384, RS512)"));
  }
  // The key: the one named by kid; without a kid, the issuer's only RSA key.
  const std::string kid = Str(header, "kid");
  const json* key = nullptr;
  int rsa_keys = 0;
  const json keys = jwks.is_object() && jwks.contains("keys") && jwks["keys"].is_array()
                        ? jwks["keys"]
                        : json::array();
  for (const auto& k : keys) {
    if (!k.is_object() || Str(k, "kty") != "RSA") continue;
    if (k.contains("use") && k["use"] != "sig") continue;
    if (k.contains("alg") && k["alg"] != alg) continue;
    ++rsa_keys;
    if (!kid.empty() && Str(k, "kid") == kid) key = &k;
  }
  if (kid.empty() && rsa_keys == 1) {
    for (const auto& k : keys) {
      if (k.is_object() && Str(k, "kty") == "RSA") key = &k;
    }
  }
  if (key == nullptr) {
    return Fail(ErrorKind::kNotFound,
                kid.empty() ? "the ID token names no key (kid) and the issuer has several"
                            : "no key of the issuer has the ID token's kid " + kid.substr(0, 64));
  }
  ASSIGN_OR_RETURN(Pkey pkey, RsaKey(*key));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  const std::string signed_part = std::string(parts[0]) + "." + std::string(parts[1]);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, pkey.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig->data()), sig->size(),
                       reinterpret_cast<const unsigned char*>(signed_part.data()),
                       signed_part.size()) != 1) {
    return std::unexpected(Refused("the ID token's signature does not verify"));
  }
  // Signed by the issuer: now what it says.
  json claims = json::parse(*claim_bytes, nullptr, false);
  if (!claims.is_object()) return std::unexpected(Refused("the ID token's claims are not JSON"));
  if (!claims.contains("iss") || claims["iss"] != expect.issuer) {
    return std::unexpected(Refused("the ID token is from another issuer (iss)"));
  }
  const json aud = claims.value("aud", json());
  bool for_us = aud.is_string() ? aud == expect.client_id : false;
  if (aud.is_array()) {
    for (const auto& a : aud) for_us = for_us || a == expect.client_id;
  }
  if (!for_us) return std::unexpected(Refused("the ID token is for another client (aud)"));
  if (claims.contains("azp") && claims["azp"] != expect.client_id) {
    return std::unexpected(Refused("the ID token was issued to another client (azp)"));
  }
  auto exp = NumericDate(claims, "exp");
  auto iat = NumericDate(claims, "iat");
  if (!exp || !iat) return std::unexpected(Refused("the ID token has no exp or iat"));
  if (*exp + expect.skew_s <= expect.now_s) return std::unexpected(Refused("the ID token expired"));
  if (*iat - expect.skew_s > expect.now_s) {
    return std::unexpected(Refused("the ID token was issued in the future (iat)"));
  }
  if (auto nbf = NumericDate(claims, "nbf"); nbf && *nbf - expect.skew_s > expect.now_s) {
    return std::unexpected(Refused("the ID token is not valid yet (nbf)"));
  }
  const std::string nonce = claims.contains("nonce") && claims["nonce"].is_string()
                                ? claims["nonce"].get<std::string>()
                                : "";
  if (expect.nonce.empty() || !ConstantTimeEquals(nonce, expect.nonce)) {
    return std::unexpected(Refused("the ID token's nonce is not this sign-in's"));
  }
  if (!claims.contains("sub") || !claims["sub"].is_string() ||
      claims["sub"].get<std::string>().empty()) {
    return std::unexpected(Refused("the ID token has no subject (sub)"));
  }
  return claims;
}

Result<json> OidcIssuer::FetchJson(const std::string& url, const char* what) {
  HttpRequest r;
  r.url = url;
  r.headers = {{"Accept", "application/json"}, {"User-Agent", "trainq"}};
  ASSIGN_OR_RETURN(auto resp, http_.Send(r));
  if (!resp.ok()) {
    return Fail(ErrorKind::kUnavailable,
                std::string(what) + " " + UrlForLog(url) + " answered " + std::to_string(resp.status));
  }
  json j = json::parse(resp.body, nullptr, false);
  if (!j.is_object()) {
    return Fail(ErrorKind::kUnavailable, std::string(what) + " " + UrlForLog(url) + " is not JSON");
  }
  return j;
}

Result<OidcIssuer::Endpoints> OidcIssuer::Discover() {
  std::lock_guard<std::mutex> lock(mu_);
  if (endpoints_) return *endpoints_;
  const TimeMs now = clock_.Now();
  if (now - discovered_ms_ < kRetryMs) {
    return Fail(ErrorKind::kUnavailable, "the issuer's discovery document could not be read "
                                         "lately; trying again within a minute");
  }
  discovered_ms_ = now;
  ASSIGN_OR_RETURN(json d, FetchJson(config_.issuer + "/.well-known/openid-configuration",
                                     "the discovery document"));
  if (Str(d, "issuer") != config_.issuer) {
    return Fail(ErrorKind::kUnavailable,
                "the discovery document names another issuer (" +
                    Str(d, "issuer").substr(0, 200) + ", not " + config_.issuer + ")");
  }
  Endpoints e;
  e.authorization = Str(d, "authorization_endpoint");
  e.token = Str(d, "token_endpoint");
  e.jwks_uri = Str(d, "jwks_uri");
  for (const std::string* u : {&e.authorization, &e.token, &e.jwks_uri}) {
    if (!u->starts_with("https://") &&
        !(u->starts_with("http://") && config_.issuer.starts_with("http://"))) {
      return Fail(ErrorKind::kUnavailable,
                  "the discovery document lacks an authorization_endpoint, token_endpoint or "
                  "jwks_uri (or one is not https)");
    }
  }
  if (auto m = d.find("token_endpoint_auth_methods_supported"); m != d.end() && m->is_array()) {
    bool basic = false, post = false;
    for (const auto& x : *m) {
      basic = basic || x == "client_secret_basic";
      post = post || x == "client_secret_post";
    }
    e.basic_auth = basic || !post;
  }
  endpoints_ = e;
  return e;
}

Result<json> OidcIssuer::Verify(std::string_view jwt, const std::string& nonce) {
  ASSIGN_OR_RETURN(Endpoints e, Discover());
  IdTokenExpect expect{config_.issuer, config_.client_id, nonce, clock_.Now() / 1000};
  std::lock_guard<std::mutex> lock(mu_);
  const TimeMs now = clock_.Now();
  bool fetched = false;
  if (jwks_.is_null() && now - jwks_ms_ >= kRetryMs) {
    jwks_ms_ = now;
    ASSIGN_OR_RETURN(jwks_, FetchJson(e.jwks_uri, "the issuer's keys"));
    fetched = true;
  }
  auto claims = VerifyIdToken(jwt, jwks_, expect);
  if (claims || claims.error().kind != ErrorKind::kNotFound || fetched ||
      now - jwks_ms_ < kRetryMs) {
    return claims;
  }
  // An unknown kid: the issuer may have rotated its keys.
  jwks_ms_ = now;
  ASSIGN_OR_RETURN(json fresh, FetchJson(e.jwks_uri, "the issuer's keys"));
  jwks_ = std::move(fresh);
  return VerifyIdToken(jwt, jwks_, expect);
}

}  // namespace trainq
