// Hashes and MACs over OpenSSL: webhook signatures, content-addressed names,
// token comparison.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/result.h"

namespace trainq {

// HMAC-SHA256 of `data` under `key`, as lowercase hex (OpenSSL).
std::string HmacSha256Hex(std::string_view key, std::string_view data);
std::string Sha256Hex(std::string_view data);
// `data` as padded base64 (RFC 4648 section 4): HTTP Basic credentials.
std::string Base64(std::string_view data);
// SHA-256 of `data` as unpadded base64url (RFC 4648 section 5): an OAuth PKCE
// S256 code_challenge of the verifier `data` (RFC 7636 section 4.2).
std::string Sha256Base64Url(std::string_view data);
// Compares in time independent of where the strings differ, and of their
// lengths (both are hashed first).
bool ConstantTimeEquals(std::string_view a, std::string_view b);
// `n_bytes` random bytes from OpenSSL's generator, as lowercase hex: tokens.
Result<std::string> RandomHex(std::size_t n_bytes);

}  // namespace trainq
