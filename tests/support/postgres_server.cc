#include "tests/support/postgres_server.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "queue/sqlite.h"

namespace trainq::testing {

namespace {

// PostgreSQL's programs: TRAINQ_PG_BIN, else Debian's postgresql-15.
std::string BinDir() {
  const char* env = std::getenv("TRAINQ_PG_BIN");
  return env && *env ? env : "/usr/lib/postgresql/15/bin";
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class Server {
 public:
  Server() {
    const std::string bin = BinDir();
    if (!std::filesystem::exists(bin + "/initdb") || !std::filesystem::exists(bin + "/pg_ctl")) {
      throw std::runtime_error(
          "TRAINQ_TEST_DB=postgres, but PostgreSQL's programs are not in " + bin +
          " (install postgresql-15, as ci/install-deps does, or set TRAINQ_PG_BIN)");
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "trainq-pg-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    // initdb refuses root: as root, the server runs as nobody and owns the
    // directory.
    std::string as;
    if (::geteuid() == 0) {
      struct passwd* pw = ::getpwnam("nobody");
      if (!pw || ::chown(dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
        throw std::runtime_error("cannot give " + dir_ + " to user nobody for PostgreSQL");
      }
      as = "runuser -u nobody -- ";
    }
    pg_ctl_ = as + Quote(bin + "/pg_ctl") + " -D " + Quote(dir_ + "/data");
    StartWatchdog();
    std::string out;
    if (RunShell(as + Quote(bin + "/initdb") + " -D " + Quote(dir_ + "/data") +
                     " -U trainq --auth=trust --locale=C --encoding=UTF8 -N",
                 &out) != 0) {
      throw std::runtime_error("initdb failed: " + out);
    }
    // One role must give its password (PostgresPasswordLogin); every other
    // connection on the socket is trusted.
    {
      // Rewritten in place: the file keeps its owner (nobody, when root).
      const std::string hba = dir_ + "/data/pg_hba.conf";
      std::ifstream in(hba);
      std::stringstream rest;
      rest << in.rdbuf();
      in.close();
      std::ofstream outf(hba, std::ios::trunc);
      outf << "local all trainq_pw scram-sha-256\n" << rest.str();
      if (!outf.flush()) throw std::runtime_error("cannot write " + hba);
    }
    // Durability is not what these tests check: no fsync keeps them fast.
    if (RunShell(pg_ctl_ + " -w -s -l " + Quote(dir_ + "/log") + " -o " +
                     Quote("-k " + dir_ +
                           " -c listen_addresses= -c fsync=off -c synchronous_commit=off"
                           " -c full_page_writes=off -c max_connections=300") +
                     " start",
                 &out) != 0) {
      std::string log;
      RunShell("cat " + Quote(dir_ + "/log"), &log);
      throw std::runtime_error("pg_ctl start failed: " + out + log);
    }
    auto admin = sql::Db::Open(Url("postgres"), false, 10'000);
    if (!admin) throw std::runtime_error(admin.error().message);
    if (auto st = admin->Exec("CREATE DATABASE trainq"); !st) {
      throw std::runtime_error(st.error().message);
    }
    admin = sql::Db::Open(Url("trainq"), false, 10'000);
    if (!admin) throw std::runtime_error(admin.error().message);
    admin_ = std::move(*admin);
  }

  ~Server() {
    admin_ = sql::Db();
    RunShell(pg_ctl_ + " -s -m fast -w stop");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string Url(const std::string& db) const {
    return "postgresql://trainq@/" + db + "?host=" + dir_;
  }

  // A store of its own for each test: a schema in the one database (far
  // cheaper than a database each), which the URL puts first on the
  // connection's search_path.
  std::string NewDatabase() {
    std::string name = "t" + std::to_string(++databases_);
    if (auto st = admin_.Exec("CREATE SCHEMA " + name); !st) {
      throw std::runtime_error(st.error().message);
    }
    return Url("trainq") + "&options=-csearch_path%3D" + name;
  }

  PostgresLogin NewPasswordLogin() {
    PostgresLogin login;
    login.password = "pw-" + std::to_string(::getpid()) + "-" + std::to_string(databases_ + 1);
    if (!password_role_) {
      if (auto st = admin_.Exec("CREATE ROLE trainq_pw LOGIN"); !st) {
        throw std::runtime_error(st.error().message);
      }
      password_role_ = true;
    }
    if (auto st = admin_.Exec("ALTER ROLE trainq_pw PASSWORD '" + login.password + "'"); !st) {
      throw std::runtime_error(st.error().message);
    }
    std::string name = "t" + std::to_string(++databases_);
    if (auto st = admin_.Exec("CREATE SCHEMA " + name + " AUTHORIZATION trainq_pw"); !st) {
      throw std::runtime_error(st.error().message);
    }
    login.url = "postgresql://trainq_pw@/trainq?host=" + dir_ + "&options=-csearch_path%3D" + name;
    return login;
  }

 private:
  // A child that stops the server and removes its directory when this
  // process ends however it ends (a crash skips ~Server): it waits for the
  // end of a pipe whose only writer is this process.
  void StartWatchdog() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::string script = "read _; " + pg_ctl_ + " -s -m immediate stop; rm -rf " + Quote(dir_);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[0], 0);
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::setsid();
      ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[0]);  // fds[1] stays open until this process exits
  }

  std::string dir_;
  std::string pg_ctl_;
  sql::Db admin_;
  int databases_ = 0;
  bool password_role_ = false;
};

Server& TheServer() {
  static Server server;
  return server;
}

}  // namespace

bool TestingPostgres() {
  const char* env = std::getenv("TRAINQ_TEST_DB");
  return env && std::string(env) == "postgres";
}

namespace {
std::mutex& LocationMutex() {
  static std::mutex mu;
  return mu;
}
}  // namespace

bool PostgresInstalled() {
  return std::filesystem::exists(BinDir() + "/initdb") &&
         std::filesystem::exists(BinDir() + "/pg_ctl");
}

std::string PostgresLocation(const TempDir& dir, const std::string& name) {
  auto path = "pg:" + (dir.path() / name).string();
  static std::map<std::string, std::string> urls;
  std::lock_guard lock(LocationMutex());
  auto& url = urls[path];
  if (url.empty()) url = TheServer().NewDatabase();
  return url;
}

PostgresLogin PostgresPasswordLogin() {
  std::lock_guard lock(LocationMutex());
  return TheServer().NewPasswordLogin();
}

std::string StoreLocation(const TempDir& dir, const std::string& name) {
  auto path = (dir.path() / name).string();
  if (!TestingPostgres()) return path;
  auto& mu = LocationMutex();
  static std::map<std::string, std::string> urls;
  std::lock_guard lock(mu);
  auto& url = urls[path];
  if (url.empty()) url = TheServer().NewDatabase();
  return url;
}

}  // namespace trainq::testing
