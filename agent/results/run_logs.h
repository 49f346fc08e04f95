// A run's logs as the server keeps them: `<data>/runs/<id>/output.log` (the
// path stored on the run), and for a gang run one `rank-<K>.log` per process
// beside it. `trainq logs` reads them from the database's data folder or
// through `trainq serve`'s GET /api/v1/logs; both go through ReadRunLog, so
// a CI job sees the bytes a shell on the server would.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "queue/store.h"

namespace trainq {

struct RunLogFile {
  std::optional<int> rank;  // nullopt: the run's own output.log
  std::string path;         // the log as written; archived: `path` + ".gz" holds it
  bool exists = false;      // the log or its archive
  bool archived = false;    // retention archived it (gzip, beside where it was)
};

// The run's log files: output.log, then rank-K.log by K. kNotFound for an
// unknown run; a run that never started has no path yet (empty list).
Result<std::vector<RunLogFile>> RunLogFiles(Store& store, std::int64_t run_id);

struct RunLogChunk {
  std::string bytes;            // at most max_bytes, from `offset`
  std::int64_t next_offset = 0; // where the next read starts
  bool run_ended = false;       // the run is in a final state (follow stops at the end)
  std::string path;
  bool archived = false;        // read from the archive retention made (path ends in .gz)
};

// Up to `max_bytes` of the run's log (or of rank K's) from `offset`.
// kNotFound names the run or the rank (and lists the ranks that have logs).
Result<RunLogChunk> ReadRunLog(Store& store, std::int64_t run_id, std::optional<int> rank,
                               std::int64_t offset, std::int64_t max_bytes);

// The newest part of one log file, as the dashboard's run page reads it.
struct LogTail {
  std::int64_t from = 0;   // where `bytes` start in the (uncompressed) log
  std::int64_t size = 0;   // the log's whole length, uncompressed
  bool skipped = false;    // more than max_bytes lay past the asked `from`: the newest kept
  bool archived = false;   // read from `path`.gz (retention archived it)
  std::string bytes;
};

// `path` from `from`, at most `max_bytes`: the newest part when more is
// there; a `from` past the end reads from 0 (a new attempt began the file
// again). When `path` is gone and retention left `path`.gz, the archive is
// decompressed as a stream keeping only its last `max_bytes` (memory stays
// max_bytes plus a 64 KiB buffer however large the archive). A missing log
// is an empty tail; a damaged archive is kIo naming it.
Result<LogTail> ReadLogTail(const std::string& path, std::int64_t from, std::int64_t max_bytes);

// Retention (queue/retention.h): compresses the run's logs (output.log, and
// a gang's rank-K.log beside it) to `<file>.gz` in the same folder and
// removes each original once its archive is whole on disk. ReadRunLog reads
// an archived log as it read the original, from the same offsets. A missing
// log (never written, removed by hand) is not an error; returns the number
// of files archived.
Result<int> ArchiveRunLogs(const std::string& log_path);

}  // namespace trainq
