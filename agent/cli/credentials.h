// The personal tokens `trainq login` keeps (issue 41): one per server, in
// $XDG_CONFIG_HOME/trainq/credentials.json (else ~/.config/trainq/), a file
// of mode 0600 in a directory of mode 0700. Every `--server` command uses
// the token kept for its server when neither --token-file nor the
// environment gives one. A credentials file that others may read is refused
// (as ssh refuses such a key), with the chmod that fixes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/result.h"

namespace trainq {

std::string CredentialsPath();
// "http://host:8080/" -> "http://host:8080": the key a server is kept under.
std::string ServerKey(const std::string& server);
// The token kept for `server`; nullopt when none (or no file).
Result<std::optional<std::string>> StoredToken(const std::string& server);
// Keeps `token` for `server` (replacing one kept before), with who it is.
Status StoreToken(const std::string& server, const std::string& token, const std::string& who,
                  const std::string& role);
// Forgets the token kept for `server`; false when there was none.
Result<bool> ForgetToken(const std::string& server);

}  // namespace trainq

namespace trainq {

class Store;

// "local user ada": who a command that writes the database file directly is
// (its rights are the file's), for the audit trail.
std::string LocalWho();
// An audit row from a local command (address "local") and no log line: the
// command prints what it did.
void AuditLocal(Store& store, const std::string& action, const std::string& target,
                const std::string& detail, std::int64_t now_ms);

}  // namespace trainq
