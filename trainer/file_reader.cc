#include "trainer/file_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace trainq::trainer {
namespace {

constexpr std::size_t kWindow = 32768;     // deflate's largest back-reference distance
constexpr std::size_t kInChunk = 1 << 16;  // compressed bytes read at a time

std::unexpected<Error> Truncated() {
  return Fail(ErrorKind::kCorruption, "the gzip data ends early (the file is truncated)");
}

}  // namespace

struct FileReader::Zstate {
  z_stream strm{};
  bool init = false;
  ~Zstate() {
    if (init) inflateEnd(&strm);
  }
};

Result<std::unique_ptr<FileReader>> FileReader::Open(const std::string& path, bool gzip,
                                                     std::int64_t record_span) {
  std::unique_ptr<FileReader> r(new FileReader());
  r->file_ = std::fopen(path.c_str(), "rb");
  if (r->file_ == nullptr)
    return Fail(ErrorKind::kNotFound, "cannot open: " + std::string(std::strerror(errno)));
  r->gzip_ = gzip;
  if (!gzip) return r;
  r->z_ = std::make_unique<Zstate>();
  z_stream& s = r->z_->strm;
  if (inflateInit2(&s, 15 + 32) != Z_OK)
    return Fail(ErrorKind::kInternal, "zlib: inflateInit2 failed");
  r->z_->init = true;
  r->in_buf_.resize(kInChunk);
  r->window_.assign(kWindow, 0);
  s.next_in = r->in_buf_.data();
  s.avail_in = 0;
  s.next_out = r->window_.data();
  s.avail_out = static_cast<uInt>(kWindow);
  r->record_span_ = record_span;
  return r;
}

FileReader::~FileReader() {
  if (file_ != nullptr) std::fclose(file_);
}

Result<bool> FileReader::Refill() {
  z_stream& s = z_->strm;
  if (s.avail_in > 0 && s.next_in != in_buf_.data())
    std::memmove(in_buf_.data(), s.next_in, s.avail_in);
  s.next_in = in_buf_.data();
  const std::size_t n =
      std::fread(in_buf_.data() + s.avail_in, 1, in_buf_.size() - s.avail_in, file_);
  if (n == 0 && std::ferror(file_))
    return Fail(ErrorKind::kIo, "read failed: " + std::string(std::strerror(errno)));
  s.avail_in += static_cast<uInt>(n);
  return n > 0;
}

void FileReader::MaybeRecordPoint() {
  if (record_span_ <= 0 || raw_) return;
  const int dt = z_->strm.data_type;
  // At a block boundary (128), not after the last block (64).
  if (!(dt & 128) || (dt & 64)) return;
  if (last_point_ >= 0 && out_total_ - last_point_ <= record_span_) return;
  GzipAccessPoint p;
  p.out = out_total_;
  p.in = in_total_;
  p.bits = dt & 7;
  p.window.resize(kWindow);
  // window_ is filled circularly; the oldest byte is at the write position.
  const std::size_t left = z_->strm.avail_out;
  std::memcpy(p.window.data(), window_.data() + kWindow - left, left);
  std::memcpy(p.window.data() + left, window_.data(), kWindow - left);
  points_.push_back(std::move(p));
  last_point_ = out_total_;
}

Status FileReader::StartNextMember() {
  z_stream& s = z_->strm;
  if (raw_) {
    // Raw deflate stops before the member's 8-byte trailer (CRC-32, size),
    // which the first pass has checked.
    while (s.avail_in < 8) {
      ASSIGN_OR_RETURN(bool more, Refill());
      if (!more) return Truncated();
    }
    s.next_in += 8;
    s.avail_in -= 8;
    in_total_ += 8;
  }
  while (s.avail_in < 2) {
    ASSIGN_OR_RETURN(bool more, Refill());
    if (!more) break;
  }
  // Another member follows only if it starts with the gzip magic; anything
  // else after a complete member is ignored, as gzip(1) does.
  if (s.avail_in < 2 || s.next_in[0] != 0x1f || s.next_in[1] != 0x8b) {
    eof_ = true;
    return {};
  }
  if (inflateReset2(&s, 15 + 32) != Z_OK)
    return Fail(ErrorKind::kInternal, "zlib: inflateReset2 failed");
  raw_ = false;
  return {};
}

Status FileReader::Inflate() {
  z_stream& s = z_->strm;
  if (s.avail_out == 0) {
    s.next_out = window_.data();
    s.avail_out = static_cast<uInt>(kWindow);
    pend_ = 0;
  }
  if (s.avail_in == 0) {
    ASSIGN_OR_RETURN(bool more, Refill());
    if (!more) return Truncated();
  }
  const uInt in_before = s.avail_in, out_before = s.avail_out;
  const int ret = inflate(&s, Z_BLOCK);
  in_total_ += in_before - s.avail_in;
  out_total_ += out_before - s.avail_out;
  if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR) {
    return Fail(ErrorKind::kCorruption, std::string("corrupt gzip data (") +
                                            (s.msg != nullptr ? s.msg : "invalid stream") + ")");
  }
  if (ret == Z_MEM_ERROR) return Fail(ErrorKind::kInternal, "zlib: out of memory");
  if (ret == Z_STREAM_END) return StartNextMember();
  MaybeRecordPoint();
  return {};
}

Result<std::size_t> FileReader::Read(char* buf, std::size_t n) {
  if (!gzip_) {
    const std::size_t got = std::fread(buf, 1, n, file_);
    if (got < n && std::ferror(file_)) {
      return Fail(ErrorKind::kIo, "read failed: " + std::string(std::strerror(errno)));
    }
    pos_ += static_cast<std::int64_t>(got);
    return got;
  }
  std::size_t got = 0;
  while (got < n) {
    const std::size_t wpos = kWindow - z_->strm.avail_out;
    if (pend_ < wpos) {
      const std::size_t k = std::min(n - got, wpos - pend_);
      std::memcpy(buf + got, window_.data() + pend_, k);
      pend_ += k;
      got += k;
      pos_ += static_cast<std::int64_t>(k);
      continue;
    }
    if (eof_) break;
    TRY(Inflate());
  }
  return got;
}

Status FileReader::Seek(std::int64_t offset, const std::vector<GzipAccessPoint>& points) {
  if (!gzip_) {
    if (fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0) {
      return Fail(ErrorKind::kIo, "seek failed: " + std::string(std::strerror(errno)));
    }
    pos_ = offset;
    return {};
  }
  record_span_ = 0;
  auto it = std::upper_bound(points.begin(), points.end(), offset,
                             [](std::int64_t o, const GzipAccessPoint& p) { return o < p.out; });
  const GzipAccessPoint* best = it == points.begin() ? nullptr : &*std::prev(it);
  const bool forward = offset >= pos_ && (best == nullptr || offset - pos_ <= offset - best->out);
  if (!forward) {
    if (best == nullptr)
      return Fail(ErrorKind::kInternal, "no gzip access point before the offset");
    z_stream& s = z_->strm;
    if (inflateReset2(&s, -15) != Z_OK)
      return Fail(ErrorKind::kInternal, "zlib: inflateReset2 failed");
    const std::int64_t start = best->in - (best->bits ? 1 : 0);
    if (fseeko(file_, static_cast<off_t>(start), SEEK_SET) != 0) {
      return Fail(ErrorKind::kIo, "seek failed: " + std::string(std::strerror(errno)));
    }
    std::clearerr(file_);
    s.next_in = in_buf_.data();
    s.avail_in = 0;
    in_total_ = start;
    if (best->bits) {
      const int c = std::fgetc(file_);
      if (c == EOF) return Truncated();
      ++in_total_;
      inflatePrime(&s, best->bits, c >> (8 - best->bits));
    }
    inflateSetDictionary(&s, best->window.data(), static_cast<uInt>(best->window.size()));
    s.next_out = window_.data();
    s.avail_out = static_cast<uInt>(kWindow);
    pend_ = 0;
    raw_ = true;
    eof_ = false;
    out_total_ = pos_ = best->out;
  }
  std::vector<char> scratch(std::min<std::int64_t>(offset - pos_, 1 << 16));
  while (pos_ < offset) {
    ASSIGN_OR_RETURN(
        std::size_t n,
        Read(scratch.data(), static_cast<std::size_t>(std::min<std::int64_t>(
                                 offset - pos_, static_cast<std::int64_t>(scratch.size())))));
    if (n == 0)
      return Fail(ErrorKind::kCorruption, "the data ends before offset " + std::to_string(offset));
  }
  return {};
}

}  // namespace trainq::trainer
