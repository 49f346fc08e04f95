// The seam between data-parallel training and the transport: a group of W
// ranks that sum, broadcast and pass float buffers. The real one is libtorch's
// c10d ProcessGroupGloo (trainer/distributed.cc, the only file with c10d
// calls: that API changed after libtorch 1.13); tests and the data-parallel
// logic see only this interface.
//
// Every call blocks until done or failed. A failed call (a rank that exited:
// at once; a rank that is alive but silent: after the group's timeout) is an
// kUnavailable or kTimeout Error naming the operation; the group is unusable
// after it (trainq-train exits 4 on every rank, as torchrun would restart the
// whole group). Collectives must be called in the same order on every rank.
// Send, Recv and RecvAny may be used by a second thread while the first makes
// no collective call (partially asynchronous mode's merge server).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/result.h"

namespace trainq::trainer {

// How this process joins its group (trainer/launcher.h fills it in).
struct RendezvousPlan {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string file_store;  // rendezvous auto: a FileStore path shared by the local ranks
  std::string host;        // env / tcp://: the TCPStore of rank 0
  int port = 0;
  std::int64_t timeout_seconds = 300;  // each collective; the rendezvous waits max(this, 300 s)
};

// What a rank has spent on communication so far.
struct CommStats {
  // Measured: bytes this process wrote (/proc/self/io wchar: the sockets,
  // gloo's framing included) during the calls, RecvAny excepted.
  std::int64_t bytes_sent = 0;
  std::int64_t calls = 0;
  double seconds = 0;           // wall time inside the calls
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Element-wise sum over the ranks, in place (a ring all-reduce: each rank
  // sends 2(W-1)/W of the buffer).
  virtual Status AllReduceSum(float* data, std::int64_t n) = 0;
  virtual Status AllReduceSum(double* data, std::int64_t n) = 0;
  // Root's buffer to every rank.
  virtual Status Broadcast(float* data, std::int64_t n, int root) = 0;
  // Point to point, matched by tag.
  virtual Status Send(const float* data, std::int64_t n, int to, int tag) = 0;
  virtual Status Recv(float* data, std::int64_t n, int from, int tag) = 0;
  // From whichever rank sends first; returns that rank.
  virtual Result<int> RecvAny(float* data, std::int64_t n, int tag) = 0;
  virtual CommStats stats() const = 0;
};

// Joins the group with libtorch's ProcessGroupGloo (a FileStore or a
// TCPStore). kInvalidArgument when this libtorch was built without c10d/Gloo.
Result<std::unique_ptr<Collective>> ConnectGloo(const RendezvousPlan& plan);

}  // namespace trainq::trainer
