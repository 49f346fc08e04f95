// Who is asking (issue 41): the roles of `trainq serve`'s callers and the
// audit trail of what they did.
//
// A caller is a Principal: the config's admin token (admin) or read token
// (read), machines' and CI's shared secrets as before, or a person's
// personal API token ("tqp_" and 64 hex digits, queue/access.h: stored as
// its SHA-256 with an owner, a role, an expiry), whose role is its owner's
// when it was made. Roles are ordered: read (see), write (cancel, retry, add
// seeds), admin (pool actions and everyone's tokens).
//
// Every state-changing action is an audit row (who, what, target, from
// where) and a log line "<area>: <who> <what>", e.g.
// "dashboard: ada@example.com cancelled run 9".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/result.h"
#include "queue/access.h"

namespace trainq {

class Store;

enum class AccessRole { kNone = 0, kRead = 1, kWrite = 2, kAdmin = 3 };
const char* RoleName(AccessRole role);  // "read", "write", "admin", "none"
std::optional<AccessRole> ParseRole(std::string_view name);

struct Principal {
  AccessRole role = AccessRole::kNone;
  std::string who;  // ada@example.com, "admin token", "read token"
  std::int64_t token_id = 0;            // a personal token's id; 0 for the shared tokens
  std::optional<TimeMs> expires_ms;     // a personal token's expiry
  bool person = false;                  // a personal token (may manage its own tokens)
  std::string refused;                  // kNone after a credential was given: why it was refused
  // A forge sign-in (issue 41): the person's role on each watched repository
  // (by the store's name of it, RepoName; absent = hidden); null = every repository.
  std::shared_ptr<const std::map<std::string, AccessRole>> repos;
};

inline constexpr std::string_view kPersonalTokenPrefix = "tqp_";
// A new personal token's secret: "tqp_" + 32 random bytes in hex (OpenSSL).
Result<std::string> NewPersonalToken();
// What the store keeps of a secret: its SHA-256, hex.
std::string PersonalTokenHash(std::string_view secret);

// Who `secret` is: the admin or read token of `config` (compared in constant
// time), else a personal token of `store` that is neither revoked nor
// expired. `store` may be null (the shared tokens only). Writes nothing.
Principal Identify(const ServerConfig& config, Store* store, std::string_view secret, TimeMs now);
// The same for "Authorization: Bearer SECRET"; kNone without the header.
Principal IdentifyBearer(const ServerConfig& config, Store* store, const HttpHeaders& headers,
                         TimeMs now);

// The role `auth:`'s lists give a person named `user` (an email) in `groups`:
// admin when the user or a group is in admins, else write (writers), else
// read (viewers; every user when no viewers list is given), else kNone.
AccessRole RoleFromLists(const RoleLists& auth, const std::string& user,
                         const std::vector<std::string>& groups);

// Appends the audit row and logs "<area>: <row.who> <text>". A failure to
// write the row is logged, not returned: the action itself happened.
void RecordAudit(Store& store, const Access::AuditRow& row, std::string_view area,
                 std::string_view text);

// The rows as `trainq audit --json` prints them and GET /api/v1/audit
// answers: [{"id", "at_ms", "at", "who", "action", "target", "detail",
// "address"}], newest first.
nlohmann::json AuditJson(const std::vector<Access::AuditRow>& rows);
// The rows as `trainq audit` prints them: one line each, newest first.
std::string AuditText(const std::vector<Access::AuditRow>& rows);

}  // namespace trainq
