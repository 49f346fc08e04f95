#include "agent/daemon/access.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/crypto.h"
#include "core/strings.h"
#include "queue/store.h"

namespace trainq {

const char* RoleName(AccessRole role) {
  switch (role) {
    case AccessRole::kRead:
      return "read";
    case AccessRole::kWrite:
      return "write";
    case AccessRole::kAdmin:
      return "admin";
    default:
      return "none";
  }
}

std::optional<AccessRole> ParseRole(std::string_view name) {
  if (name == "read") return AccessRole::kRead;
  if (name == "write") return AccessRole::kWrite;
  if (name == "admin") return AccessRole::kAdmin;
  return std::nullopt;
}

Result<std::string> NewPersonalToken() {
  ASSIGN_OR_RETURN(auto hex, RandomHex(32));
  return std::string(kPersonalTokenPrefix) + hex;
}

std::string PersonalTokenHash(std::string_view secret) { return Sha256Hex(secret); }

namespace {

bool SameSecret(std::string_view given, const std::string& want) {
  if (want.empty() || given.empty()) return false;
  return ConstantTimeEquals(Sha256Hex(given), Sha256Hex(want));
}

bool LooksPersonal(std::string_view s) {
  return s.size() == kPersonalTokenPrefix.size() + 64 && s.starts_with(kPersonalTokenPrefix) &&
         std::all_of(s.begin() + kPersonalTokenPrefix.size(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

Principal Identify(const ServerConfig& config, Store* store, std::string_view secret, TimeMs now) {
  Principal p;
  secret = Trim(secret);
  if (secret.empty()) return p;
  if (SameSecret(secret, config.admin_token.value)) {
    p.role = AccessRole::kAdmin;
    p.who = "admin token";
    return p;
  }
  if (SameSecret(secret, config.read_token.value)) {
    p.role = AccessRole::kRead;
    p.who = "read token";
    return p;
  }
  if (!LooksPersonal(secret)) {
    p.refused = "not the read or admin token, nor a personal token";
    return p;
  }
  if (!store) {
    p.refused = "personal tokens cannot be checked here";
    return p;
  }
  // Looked up by the hash of the whole secret: the index is over hashes, so
  // the lookup's timing says nothing about a secret.
  auto row = store->access().FindToken(PersonalTokenHash(secret));
  if (!row) {
    p.refused = "the store cannot be read: " + row.error().message;
    return p;
  }
  if (!*row) {
    p.refused = "an unknown personal token";
    return p;
  }
  const auto& t = **row;
  if (t.revoked_ms) {
    p.refused = "personal token " + std::to_string(t.id) + " (" + t.name + ") of " + t.owner +
                " was revoked";
    return p;
  }
  if (t.expires_ms && *t.expires_ms <= now) {
    p.refused = "personal token " + std::to_string(t.id) + " (" + t.name + ") of " + t.owner +
                " has expired";
    return p;
  }
  auto role = ParseRole(t.role);
  if (!role) {
    p.refused = "personal token " + std::to_string(t.id) + " has no known role";
    return p;
  }
  p.role = *role;
  p.who = t.owner;
  p.token_id = t.id;
  p.expires_ms = t.expires_ms;
  p.person = true;
  return p;
}

Principal IdentifyBearer(const ServerConfig& config, Store* store, const HttpHeaders& headers,
                         TimeMs now) {
  auto auth = FindHeader(headers, "Authorization");
  if (!auth || !auth->starts_with("Bearer ")) return {};
  return Identify(config, store, std::string_view(*auth).substr(7), now);
}

AccessRole RoleFromLists(const RoleLists& auth, const std::string& user,
                         const std::vector<std::string>& groups) {
  auto in = [&](const std::vector<std::string>& list) {
    for (const auto& x : list) {
      if (x == user) return true;
      if (std::find(groups.begin(), groups.end(), x) != groups.end()) return true;
    }
    return false;
  };
  if (in(auth.admins)) return AccessRole::kAdmin;
  if (in(auth.writers)) return AccessRole::kWrite;
  if (!auth.viewers_given || in(auth.viewers)) return AccessRole::kRead;
  return AccessRole::kNone;
}

void RecordAudit(Store& store, const Access::AuditRow& row, std::string_view area,
                 std::string_view text) {
  spdlog::info("{}: {} {}", area, row.who, text);
  if (auto id = store.access().AddAudit(row); !id) {
    spdlog::error("{}: the audit row of \"{} {}\" could not be written: {}", area, row.who, text,
                  id.error().message);
  }
}

nlohmann::json AuditJson(const std::vector<Access::AuditRow>& rows) {
  auto out = nlohmann::json::array();
  for (const auto& r : rows) {
    out.push_back({{"id", r.id},
                   {"at_ms", r.at_ms},
                   {"at", FormatTimestamp(r.at_ms) + " UTC"},
                   {"who", r.who},
                   {"action", r.action},
                   {"target", r.target},
                   {"detail", r.detail},
                   {"address", r.address}});
  }
  return out;
}

std::string AuditText(const std::vector<Access::AuditRow>& rows) {
  if (rows.empty()) return "no audit rows in that time\n";
  std::size_t who_w = 3, action_w = 6, target_w = 6, from_w = 4;
  for (const auto& r : rows) {
    from_w = std::max(from_w, r.address.size());
    who_w = std::max(who_w, r.who.size());
    action_w = std::max(action_w, r.action.size());
    target_w = std::max(target_w, r.target.size());
  }
  auto pad = [](const std::string& s, std::size_t w) { return s + std::string(w - s.size(), ' '); };
  std::string out = pad("WHEN (UTC)", 19) + "  " + pad("WHO", who_w) + "  " +
                    pad("ACTION", action_w) + "  " + pad("TARGET", target_w) + "  " + pad("FROM", from_w) +
                    "  DETAIL\n";
  for (const auto& r : rows) {
    out += FormatTimestamp(r.at_ms) + "  " + pad(r.who, who_w) + "  " + pad(r.action, action_w) + "  " +
           pad(r.target, target_w) + "  " + pad(r.address.empty() ? "-" : r.address, from_w) +
           (r.detail.empty() ? "" : "  " + r.detail) + "\n";
  }
  return out;
}

}  // namespace trainq
