// Daemon: `trainq serve` once its options are read and checked
// (agent/cli/cmd_serve.cc). It owns everything serve runs:
//   - the store connection of its loop (the WAL and quick_check findings
//     logged when it opens);
//   - the push pipeline's threads (agent/triggers/push_pipeline.h): pushes
//     become batches, repositories are polled, statuses go back to forges;
//   - the HTTP server (webhooks, the worker API, the read routes, the
//     dashboard) and its listener;
//   - what runs the queue: the fleet (machines booted by each pool's provider
//     run `trainq worker` and lease over HTTP) or, with `inproc`, the same
//     Worker (agent/runner/worker.h) on a thread of this process, leasing
//     through an in-process LeaseClient (inproc_lease_client.h);
//   - the sweep driver, which queues each sweep's next points.
// Open() builds and starts all of it; Run() is the loop (its order is stated
// at Daemon::Run in daemon.cc) and shuts everything down when it ends.
// Single-threaded: Run() is called once, from one thread.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "agent/daemon/fleet.h"
#include "agent/daemon/server_http.h"
#include "agent/runner/worker.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/result.h"

namespace trainq {

struct DaemonOptions {
  std::string db;
  std::string data_dir;                  // absolute: run files, mirrors, tokens
  std::optional<ListenAddress> address;  // nullopt: no HTTP listener (inproc only)
  std::string listen;                    // the address as given, for the log
  bool until_idle = false;               // exit once nothing is left to run
  bool push_pipeline = true;             // run the push pipeline's threads
  TimeMs poll_ms = 200;                  // the loop's wait between passes
  TimeMs scale_interval_ms = 1000;       // fleet: one autoscaler pass at most this often
  TimeMs lease_ms = 60'000;              // workers' leases
  TimeMs heartbeat_ms = 10'000;          // told to workers at registration
  FleetOptions fleet;                    // fleet: `instance` is filled by Open
  // Set: run the queue on this process's slots (`serve --inproc`), no fleet:
  // its slots, GPUs, fusion, kill grace, environment and bin dir; Open fills
  // in the server, token, data dir and this host.
  std::optional<WorkerConfig> inproc;
};

class Daemon {
 public:
  // Opens the store, starts the push pipeline, the server and its listener,
  // and the fleet (its pools' providers) or the in-process worker.
  static Result<std::unique_ptr<Daemon>> Open(ServerConfig config, DaemonOptions options,
                                              const Clock& clock);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until *stop becomes true (a signal) or, with until_idle, nothing is
  // left to run; then stops the listener, the push pipeline and (on a
  // signal or an error) this host's workers. The error: a pass that failed for good, or
  // (until_idle) runs that ended dead or can never start.
  Status Run(const std::atomic<bool>& stop);

 private:
  struct Parts;
  explicit Daemon(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> p_;
};

}  // namespace trainq
