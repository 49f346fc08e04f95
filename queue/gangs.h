// Gangs: one run over several machines (a part of Store, queue/store.h, over
// its one SQLite connection; `store.gangs()`).
//
// A batch whose spec_json has resources.nodes is a gang: each run is leased
// to `nodes` machines of one pool at once, in ONE transaction, or not at
// all, so no machine is held for a gang that cannot start and two gangs can
// never wait on each other. A gang_members row (schema 11) per node records
// the machine, the lease token of that attempt, the member's own expiry and,
// for node 0, the rendezvous address. The run's lease_expires_ms is the
// earliest member expiry, so ExpireLeases fails the whole run when any member
// goes silent; the run's token is shared by its members, so once the run has
// failed every member's next call is refused (kConflict) and its worker
// stops its processes. A member is live while its token is the run's and the
// run is leased or running; a machine with a live member leases nothing else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"
#include "queue/types.h"

namespace trainq {

struct StoreParts;

class Gangs {
 public:
  struct GangMember {
    std::int64_t run_id = 0;
    int node_rank = 0;
    std::int64_t token = 0;
    std::int64_t machine_id = 0;
    std::string state;  // assigned | running | done
    TimeMs expires_ms = 0;
    std::string master_addr;  // node 0's row: where rank 0 listens
    int master_port = 0;
  };
  // The members of the run's current attempt, by node rank (empty: none live
  // or not a gang).
  Result<std::vector<GangMember>> GangMembers(std::int64_t run_id);
  // The member row of node `node_rank` of the run's latest attempt, live or
  // not (its token names the attempt): a member may still send its logs
  // after the run failed.
  Result<std::optional<GangMember>> GangMemberOf(std::int64_t run_id, int node_rank);
  // All live members (leased or running runs), for tests and status.
  Result<std::vector<GangMember>> LiveGangMembers();
  struct GangView {
    std::string master_addr;  // "" until node 0 has said where it listens
    int master_port = 0;
    TimeMs expires_ms = 0;
  };
  // A member's heartbeat: its expiry moves to now + lease_ms (and the run's to
  // the earliest of its members'); node 0 may set the rendezvous address;
  // `started` marks the member running. kConflict when the token is stale or
  // the member is not on `machine`.
  Result<GangView> GangBeat(std::int64_t run_id, std::int64_t token, int node_rank,
                            std::int64_t machine, TimeMs now, TimeMs lease_ms, bool started,
                            const std::string& master_addr, int master_port);
  // A member's processes all exited 0 (node 0 brings rank 0's metric): the
  // member is done; once every member is, the run is Complete()d with node
  // 0's metric. Returns true when the run completed.
  Result<bool> GangMemberSucceeded(std::int64_t run_id, std::int64_t token, int node_rank,
                                   std::int64_t machine, TimeMs now,
                                   std::optional<double> metric_value);


 private:
  friend struct StoreParts;
  friend class Machines;
  explicit Gangs(StoreParts& parts);
  Gangs(const Gangs&) = delete;
  Gangs& operator=(const Gangs&) = delete;

  // Inside LeaseForMachine's transaction: the machine's undelivered members
  // (marked delivered), and whether it holds a live member at all (then it
  // leases nothing else).
  Result<std::pair<std::vector<LeasedRun>, bool>> DeliverGangMembers(std::int64_t machine,
                                                                     TimeMs now);
  // Inside LeaseForMachine's transaction: leases gang run `run_id` to `machine`
  // (node 0) and nodes - 1 other idle, ready machines of its pool heard from
  // within lease_ms, all or nothing. Empty when the gang cannot form now.
  Result<std::vector<LeasedRun>> FormGang(std::int64_t run_id, std::int64_t machine,
                                          const std::string& pool, const std::string& worker,
                                          TimeMs now, TimeMs lease_ms);

  StoreParts& parts_;  // the Store's connection, options and the other concerns
  sql::Db& db_;        // parts_.db
};

}  // namespace trainq
