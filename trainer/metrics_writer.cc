#include "trainer/metrics_writer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/strings.h"

namespace trainq::trainer {

std::string FormatMetricLine(const MetricLine& line) {
  nlohmann::ordered_json j;
  j["name"] = line.name;
  if (std::isfinite(line.value)) {
    j["value"] = line.value;
  } else {
    j["value"] = nullptr;
  }
  j["step"] = line.step;
  j["epoch"] = line.epoch;
  j["seed"] = line.seed;
  if (!line.split.empty()) j["split"] = line.split;
  if (line.final) j["final"] = true;
  return j.dump();
}

std::string ReplicaPath(const std::string& pattern, std::uint64_t seed, std::int64_t repeat) {
  return Substitute(pattern, {{"seed", std::to_string(seed)}, {"repeat", std::to_string(repeat)}});
}

Result<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& pattern) {
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(pattern));
}

MetricsWriter::~MetricsWriter() {
  for (auto& [path, f] : files_) std::fclose(f);
}

Status MetricsWriter::Write(const MetricLine& line, std::int64_t repeat) {
  if (pattern_.empty()) return {};
  const std::string path = ReplicaPath(pattern_, line.seed, repeat);
  std::FILE*& f = files_[path];
  if (f == nullptr) {
    std::error_code ec;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    f = std::fopen(path.c_str(), "a");
    if (f == nullptr) {
      files_.erase(path);
      return Fail(ErrorKind::kIo, "cannot open metrics file " + path + ": " + std::strerror(errno));
    }
  }
  const std::string text = FormatMetricLine(line) + "\n";
  if (std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fflush(f) != 0) {
    return Fail(ErrorKind::kIo, "cannot write metrics file " + path + ": " + std::strerror(errno));
  }
  return {};
}

}  // namespace trainq::trainer
