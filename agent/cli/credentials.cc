#include "agent/cli/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/strings.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace trainq {

std::string CredentialsPath() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "trainq" / "credentials.json").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : ".") / ".config" / "trainq" / "credentials.json")
      .string();
}

std::string ServerKey(const std::string& server) {
  std::string s(Trim(server));
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

namespace {

Result<json> Load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return json{{"servers", json::object()}};
    return Fail(ErrorKind::kIo, path + ": " + std::strerror(errno));
  }
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Fail(ErrorKind::kInvalidArgument,
                path + ": holds tokens and others may read it (mode " + mode + "); chmod 600 " +
                    path);
  }
  ASSIGN_OR_RETURN(auto text, ReadFile(path));
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("servers") || !j["servers"].is_object()) {
    return Fail(ErrorKind::kInvalidArgument,
                path + ": not a trainq credentials file (expected {\"servers\": {...}}); remove "
                       "it and run `trainq login` again");
  }
  return j;
}

Status Save(const std::string& path, const json& j) {
  fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Fail(ErrorKind::kIo, dir.string() + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  // Written whole under a temporary name of mode 0600, then renamed over.
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Fail(ErrorKind::kIo, tmp + ": " + std::strerror(errno));
  ::fchmod(fd, 0600);
  std::string text = j.dump(2) + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Fail(ErrorKind::kIo, path + ": " + why);
  }
  return {};
}

}  // namespace

Result<std::optional<std::string>> StoredToken(const std::string& server) {
  if (server.empty()) return std::optional<std::string>();
  ASSIGN_OR_RETURN(auto j, Load(CredentialsPath()));
  const auto& servers = j["servers"];
  auto it = servers.find(ServerKey(server));
  if (it == servers.end() || !it->is_object() || !it->contains("token") ||
      !(*it)["token"].is_string()) {
    return std::optional<std::string>();
  }
  return std::optional<std::string>((*it)["token"].get<std::string>());
}

Status StoreToken(const std::string& server, const std::string& token, const std::string& who,
                  const std::string& role) {
  std::string path = CredentialsPath();
  ASSIGN_OR_RETURN(auto j, Load(path));
  j["servers"][ServerKey(server)] = {{"token", token}, {"who", who}, {"role", role}};
  return Save(path, j);
}

Result<bool> ForgetToken(const std::string& server) {
  std::string path = CredentialsPath();
  ASSIGN_OR_RETURN(auto j, Load(path));
  if (j["servers"].erase(ServerKey(server)) == 0) return false;
  TRY(Save(path, j));
  return true;
}

}  // namespace trainq

#include <pwd.h>

#include "queue/access.h"
#include "queue/store.h"

namespace trainq {

std::string LocalWho() {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(::getuid(), &pw, buf, sizeof buf, &found) == 0 && found) {
    return std::string("local user ") + found->pw_name;
  }
  return "local user uid " + std::to_string(::getuid());
}

void AuditLocal(Store& store, const std::string& action, const std::string& target,
                const std::string& detail, std::int64_t now_ms) {
  // The action happened; a row that cannot be written is said, not fatal.
  if (auto id = store.access().AddAudit({0, now_ms, LocalWho(), action, target, detail, "local"});
      !id) {
    std::fprintf(stderr, "trainq: warning: the audit row was not written: %s\n",
                 id.error().message.c_str());
  }
}

}  // namespace trainq
