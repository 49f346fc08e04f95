// A look at a database's write-ahead log (<db>-wal) before SQLite replays it.
//
// SQLite replays a WAL up to the last commit whose frames all carry the WAL
// header's salts and a valid running checksum, and silently drops the rest
// (https://www.sqlite.org/fileformat2.html#walformat, "4.3 Checksum
// Algorithm" and "4.4 Reader Algorithm"). A crash mid-transaction leaves such
// a rest, and that is harmless: it was never committed. But a torn write or a
// damaged sector in the middle of the WAL drops every commit after it as
// well, and SQLite says nothing. InspectWal reads the same frames the same way
// and counts what would be dropped: frames after the first frame whose
// checksum fails (a torn or damaged frame) that carry the current salts and
// whose own checksum holds (from the running sum stored in the frame before
// them), and among them the commit frames: transactions that were committed
// and are now lost. It cannot see a WAL that was cut off cleanly at a frame boundary
// after a commit, nor one whose header was overwritten with a valid one.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"

namespace trainq {

struct WalInspection {
  bool present = false;           // the -wal file exists and is not empty
  std::int64_t bytes = 0;
  bool header_ok = false;         // magic, version and header checksum
  std::int64_t frames = 0;        // whole frames in the file
  std::int64_t replayed = 0;      // frames SQLite keeps (up to the last valid commit)
  std::int64_t commits = 0;       // commits among them
  std::int64_t bad_frame = 0;     // 1-based: the first frame of this WAL failing its checksum; 0: none
  std::int64_t lost_frames = 0;   // valid frames of this WAL after bad_frame
  std::int64_t lost_commits = 0;  // committed transactions SQLite drops (bad_frame's one included)
  // One line for the log: "" when nothing is lost, else what SQLite will drop.
  std::string Problem(const std::string& wal_path) const;
};

// Reads <db_path>-wal. Only meaningful before any connection replays it (at
// start-up); a missing WAL is `present = false`.
Result<WalInspection> InspectWal(const std::string& db_path);

}  // namespace trainq
