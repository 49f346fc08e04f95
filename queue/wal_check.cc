#include "queue/wal_check.h"

#include <array>
#include <cstring>
#include <fstream>
#include <vector>

namespace trainq {

namespace {

constexpr std::uint32_t kMagicLe = 0x377f0682;  // checksums over little-endian words
constexpr std::uint32_t kMagicBe = 0x377f0683;  // checksums over big-endian words
constexpr std::size_t kHeader = 32;
constexpr std::size_t kFrameHeader = 24;

std::uint32_t Be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::uint32_t Le32(const unsigned char* p) {
  return (std::uint32_t{p[3]} << 24) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[1]} << 8) |
         std::uint32_t{p[0]};
}

// The WAL checksum (fileformat2.html 4.3): over pairs of 32-bit words, in the
// byte order the magic number names, continuing from s.
void Checksum(bool big_endian, const unsigned char* data, std::size_t n,
              std::array<std::uint32_t, 2>& s) {
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    std::uint32_t x0 = big_endian ? Be32(data + i) : Le32(data + i);
    std::uint32_t x1 = big_endian ? Be32(data + i + 4) : Le32(data + i + 4);
    s[0] += x0 + s[1];
    s[1] += x1 + s[0];
  }
}

}  // namespace

std::string WalInspection::Problem(const std::string& wal_path) const {
  if (!present) return "";
  if (!header_ok) {
    return wal_path + ": the header is damaged, so SQLite ignores all " + std::to_string(bytes) +
           " bytes of it: any transaction committed there and not yet checkpointed is lost";
  }
  if (lost_commits == 0) return "";
  return wal_path + ": frame " + std::to_string(bad_frame) + " of " + std::to_string(frames) +
         " is torn or damaged (its checksum fails); SQLite keeps the " +
         std::to_string(commits) + " commit(s) before it and drops " +
         std::to_string(lost_commits) + " committed transaction(s) from it on (" +
         std::to_string(lost_frames) + " valid frame(s) after it)";
}

Result<WalInspection> InspectWal(const std::string& db_path) {
  const std::string path = db_path + "-wal";
  WalInspection w;
  std::ifstream in(path, std::ios::binary);
  if (!in) return w;
  std::vector<unsigned char> data((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) return Fail(ErrorKind::kIo, path + ": read failed");
  w.bytes = static_cast<std::int64_t>(data.size());
  if (data.empty()) return w;
  w.present = true;
  if (data.size() < kHeader) return w;
  const unsigned char* h = data.data();
  const std::uint32_t magic = Be32(h);
  if (magic != kMagicLe && magic != kMagicBe) return w;
  const bool big = magic == kMagicBe;
  const std::uint32_t page_size = Be32(h + 8);
  if (Be32(h + 4) != 3007000 || page_size < 512 || page_size > 65536 ||
      (page_size & (page_size - 1)) != 0) {
    return w;
  }
  std::array<std::uint32_t, 2> sum{0, 0};
  Checksum(big, h, 24, sum);
  if (sum[0] != Be32(h + 24) || sum[1] != Be32(h + 28)) return w;
  w.header_ok = true;
  const std::uint32_t salt1 = Be32(h + 16), salt2 = Be32(h + 20);
  const std::size_t frame_size = kFrameHeader + page_size;
  w.frames = static_cast<std::int64_t>((data.size() - kHeader) / frame_size);
  // Each frame's stored checksum is the running sum up to it, so a frame
  // after a damaged one can still be checked on its own, from the stored sum
  // of the frame before it: a valid commit frame there is a transaction that
  // was committed (and fsynced) and that SQLite will drop.
  bool broken = false;
  bool bad_is_commit = false;
  std::int64_t valid = 0;
  std::array<std::uint32_t, 2> prev = sum;
  for (std::int64_t i = 0; i < w.frames; ++i) {
    const unsigned char* f = data.data() + kHeader + static_cast<std::size_t>(i) * frame_size;
    const bool ours = Be32(f + 8) == salt1 && Be32(f + 12) == salt2;
    const bool commit = Be32(f + 4) != 0;
    std::array<std::uint32_t, 2> next = prev;
    Checksum(big, f, 8, next);
    Checksum(big, f + kFrameHeader, page_size, next);
    const bool self_ok = ours && next[0] == Be32(f + 16) && next[1] == Be32(f + 20);
    prev = {Be32(f + 16), Be32(f + 20)};
    if (!broken) {
      if (self_ok) {
        ++valid;
        if (commit) {
          w.replayed = valid;
          ++w.commits;
        }
        continue;
      }
      broken = true;
      w.bad_frame = i + 1;
      bad_is_commit = commit;
      continue;
    }
    if (!self_ok) continue;
    ++w.lost_frames;
    if (commit) ++w.lost_commits;
  }
  // A failing last transaction with nothing valid after it is a write a
  // crash cut short (never acknowledged), or the older frames of a reused WAL.
  if (w.lost_frames == 0) {
    w.bad_frame = 0;
  } else if (bad_is_commit) {
    // Valid frames after it: its writer went on, so it had been committed
    // (a transaction's own commit frame comes later and is counted there).
    ++w.lost_commits;
  }
  return w;
}

}  // namespace trainq
