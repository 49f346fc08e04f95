// Reading the bytes of a data file, plain or gzip compressed, sequentially and
// from a position found on an earlier pass.
//
// Plain files seek directly. A gzip stream cannot be entered in the middle, so
// the first sequential pass records access points (as zlib's examples/zran.c
// does): at a deflate block boundary about every `span` uncompressed bytes, the
// compressed offset, the bit offset inside that byte and the 32 KiB of output
// before it (the window that later back-references may reach into). Seeking
// to an uncompressed offset restores the last access point at or before it
// and decompresses forward to the offset, so it costs at most `span` bytes of
// decompression. Concatenated gzip members (as `cat a.gz b.gz` makes) are read
// as one stream. A gzip file that ends before its last member's end is an error
// ("the gzip data ends early"), not a silent short read.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"

namespace trainq::trainer {

struct GzipAccessPoint {
  std::int64_t out = 0;  // uncompressed offset
  std::int64_t in = 0;   // compressed offset of the first full byte after the point
  int bits = 0;          // bits of the byte before `in` that belong to the point (0..7)
  std::vector<unsigned char> window;  // the 32 KiB of output before `out`
};

// Threading: one thread per FileReader. Errors name no file: the caller adds
// the file and row.
class FileReader {
 public:
  // `gzip`: decompress. `record_span` > 0 (gzip only): record access points
  // about every record_span uncompressed bytes while reading from the start.
  static Result<std::unique_ptr<FileReader>> Open(const std::string& path, bool gzip,
                                                  std::int64_t record_span = 0);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Reads up to n bytes; 0 only at the end of the data.
  Result<std::size_t> Read(char* buf, std::size_t n);
  // Uncompressed offset of the next byte Read returns.
  std::int64_t position() const { return pos_; }
  // Moves to the uncompressed `offset`. gzip: through `points` (from a
  // recording pass over the same file), or forward from here when that is
  // closer. Stops recording.
  Status Seek(std::int64_t offset, const std::vector<GzipAccessPoint>& points);
  // The access points recorded so far (gzip with record_span only).
  std::vector<GzipAccessPoint> TakeAccessPoints() { return std::move(points_); }

 private:
  FileReader() = default;
  Result<bool> Refill();     // more compressed input into in_buf_; false at the end of the file
  Status Inflate();          // more output into window_
  Status StartNextMember();  // after a member's end: next member or end of data
  void MaybeRecordPoint();

  std::FILE* file_ = nullptr;
  bool gzip_ = false;
  std::int64_t pos_ = 0;  // uncompressed bytes returned so far
  bool eof_ = false;
  // gzip
  struct Zstate;
  std::unique_ptr<Zstate> z_;
  std::vector<unsigned char> in_buf_;
  std::vector<unsigned char> window_;  // output, filled circularly
  std::size_t pend_ = 0;               // window_[pend_, wpos) not yet returned
  bool raw_ = false;                   // restored at an access point: raw deflate, no header
  std::int64_t in_total_ = 0;          // compressed bytes consumed
  std::int64_t out_total_ = 0;         // uncompressed bytes produced
  std::int64_t record_span_ = 0;
  std::int64_t last_point_ = -1;
  std::vector<GzipAccessPoint> points_;
};

}  // namespace trainq::trainer
