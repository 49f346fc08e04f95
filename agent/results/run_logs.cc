#include "agent/results/run_logs.h"
#include "queue/run_queue.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include <zlib.h>

namespace trainq {

namespace fs = std::filesystem;

namespace {

constexpr const char* kArchiveSuffix = ".gz";

RunLogFile LogFile(std::optional<int> rank, const std::string& path) {
  std::error_code ec;
  if (fs::exists(path, ec)) return {rank, path, true, false};
  bool archived = fs::exists(path + kArchiveSuffix, ec);
  return {rank, path, archived, archived};
}

// Up to `max_bytes` of the archived log `gz` from `offset` (decompressed).
Result<RunLogChunk> ReadArchived(const std::string& gz, std::int64_t offset,
                                 std::int64_t max_bytes, RunLogChunk c) {
  c.path = gz;
  c.archived = true;
  gzFile f = gzopen(gz.c_str(), "rb");
  if (!f) return Fail(ErrorKind::kIo, gz + ": cannot open the archived log");
  std::string buf(static_cast<size_t>(std::clamp<std::int64_t>(max_bytes, 0, 1 << 26)), '\0');
  if (offset > 0 && gzseek(f, static_cast<z_off_t>(offset), SEEK_SET) < 0) {
    gzclose(f);
    return c;  // past its end: nothing more
  }
  int n = buf.empty() ? 0 : gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
  int errnum = 0;
  const char* msg = n < 0 ? gzerror(f, &errnum) : nullptr;
  std::string error = msg ? msg : "";
  gzclose(f);
  if (n < 0) return Fail(ErrorKind::kIo, gz + ": the archived log is damaged: " + error);
  buf.resize(static_cast<size_t>(n));
  c.bytes = std::move(buf);
  c.next_offset = offset + n;
  return c;
}

// `path` into `path`.gz: written under a temporary name, renamed when whole,
// then the original removed.
Status ArchiveOne(const std::string& path) {
  const std::string gz = path + kArchiveSuffix, tmp = gz + ".part";
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(ErrorKind::kIo, path + ": cannot read the log to archive");
  gzFile f = gzopen(tmp.c_str(), "wb6");
  if (!f) return Fail(ErrorKind::kIo, tmp + ": cannot write the archive");
  std::string buf(1 << 20, '\0');
  bool ok = true;
  while (ok && in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    auto got = in.gcount();
    if (got > 0 && gzwrite(f, buf.data(), static_cast<unsigned>(got)) != got) ok = false;
  }
  if (in.bad()) ok = false;
  if (gzclose(f) != Z_OK) ok = false;
  std::error_code ec;
  if (!ok) {
    fs::remove(tmp, ec);
    return Fail(ErrorKind::kIo, tmp + ": writing the archive failed (disk full?)");
  }
  fs::rename(tmp, gz, ec);
  if (ec) return Fail(ErrorKind::kIo, gz + ": " + ec.message());
  fs::remove(path, ec);
  if (ec) return Fail(ErrorKind::kIo, path + ": " + ec.message());
  return {};
}

// From `from` on, at most `max_bytes`, of a log `size` bytes long whose
// last `kept.size()` bytes are `kept`.
LogTail Tail(std::string kept, std::int64_t size, std::int64_t from, std::int64_t max_bytes) {
  LogTail t;
  t.size = size;
  t.from = from < 0 || from > size ? 0 : from;
  if (size - t.from > max_bytes) {
    t.skipped = true;
    t.from = size - max_bytes;
  }
  auto want = static_cast<size_t>(size - t.from);  // <= kept.size()
  kept.erase(0, kept.size() - std::min(want, kept.size()));
  t.bytes = std::move(kept);
  return t;
}

Result<LogTail> ReadArchivedTail(const std::string& gz, std::int64_t from, std::int64_t max_bytes) {
  gzFile f = gzopen(gz.c_str(), "rb");
  if (!f) return Fail(ErrorKind::kIo, gz + ": cannot open the archived log");
  // The newest `max_bytes` read so far, trimmed once they pass twice that:
  // at most 2 x max_bytes + a 64 KiB buffer however long the archive.
  const auto keep = static_cast<size_t>(max_bytes);
  std::string kept, buf(64 << 10, '\0');
  std::int64_t size = 0;
  int n = 0;
  while ((n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) {
    kept.append(buf.data(), static_cast<size_t>(n));
    if (kept.size() > 2 * keep) kept.erase(0, kept.size() - keep);
    size += n;
  }
  if (kept.size() > keep) kept.erase(0, kept.size() - keep);
  // A cut archive is no read error to gzread: it ends early and says
  // "unexpected end of file" (Z_BUF_ERROR) only through gzerror.
  int errnum = Z_OK;
  std::string error = gzerror(f, &errnum);
  gzclose(f);
  if (n < 0 || errnum != Z_OK) {
    return Fail(ErrorKind::kIo, gz + ": the archived log is damaged: " + error);
  }
  LogTail t = Tail(std::move(kept), size, from, max_bytes);
  t.archived = true;
  return t;
}

}  // namespace

Result<int> ArchiveRunLogs(const std::string& log_path) {
  if (log_path.empty()) return 0;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(log_path, ec)) files.push_back(log_path);
  fs::path dir = fs::path(log_path).parent_path();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.starts_with("rank-") && name.ends_with(".log") && it->is_regular_file(ec)) {
      files.push_back(it->path().string());
    }
  }
  for (const auto& f : files) TRY(ArchiveOne(f));
  return static_cast<int>(files.size());
}

Result<std::vector<RunLogFile>> RunLogFiles(Store& store, std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto run, store.runs().Run(run_id));
  if (!run) return Fail(ErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
  std::vector<RunLogFile> out;
  if (run->log_path.empty()) return out;
  std::error_code ec;
  out.push_back(LogFile(std::nullopt, run->log_path));
  std::vector<RunLogFile> ranks;
  fs::path dir = fs::path(run->log_path).parent_path();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.ends_with(".log.gz")) name.resize(name.size() - 3);  // archived
    if (!name.starts_with("rank-") || !name.ends_with(".log")) continue;
    std::string k = name.substr(5, name.size() - 9);
    if (k.empty() || k.size() > 6 || !std::all_of(k.begin(), k.end(), ::isdigit)) continue;
    // A log and its archive both there: an archiving cut short; counted once.
    if (std::any_of(ranks.begin(), ranks.end(),
                    [&](const RunLogFile& f) { return *f.rank == std::stoi(k); })) {
      continue;
    }
    ranks.push_back(LogFile(std::stoi(k), (dir / name).string()));
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const RunLogFile& a, const RunLogFile& b) { return *a.rank < *b.rank; });
  // A gang on one machine (serve --inproc): rank 0 writes the run's own log.
  if (!ranks.empty() && *ranks.front().rank != 0) {
    ranks.insert(ranks.begin(), RunLogFile{0, run->log_path, out.front().exists});
  }
  out.insert(out.end(), ranks.begin(), ranks.end());
  return out;
}

Result<RunLogChunk> ReadRunLog(Store& store, std::int64_t run_id, std::optional<int> rank,
                               std::int64_t offset, std::int64_t max_bytes) {
  ASSIGN_OR_RETURN(auto files, RunLogFiles(store, run_id));
  ASSIGN_OR_RETURN(auto run, store.runs().Run(run_id));
  RunLogChunk c;
  c.run_ended = run && IsTerminal(run->state);
  c.next_offset = std::max<std::int64_t>(offset, 0);
  const RunLogFile* file = nullptr;
  for (const auto& f : files) {
    if (f.rank == rank) file = &f;
  }
  if (!file) {
    if (!rank) return c;  // not started yet: nothing to show
    std::string have;
    for (const auto& f : files) {
      if (f.rank) have += (have.empty() ? "" : ", ") + std::to_string(*f.rank);
    }
    return Fail(ErrorKind::kNotFound,
                "run " + std::to_string(run_id) + " has no log of rank " + std::to_string(*rank) +
                    (have.empty() ? " (it has no rank logs)" : " (ranks with logs: " + have + ")"));
  }
  c.path = file->path;
  if (file->archived) {
    return ReadArchived(file->path + kArchiveSuffix, c.next_offset, max_bytes, std::move(c));
  }
  std::ifstream in(file->path, std::ios::binary);
  if (!in) return c;
  in.seekg(0, std::ios::end);
  std::int64_t size = static_cast<std::int64_t>(in.tellg());
  if (c.next_offset > size) c.next_offset = size;  // the file was replaced by a shorter one
  std::int64_t n = std::min(size - c.next_offset, std::max<std::int64_t>(max_bytes, 0));
  if (n <= 0) return c;
  in.seekg(c.next_offset);
  c.bytes.resize(static_cast<size_t>(n));
  in.read(c.bytes.data(), n);
  c.bytes.resize(static_cast<size_t>(in.gcount()));
  c.next_offset += static_cast<std::int64_t>(c.bytes.size());
  return c;
}

Result<LogTail> ReadLogTail(const std::string& path, std::int64_t from, std::int64_t max_bytes) {
  max_bytes = std::clamp<std::int64_t>(max_bytes, 0, 1 << 26);
  std::error_code ec;
  if (!fs::exists(path, ec) && fs::exists(path + kArchiveSuffix, ec)) {
    return ReadArchivedTail(path + kArchiveSuffix, from, max_bytes);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return LogTail{};  // not written yet
  in.seekg(0, std::ios::end);
  auto size = static_cast<std::int64_t>(in.tellg());
  if (size < 0) return LogTail{};
  LogTail t = Tail("", size, from, max_bytes);
  t.bytes.resize(static_cast<size_t>(size - t.from));
  in.seekg(t.from);
  in.read(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
  t.bytes.resize(static_cast<size_t>(in.gcount()));
  return t;
}

}  // namespace trainq
