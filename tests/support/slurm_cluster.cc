#include "tests/support/slurm_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/http_server.h"

namespace trainq::testing {

namespace {

bool Executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ReadPid(const std::string& path) {
  try {
    return std::stoi(Slurp(path));
  } catch (...) {
    return 0;
  }
}

// Running and not a zombie (daemons are reparented; nobody may reap them).
bool Running(int pid) {
  if (pid <= 0) return false;
  std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

void Terminate(int pid) {
  if (!Running(pid)) return;
  ::kill(pid, SIGTERM);
  if (WaitFor([&] { return !Running(pid); }, std::chrono::seconds(15))) return;
  ::kill(pid, SIGKILL);
  WaitFor([&] { return !Running(pid); }, std::chrono::seconds(5));
}

std::string ShortHostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  std::string h(buf);
  return h.substr(0, h.find('.'));
}

}  // namespace

std::string SlurmCluster::shell_prefix() const { return "SLURM_CONF='" + conf_ + "' "; }

std::expected<std::unique_ptr<SlurmCluster>, std::string> SlurmCluster::Start(
    std::chrono::milliseconds deadline) {
  auto fail = [](const std::string& why) {
    return std::unexpected("single-node Slurm for the test: " + why);
  };
  if (::geteuid() != 0) {
    return fail("needs root (slurmd runs jobs as any user); run the tests as root, as CI does");
  }
  for (const char* bin : {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged",
                          "/usr/bin/sbatch", "/usr/bin/squeue", "/usr/bin/scancel",
                          "/usr/bin/sinfo"}) {
    if (!Executable(bin)) {
      return fail(std::string(bin) + " is missing: install the Debian packages slurm-wlm and "
                                     "munge (ci/install-deps does)");
    }
  }
  std::unique_ptr<SlurmCluster> c(new SlurmCluster());
  std::string out;

  // munge: reuse a running munged; else start one (with a key).
  if (RunShell("munge -n | unmunge", &out) != 0) {
    if (!std::filesystem::exists("/etc/munge/munge.key")) {
      if (RunShell("mkdir -p /etc/munge && (mungekey -c -f -k /etc/munge/munge.key || dd "
                   "if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024) && "
                   "chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key",
                   &out) != 0) {
        return fail("cannot create /etc/munge/munge.key: " + out);
      }
    }
    if (RunShell("mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge "
                 "/run/munge /var/log/munge /var/lib/munge && runuser -u munge -- "
                 "/usr/sbin/munged",
                 &out) != 0) {
      return fail("cannot start munged: " + out);
    }
    c->munged_pid_ = ReadPid("/run/munge/munged.pid");
    if (!WaitFor([] { return RunShell("munge -n | unmunge >/dev/null") == 0; },
                 std::chrono::seconds(10))) {
      return fail("munged does not answer");
    }
  }

  const std::string dir = c->dir_.path().string();
  c->node_ = ShortHostname();
  c->conf_ = dir + "/slurm.conf";
  std::filesystem::create_directories(dir + "/state");
  std::filesystem::create_directories(dir + "/spool");
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  int ctld_port = FreeLoopbackPort();
  int slurmd_port = FreeLoopbackPort();
  while (slurmd_port == ctld_port) slurmd_port = FreeLoopbackPort();
  {
    std::ofstream conf(c->conf_);
    conf << "ClusterName=trainqtest\n"
         << "SlurmctldHost=" << c->node_ << "(127.0.0.1)\n"
         << "SlurmctldPort=" << ctld_port << "\n"
         << "SlurmdPort=" << slurmd_port << "\n"
         << "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n"
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
         << "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
         << "JobAcctGatherType=jobacct_gather/none\nMpiDefault=none\nReturnToService=2\n"
         << "StateSaveLocation=" << dir << "/state\n"
         << "SlurmdSpoolDir=" << dir << "/spool\n"
         << "SlurmctldPidFile=" << dir << "/slurmctld.pid\n"
         << "SlurmdPidFile=" << dir << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << dir << "/slurmctld.log\n"
         << "SlurmdLogFile=" << dir << "/slurmd.log\n"
         << "NodeName=" << c->node_ << " NodeAddr=127.0.0.1 CPUs=" << cpus
         << " RealMemory=500 State=UNKNOWN\n"
         << "PartitionName=" << c->partition_ << " Nodes=" << c->node_
         << " Default=YES MaxTime=INFINITE State=UP\n";
  }
  std::string prefix = c->shell_prefix();
  if (RunShell(prefix + "/usr/sbin/slurmctld", &out) != 0) {
    return fail("slurmctld did not start: " + out + Slurp(dir + "/slurmctld.log"));
  }
  WaitFor([&] { return (c->ctld_pid_ = ReadPid(dir + "/slurmctld.pid")) > 0; },
          std::chrono::seconds(10));
  if (RunShell(prefix + "/usr/sbin/slurmd", &out) != 0) {
    return fail("slurmd did not start: " + out + Slurp(dir + "/slurmd.log"));
  }
  WaitFor([&] { return (c->slurmd_pid_ = ReadPid(dir + "/slurmd.pid")) > 0; },
          std::chrono::seconds(10));
  bool idle = WaitFor(
      [&] {
        std::string state;
        return RunShell(prefix + "sinfo --noheader --format=%t", &state) == 0 &&
               state.find("idle") != std::string::npos;
      },
      deadline);
  if (!idle) {
    std::string state;
    RunShell(prefix + "sinfo --noheader --format=%t", &state);
    return fail("the node is not idle after " + std::to_string(deadline.count()) +
                " ms (sinfo: " + state + "); slurmctld.log:\n" + Slurp(dir + "/slurmctld.log") +
                "\nslurmd.log:\n" + Slurp(dir + "/slurmd.log"));
  }
  return c;
}

void SlurmCluster::Stop() {
  if (Running(ctld_pid_)) RunShell(shell_prefix() + "scancel --full --user=root >/dev/null");
  if (Running(ctld_pid_) && Running(slurmd_pid_)) {
    // Jobs end (their slurmstepd with them) before the daemons go.
    WaitFor(
        [&] {
          std::string q;
          return RunShell(shell_prefix() + "squeue --noheader", &q) != 0 || q.empty();
        },
        std::chrono::seconds(15));
  }
  Terminate(slurmd_pid_);
  Terminate(ctld_pid_);
  if (munged_pid_ > 0) Terminate(munged_pid_);
  slurmd_pid_ = ctld_pid_ = munged_pid_ = 0;
}

SlurmCluster::~SlurmCluster() { Stop(); }

}  // namespace trainq::testing
