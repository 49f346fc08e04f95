// Access (issue 41): people's personal API tokens and the audit trail of who
// did what, a part of Store (queue/store.h; `store.access()`) over its one
// connection. Tables from schema version 20.
//
// A token is kept only as the SHA-256 of its secret (a token is 32 random
// bytes, so a plain hash is enough: there is nothing to guess), with its
// owner, the role it carries, an expiry and its last use. Revoking sets
// revoked_ms; FindToken answers revoked and expired tokens too, and the
// caller refuses them (and says why).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"

namespace trainq {

struct StoreParts;

class Access {
 public:
  struct TokenRow {
    std::int64_t id = 0;
    std::string hash;   // SHA-256 hex of the secret
    std::string name;   // what its owner calls it ("ci", "laptop")
    std::string owner;  // the person: ada@example.com
    std::string role;   // read | write | admin
    std::string created_by;
    TimeMs created_ms = 0;
    std::optional<TimeMs> expires_ms;  // none: never
    std::optional<TimeMs> last_used_ms;
    std::string last_used_from;
    std::optional<TimeMs> revoked_ms;
    bool live(TimeMs now) const {
      return !revoked_ms && (!expires_ms || *expires_ms > now);
    }
  };
  struct AuditRow {
    std::int64_t id = 0;
    TimeMs at_ms = 0;
    std::string who;      // ada@example.com, "admin token", "local user ada"
    std::string action;   // cancel_run, retry_run, add_seeds, pool_reset, token_created, ...
    std::string target;   // "run 9", "batch 3", "pool gpu", "token 4 (ci)", ""
    std::string detail;   // free text ("2 run(s)")
    std::string address;  // the peer address, or "local"
  };

  Result<std::int64_t> AddToken(const TokenRow& t);
  // By hash; revoked and expired ones too (the caller says why it refuses).
  Result<std::optional<TokenRow>> FindToken(const std::string& hash);
  Result<std::optional<TokenRow>> GetToken(std::int64_t id);
  // Newest first; owner "" = everyone's.
  Result<std::vector<TokenRow>> ListTokens(const std::string& owner);
  // Records a use, at most once per `every_ms` per token (a gate that polls
  // every two seconds writes once a minute).
  Status TouchToken(std::int64_t id, TimeMs now, const std::string& from, TimeMs every_ms);
  // false: no such token, or revoked already.
  Result<bool> RevokeToken(std::int64_t id, TimeMs now);

  Result<std::int64_t> AddAudit(const AuditRow& a);
  // Rows at or after `since_ms`, newest first, at most `limit`; `target`
  // (when not empty) keeps only the rows about one thing ("run 9").
  Result<std::vector<AuditRow>> AuditSince(TimeMs since_ms, int limit,
                                           const std::vector<std::string>& targets = {});
  // Retention (server.yaml `retention: {audit: 400d}`): deletes up to
  // `max_rows` rows older than `before`, oldest first, in one write
  // transaction; answers how many went.
  Result<int> PruneAudit(TimeMs before, int max_rows);

 private:
  friend struct StoreParts;
  explicit Access(StoreParts& parts);
  Access(const Access&) = delete;
  Access& operator=(const Access&) = delete;

  StoreParts& parts_;
  sql::Db& db_;
};

}  // namespace trainq
