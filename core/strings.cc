#include "core/strings.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "core/placeholders.h"

namespace trainq {

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string OneLine(std::string s, std::size_t max) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (s.size() > max) s = s.substr(0, max > 3 ? max - 3 : 0) + "...";
  return s;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string ShortSha(std::string_view sha, std::size_t chars) {
  return std::string(sha.substr(0, chars));
}

Result<std::int64_t> ParseDurationSeconds(std::string_view text) {
  auto t = Trim(text);
  auto bad = [&] {
    return Fail(ErrorKind::kInvalidArgument,
                "expected a duration such as 90s, 15m, 2h or 1d, got \"" + std::string(text) + "\"");
  };
  if (t.empty()) return bad();
  std::int64_t total = 0;
  size_t i = 0;
  while (i < t.size()) {
    size_t j = i;
    while (j < t.size() && t[j] >= '0' && t[j] <= '9') ++j;
    if (j == i) return bad();
    std::int64_t n = 0;
    for (size_t k = i; k < j; ++k) {
      n = n * 10 + (t[k] - '0');
      if (n > 10'000'000'000LL) return bad();
    }
    std::int64_t unit = 1;
    if (j < t.size()) {
      switch (t[j]) {
        case 's': unit = 1; break;
        case 'm': unit = 60; break;
        case 'h': unit = 3600; break;
        case 'd': unit = 86400; break;
        default: return bad();
      }
      ++j;
    } else if (i != 0) {
      return bad();  // "1h30" is ambiguous
    }
    total += n * unit;
    i = j;
  }
  return total;
}

std::string FormatDuration(std::int64_t ms) {
  if (ms < 0) ms = 0;
  std::int64_t s = ms / 1000;
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm%02llds", static_cast<long long>(s / 3600),
                  static_cast<long long>((s / 60) % 60), static_cast<long long>(s % 60));
  }
  return buf;
}

std::string FormatTimestamp(std::int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Substitute(std::string_view text, const std::map<std::string, std::string>& vars) {
  return FillPlaceholders(text, [&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string FormatDouble(double v, int precision) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Fail(errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo,
                path + ": " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

Status IoError(const std::string& path, const char* what, int err) {
  return Fail(ErrorKind::kIo, path + ": " + what + ": " + std::strerror(err));
}

// Writes all of `contents` to `fd`, then fsyncs it when `sync`, then closes
// it: the first error is returned (the descriptor is closed in any case).
Status WriteAndClose(int fd, const std::string& path, std::string_view contents, bool sync) {
  const char* p = contents.data();
  std::size_t left = contents.size();
  Status st;
  while (left > 0 && st) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = IoError(path, "write", errno);
    } else {
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (st && sync && ::fsync(fd) != 0) st = IoError(path, "fsync", errno);
  // close is not retried on EINTR (Linux frees the descriptor anyway).
  if (::close(fd) != 0 && st) st = IoError(path, "close", errno);
  return st;
}

}  // namespace

Status WriteFile(const std::string& path, std::string_view contents) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(path, "open", errno);
  return WriteAndClose(fd, path, contents, false);
}

Status WriteFileDurably(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(tmp, "open", errno);
  Status st = WriteAndClose(fd, tmp, contents, true);
  if (st && ::rename(tmp.c_str(), path.c_str()) != 0) st = IoError(path, "rename", errno);
  if (!st) {
    ::unlink(tmp.c_str());
    return st;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return IoError(dir, "open", errno);
  Status dst;
  if (::fsync(dfd) != 0) dst = IoError(dir, "fsync", errno);
  ::close(dfd);
  return dst;
}

}  // namespace trainq
