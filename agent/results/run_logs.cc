#include "agent/results/run_logs.h"
#include "queue/run_queue.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

namespace trainq {

namespace fs = std::filesystem;

Result<std::vector<RunLogFile>> RunLogFiles(Store& store, std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto run, store.runs().Run(run_id));
  if (!run) return Fail(ErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
  std::vector<RunLogFile> out;
  if (run->log_path.empty()) return out;
  std::error_code ec;
  out.push_back({std::nullopt, run->log_path, fs::exists(run->log_path, ec)});
  std::vector<RunLogFile> ranks;
  fs::path dir = fs::path(run->log_path).parent_path();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!name.starts_with("rank-") || !name.ends_with(".log")) continue;
    std::string k = name.substr(5, name.size() - 9);
    if (k.empty() || k.size() > 6 || !std::all_of(k.begin(), k.end(), ::isdigit)) continue;
    ranks.push_back({std::stoi(k), it->path().string(), true});
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

}  // namespace trainq
