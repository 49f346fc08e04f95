// The pool tokens (agent/daemon/worker_api.h): each pool's token from the
// config or its token file (created once, mode 0600), and its SHA-256 hex in
// the store, which WorkerApi compares with the bearer token of each call.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "agent/daemon/worker_api.h"
#include "core/crypto.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/store.h"

namespace trainq {

namespace fs = std::filesystem;

namespace {

// Reads the pool's token file, or creates it (mode 0600) with a new token.
Result<std::string> ReadOrCreateToken(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Fail(ErrorKind::kIo, fs::path(path).parent_path().string() + ": " + ec.message());
  ::chmod(fs::path(path).parent_path().c_str(), 0700);
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::ifstream in(path);
    if (in) {
      std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      token = std::string(Trim(token));
      if (token.empty()) return Fail(ErrorKind::kInvalidArgument, path + ": empty worker token");
      return token;
    }
    ASSIGN_OR_RETURN(std::string token, RandomHex(32));
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;  // another process made it first: read theirs
      return Fail(ErrorKind::kIo, path + ": " + std::strerror(errno));
    }
    std::string line = token + "\n";
    bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ok = ::fsync(fd) == 0 && ok;
    ::close(fd);
    if (!ok) return Fail(ErrorKind::kIo, path + ": could not write the worker token");
    spdlog::info("created the worker token of pool {} in {}", fs::path(path).stem().string(), path);
    return token;
  }
  return Fail(ErrorKind::kIo, path + ": could not read or create the worker token");
}

}  // namespace

std::string TokenFilePath(const std::string& data_dir, const std::string& pool) {
  return (fs::path(data_dir) / "tokens" / (pool + ".token")).string();
}

Status EnsurePoolTokens(Store& store, const ServerConfig& config, const std::string& data_dir,
                        TimeMs now) {
  std::vector<std::string> pools;
  for (const auto& p : config.pools) pools.push_back(p.name());
  if (pools.empty()) pools.push_back(kDefaultPool);
  for (const auto& name : pools) {
    ASSIGN_OR_RETURN(std::string token, PoolToken(config, data_dir, name));
    TRY(store.machines().SetPoolTokenHash(name, Sha256Hex(token), now));
  }
  return {};
}

Result<std::string> PoolToken(const ServerConfig& config, const std::string& data_dir,
                              const std::string& pool) {
  const PoolSpec* spec = config.FindPool(pool);
  std::string token;
  if (spec && !spec->token.empty()) {
    token = std::string(Trim(spec->token.value));
  } else {
    ASSIGN_OR_RETURN(token, ReadOrCreateToken(TokenFilePath(data_dir, pool)));
  }
  if (token.size() < 16) {
    return Fail(ErrorKind::kInvalidArgument,
                "pool " + pool + ": the worker token is too short (at least 16 characters)");
  }
  return token;
}

}  // namespace trainq
