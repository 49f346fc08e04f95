// Small file and JSON helpers shared by the Worker's files (worker*.cc);
// not part of the Worker's interface.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace trainq::worker_util {

// Up to `max` bytes of `path` from `offset`.
inline std::string ReadFrom(const std::string& path, std::int64_t offset, std::int64_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  std::int64_t size = in.tellg();
  if (size <= offset) return {};
  std::int64_t n = std::min<std::int64_t>(size - offset, max);
  std::string s(static_cast<size_t>(n), '\0');
  in.seekg(offset);
  in.read(s.data(), n);
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

inline std::int64_t FileSize(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<std::int64_t>(n);
}

// j[key] as T, or `fallback` when it is missing or of another type.
template <typename T>
T Get(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

}  // namespace trainq::worker_util
