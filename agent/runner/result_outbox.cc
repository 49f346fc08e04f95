#include "agent/runner/result_outbox.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "core/strings.h"

namespace trainq {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ResultOutbox::PathOf(std::int64_t run_id, int node_rank) const {
  std::string name = std::to_string(run_id);
  if (node_rank >= 0) name += ".node" + std::to_string(node_rank);
  return (fs::path(dir_) / (name + ".json")).string();
}

std::string ResultOutbox::LogTail(const std::string& log_path, std::int64_t from) {
  std::error_code ec;
  const auto size = static_cast<std::int64_t>(fs::file_size(log_path, ec));
  if (ec || size <= from) return "";
  std::int64_t start = from;
  std::string head;
  if (size - from > static_cast<std::int64_t>(kMaxLogTail)) {
    start = size - static_cast<std::int64_t>(kMaxLogTail);
    head = "[trainq: " + std::to_string(start - from) +
           " bytes of output left out: the server was away when the run ended]\n";
  }
  std::ifstream in(log_path, std::ios::binary);
  in.seekg(start);
  std::string data(static_cast<std::size_t>(size - start), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  return head + data;
}

namespace {

Status WriteKept(const std::string& dir, const std::string& path, const PendingResult& r) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Fail(ErrorKind::kIo, dir + ": " + ec.message());
  json j = {{"run_id", r.run_id},
            {"complete", r.complete},
            {"points", r.points},
            {"log", r.log},
            {"log_offset", r.log_offset}};
  if (r.node_rank >= 0) j["node_rank"] = r.node_rank;
  // Output is bytes, JSON strings are UTF-8: replace what is not.
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return WriteFileDurably(path, text + "\n");
}

}  // namespace

Status ResultOutbox::Put(const PendingResult& r) {
  const std::string path = PathOf(r.run_id, r.node_rank);
  auto st = WriteKept(dir_, path, r);
  if (st) {
    held_.erase(path);
  } else {
    held_[path] = r;
  }
  return st;
}

Status ResultOutbox::Persist() {
  for (auto it = held_.begin(); it != held_.end();) {
    TRY(WriteKept(dir_, it->first, it->second));
    it = held_.erase(it);
  }
  return {};
}

std::vector<PendingResult> ResultOutbox::All() const {
  std::vector<PendingResult> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".json") continue;
    const std::string path = e.path().string();
    if (held_.contains(path)) continue;  // the newer copy is in memory
    auto text = ReadFile(path);
    json j = text ? json::parse(*text, nullptr, false) : json();
    PendingResult r;
    bool ok = j.is_object() && j.contains("run_id") && j["run_id"].is_number_integer() &&
              j.contains("complete") && j["complete"].is_object();
    if (ok) {
      r.run_id = j["run_id"].get<std::int64_t>();
      r.complete = j["complete"];
      if (j.contains("points") && j["points"].is_array()) r.points = j["points"];
      if (j.contains("log") && j["log"].is_string()) r.log = j["log"].get<std::string>();
      if (j.contains("log_offset") && j["log_offset"].is_number_integer()) {
        r.log_offset = j["log_offset"].get<std::int64_t>();
      }
      if (j.contains("node_rank") && j["node_rank"].is_number_integer()) {
        r.node_rank = j["node_rank"].get<int>();
      }
      out.push_back(std::move(r));
    } else {
      spdlog::warn("{}: not a kept run result; set aside as {}.bad", path, path);
      std::error_code rename_ec;
      fs::rename(path, path + ".bad", rename_ec);
    }
  }
  for (const auto& [path, r] : held_) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const PendingResult& a, const PendingResult& b) {
    return std::pair(a.run_id, a.node_rank) < std::pair(b.run_id, b.node_rank);
  });
  return out;
}

void ResultOutbox::Remove(std::int64_t run_id, int node_rank) {
  const std::string path = PathOf(run_id, node_rank);
  held_.erase(path);
  std::error_code ec;
  fs::remove(path, ec);
}

bool ResultOutbox::empty() const {
  if (!held_.empty()) return false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() == ".json") return false;
  }
  return true;
}

}  // namespace trainq
