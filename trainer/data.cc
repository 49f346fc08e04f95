#include "trainer/data.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sys/stat.h>

#include "core/strings.h"
#include "trainer/file_reader.h"
#include "trainer/rng.h"

namespace trainq::trainer {
namespace {

std::unexpected<Error> DataError(const std::string& msg) {
  return Fail(ErrorKind::kCorruption, msg);
}

// Resolves possibly negative column indices against `columns`.
Result<std::vector<std::int64_t>> ResolveColumns(const std::vector<std::int64_t>& cols, std::int64_t columns,
                                                 const std::string& file, const char* what) {
  std::vector<std::int64_t> out;
  for (std::int64_t c : cols) {
    std::int64_t r = c < 0 ? columns + c : c;
    if (r < 0 || r >= columns) {
      return DataError(file + ": data." + what + " names column " + std::to_string(c) + " but rows have " +
                       std::to_string(columns) + " columns");
    }
    out.push_back(r);
  }
  return out;
}

struct ColumnMap {
  std::vector<std::int64_t> features, labels;
};

Result<ColumnMap> MapColumns(const DataSpec& spec, std::int64_t columns) {
  ColumnMap m;
  ASSIGN_OR_RETURN(m.labels, ResolveColumns(spec.labels, columns, spec.path, "labels"));
  if (spec.features.empty()) {
    for (std::int64_t c = 0; c < columns; ++c) {
      if (std::find(m.labels.begin(), m.labels.end(), c) == m.labels.end()) m.features.push_back(c);
    }
  } else {
    ASSIGN_OR_RETURN(m.features, ResolveColumns(spec.features, columns, spec.path, "features"));
  }
  if (m.features.empty()) return DataError(spec.path + ": no feature columns left");
  return m;
}

// A row of a file, for error messages ("d.csv: row 3"); the text is built
// only when there is an error.
struct RowPlace {
  const std::string& path;
  std::int64_t row;
  std::string str() const { return path + ": row " + std::to_string(row); }
};

Status CheckLabel(float v, const DataCheck& check, const RowPlace& where) {
  if (check.integer_labels && (v < 0 || v != std::floor(v))) {
    return DataError(where.str() + ": class label " + FormatDouble(v, 4) + " is not a non-negative integer");
  }
  return {};
}

class MemorySource : public RowSource {
 public:
  MemorySource(std::int64_t f, std::int64_t l) : f_(f), l_(l) {}
  std::int64_t rows() const override { return rows_; }
  std::int64_t feature_count() const override { return f_; }
  std::int64_t label_count() const override { return l_; }
  bool in_memory() const override { return true; }
  Status Read(const std::vector<std::int64_t>& indices, float* x, float* y) const override {
    for (std::size_t i = 0; i < indices.size(); ++i) {
      std::int64_t r = indices[i];
      if (r < 0 || r >= rows_) return Fail(ErrorKind::kInternal, "row index out of range");
      std::memcpy(x + i * f_, x_.data() + r * f_, sizeof(float) * static_cast<std::size_t>(f_));
      std::memcpy(y + i * l_, y_.data() + r * l_, sizeof(float) * static_cast<std::size_t>(l_));
    }
    return {};
  }
  void Add(const std::vector<float>& row, const ColumnMap& m) {
    for (std::int64_t c : m.features) x_.push_back(row[static_cast<std::size_t>(c)]);
    for (std::int64_t c : m.labels) y_.push_back(row[static_cast<std::size_t>(c)]);
    ++rows_;
  }

 private:
  std::int64_t f_, l_, rows_ = 0;
  std::vector<float> x_, y_;
};

bool LooksNumeric(std::string_view field) {
  field = Trim(field);
  float v;
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  return ec == std::errc() && p == field.data() + field.size();
}

// Lines of a (possibly gzip) text file, with the byte offset of each.
class LineReader {
 public:
  explicit LineReader(FileReader& file) : file_(file), base_(file.position()) {}

  // The next line without its '\n' (and '\r'); false at the end. The view
  // stays valid until the next call.
  Result<bool> Next(std::string_view* line, std::int64_t* offset) {
    while (true) {
      std::size_t nl = buf_.find('\n', scan_);
      if (nl != std::string::npos || (eof_ && at_ < buf_.size())) {
        if (nl == std::string::npos) nl = buf_.size();
        *line = std::string_view(buf_.data() + at_, nl - at_);
        *offset = base_ + static_cast<std::int64_t>(at_);
        at_ = scan_ = std::min(nl + 1, buf_.size());
        if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
        return true;
      }
      if (eof_) return false;
      buf_.erase(0, at_);
      base_ += static_cast<std::int64_t>(at_);
      at_ = 0;
      scan_ = buf_.size();
      const std::size_t old = buf_.size();
      buf_.resize(old + kChunk);
      ASSIGN_OR_RETURN(std::size_t n, file_.Read(buf_.data() + old, kChunk));
      buf_.resize(old + n);
      if (n == 0) eof_ = true;
    }
  }

  // Moves to the line starting at byte `offset`: inside the buffer when it is
  // there, else through the file's Seek.
  Status MoveTo(std::int64_t offset, const std::vector<GzipAccessPoint>& points) {
    if (offset >= base_ + static_cast<std::int64_t>(at_) &&
        offset <= base_ + static_cast<std::int64_t>(buf_.size())) {
      at_ = scan_ = static_cast<std::size_t>(offset - base_);
      return {};
    }
    TRY(file_.Seek(offset, points));
    buf_.clear();
    at_ = scan_ = 0;
    base_ = offset;
    eof_ = false;
    return {};
  }

 private:
  static constexpr std::size_t kChunk = 1 << 18;
  FileReader& file_;
  std::string buf_;
  std::size_t at_ = 0, scan_ = 0;  // next line starts at at_; no '\n' in [at_, scan_)
  std::int64_t base_ = 0;          // file offset of buf_[0]
  bool eof_ = false;
};

// Whether line `line_no` (1-based) of a CSV file is a data row: not within the
// header lines, not blank, and with an automatic header not a first line with
// a non-numeric field.
bool IsDataLine(std::string_view line, std::int64_t line_no, std::int64_t skip) {
  if (line_no <= skip) return false;
  if (Trim(line).empty()) return false;
  if (skip < 0 && line_no == 1) {
    // Auto header: a first line with a non-numeric field is a header (the
    // sklearn files start "150,4,setosa,...").
    for (const std::string& f : trainq::Split(line, ',')) {
      if (!LooksNumeric(f)) return false;
    }
  }
  return true;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Parses the comma-separated numbers of `line` into `row`, in one scan (this
// is most of the time of a streamed CSV epoch). Spaces around a number are
// allowed; anything else is an error naming the row, the column and the field.
Status ParseFields(std::string_view line, const RowPlace& where, std::vector<float>& row) {
  row.clear();
  const char* p = line.data();
  const char* const end = p + line.size();
  while (true) {
    const char* field_start = p;
    while (p < end && IsSpace(*p)) ++p;
    float v = 0;
    auto [q, ec] = std::from_chars(p, end, v);
    const char* after = q;
    while (after < end && IsSpace(*after)) ++after;
    if (ec != std::errc() || q == p || (after < end && *after != ',')) {
      const char* comma = std::find(field_start, end, ',');
      const std::string_view field = Trim(std::string_view(field_start, static_cast<std::size_t>(comma - field_start)));
      return DataError(where.str() + ", column " + std::to_string(row.size() + 1) + ": '" + std::string(field) +
                       "' is not a number");
    }
    if (!std::isfinite(v)) {
      return DataError(where.str() + ", column " + std::to_string(row.size() + 1) + ": value is not finite");
    }
    row.push_back(v);
    if (after == end) break;
    p = after + 1;
  }
  return {};
}

std::string RowWhere(const std::string& path, std::int64_t line_no) {
  return path + ": row " + std::to_string(line_no);
}

// A reader error while reading line `line_no`: a data error naming file and row.
std::unexpected<Error> ReadError(const std::string& path, std::int64_t line_no, const Error& e) {
  return Fail(e.kind == ErrorKind::kIo ? ErrorKind::kIo : ErrorKind::kCorruption,
              RowWhere(path, line_no) + ": " + e.message);
}

bool IsGzip(const DataSpec& spec) { return spec.format == "csv.gz"; }

// One pass over a CSV file: checks every data row (numbers, finite values,
// the same column count as the first row, integer labels) and calls
// on_row(ordinal, line_no, line offset, values) for each.
Status ScanCsv(FileReader& file, const DataSpec& spec, const DataCheck& check, ColumnMap* map,
               std::int64_t* columns,
               const std::function<void(std::int64_t, std::int64_t, std::int64_t, const std::vector<float>&)>& on_row) {
  LineReader lines(file);
  const std::int64_t skip = spec.header.value_or(-1);
  std::vector<float> row;
  std::int64_t line_no = 0, ordinal = 0;
  *columns = -1;
  while (true) {
    std::string_view line;
    std::int64_t offset = 0;
    auto more = lines.Next(&line, &offset);
    if (!more) return ReadError(spec.path, line_no + 1, more.error());
    if (!*more) break;
    ++line_no;
    if (!IsDataLine(line, line_no, skip)) continue;
    const RowPlace where{spec.path, line_no};
    TRY(ParseFields(line, where, row));
    if (*columns < 0) {
      *columns = static_cast<std::int64_t>(row.size());
      ASSIGN_OR_RETURN(*map, MapColumns(spec, *columns));
    } else if (static_cast<std::int64_t>(row.size()) != *columns) {
      return DataError(where.str() + ": expected " + std::to_string(*columns) + " columns, found " +
                       std::to_string(row.size()));
    }
    for (std::int64_t c : map->labels) TRY(CheckLabel(row[static_cast<std::size_t>(c)], check, where));
    on_row(ordinal++, line_no, offset, row);
  }
  if (ordinal == 0) return DataError(spec.path + ": no data rows");
  return {};
}

Result<std::unique_ptr<RowSource>> ParseCsv(const DataSpec& spec, const DataCheck& check) {
  auto file = FileReader::Open(spec.path, IsGzip(spec));
  if (!file) return Fail(file.error().kind, spec.path + ": " + file.error().message);
  std::unique_ptr<MemorySource> source;
  ColumnMap map;
  std::int64_t columns = -1;
  TRY(ScanCsv(**file, spec, check, &map, &columns,
              [&](std::int64_t, std::int64_t, std::int64_t, const std::vector<float>& row) {
                if (source == nullptr) {
                  source = std::make_unique<MemorySource>(static_cast<std::int64_t>(map.features.size()),
                                                          static_cast<std::int64_t>(map.labels.size()));
                }
                source->Add(row, map);
              }));
  return std::unique_ptr<RowSource>(std::move(source));
}

struct FileIdentity {
  std::int64_t size = 0, mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

Result<FileIdentity> Identify(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Fail(ErrorKind::kNotFound, path + ": cannot stat: " + std::strerror(errno));
  }
  return FileIdentity{static_cast<std::int64_t>(st.st_size),
                      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// A CSV or gzip CSV file read from disk on every Read. Opening makes one pass
// that checks every row and keeps the byte offset (and line number) of every
// checkpoint_rows-th data row, plus gzip access points; a Read goes to the
// checkpoint at or before its first row (or reads on from where the previous
// Read stopped, when that is closer) and parses forward.
class CsvStreamSource : public RowSource {
 public:
  std::int64_t rows() const override { return rows_; }
  std::int64_t feature_count() const override { return static_cast<std::int64_t>(map_.features.size()); }
  std::int64_t label_count() const override { return static_cast<std::int64_t>(map_.labels.size()); }
  bool in_memory() const override { return false; }

  static Result<std::unique_ptr<RowSource>> Open(const DataSpec& spec, const DataCheck& check,
                                                 const StreamOptions& opt) {
    std::unique_ptr<CsvStreamSource> s(new CsvStreamSource());
    s->path_ = spec.path;
    s->gzip_ = IsGzip(spec);
    s->skip_ = spec.header.value_or(-1);
    s->checkpoint_rows_ = std::max<std::int64_t>(1, opt.checkpoint_rows);
    ASSIGN_OR_RETURN(s->identity_, Identify(spec.path));
    auto file = FileReader::Open(spec.path, s->gzip_, s->gzip_ ? std::max<std::int64_t>(1, opt.gzip_span_bytes) : 0);
    if (!file) return Fail(file.error().kind, spec.path + ": " + file.error().message);
    TRY(ScanCsv(**file, spec, check, &s->map_, &s->columns_,
                [&](std::int64_t ordinal, std::int64_t line_no, std::int64_t offset, const std::vector<float>&) {
                  if (ordinal % s->checkpoint_rows_ == 0) s->checkpoints_.push_back({offset, line_no});
                  s->rows_ = ordinal + 1;
                }));
    s->points_ = (*file)->TakeAccessPoints();
    return std::unique_ptr<RowSource>(std::move(s));
  }

  Status Read(const std::vector<std::int64_t>& indices, float* x, float* y) const override {
    // Rows are read in file order whatever the order of `indices`.
    std::vector<std::size_t> order(indices.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return indices[a] < indices[b]; });
    std::unique_ptr<Cursor> cursor;
    {
      std::lock_guard lock(mu_);
      cursor = std::move(cached_);
    }
    const std::int64_t f = feature_count(), l = label_count();
    std::vector<float> row;
    std::int64_t parsed = -1;  // the data row whose values are in `row`
    for (std::size_t pos : order) {
      const std::int64_t r = indices[pos];
      if (r < 0 || r >= rows_) return Fail(ErrorKind::kInternal, "row index out of range");
      if (r != parsed) {
        const std::int64_t cp = r / checkpoint_rows_;
        if (cursor == nullptr || cursor->next_row > r || cp * checkpoint_rows_ > cursor->next_row) {
          if (cursor == nullptr) {
            ASSIGN_OR_RETURN(cursor, OpenCursor());
          }
          const Checkpoint& c = checkpoints_[static_cast<std::size_t>(cp)];
          if (auto st = cursor->lines.MoveTo(c.offset, points_); !st) {
            return ReadError(path_, c.line_no, st.error());
          }
          cursor->next_row = cp * checkpoint_rows_;
          cursor->line_no = c.line_no - 1;
        }
        while (true) {
          std::string_view line;
          std::int64_t offset = 0;
          auto more = cursor->lines.Next(&line, &offset);
          if (!more) return ReadError(path_, cursor->line_no + 1, more.error());
          if (!*more) {
            return DataError(path_ + ": ends before data row " + std::to_string(r + 1) +
                             " (the file changed since it was opened?)");
          }
          ++cursor->line_no;
          if (!IsDataLine(line, cursor->line_no, skip_)) continue;
          if (cursor->next_row++ < r) continue;
          const RowPlace where{path_, cursor->line_no};
          TRY(ParseFields(line, where, row));
          if (static_cast<std::int64_t>(row.size()) != columns_) {
            return DataError(where.str() + ": expected " + std::to_string(columns_) + " columns, found " +
                             std::to_string(row.size()));
          }
          parsed = r;
          break;
        }
      }
      float* xo = x + static_cast<std::int64_t>(pos) * f;
      float* yo = y + static_cast<std::int64_t>(pos) * l;
      for (std::int64_t c = 0; c < f; ++c) xo[c] = row[static_cast<std::size_t>(map_.features[static_cast<std::size_t>(c)])];
      for (std::int64_t c = 0; c < l; ++c) yo[c] = row[static_cast<std::size_t>(map_.labels[static_cast<std::size_t>(c)])];
    }
    std::lock_guard lock(mu_);
    if (cursor) cached_ = std::move(cursor);
    return {};
  }

 private:
  struct Checkpoint {
    std::int64_t offset, line_no;
  };
  struct Cursor {
    explicit Cursor(std::unique_ptr<FileReader> f) : file(std::move(f)), lines(*file) {}
    std::unique_ptr<FileReader> file;
    LineReader lines;
    std::int64_t next_row = 0;  // data row ordinal of the next data line
    std::int64_t line_no = 0;   // lines read so far
  };

  CsvStreamSource() = default;

  Result<std::unique_ptr<Cursor>> OpenCursor() const {
    ASSIGN_OR_RETURN(FileIdentity now, Identify(path_));
    if (!(now == identity_)) {
      return DataError(path_ + ": the file changed since it was opened; its rows cannot be streamed");
    }
    auto file = FileReader::Open(path_, gzip_);
    if (!file) return Fail(file.error().kind, path_ + ": " + file.error().message);
    return std::make_unique<Cursor>(std::move(*file));
  }

  std::string path_;
  bool gzip_ = false;
  std::int64_t skip_ = -1, columns_ = 0, rows_ = 0, checkpoint_rows_ = 256;
  ColumnMap map_;
  FileIdentity identity_;
  std::vector<Checkpoint> checkpoints_;
  std::vector<GzipAccessPoint> points_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<Cursor> cached_;  // GUARDED_BY(mu_): where the last Read stopped
};

// Raw float32 rows on disk, read with pread; nothing is kept in memory.
class F32Source : public RowSource {
 public:
  F32Source(int fd, std::int64_t rows, std::int64_t columns, ColumnMap map, std::string path)
      : fd_(fd), rows_(rows), columns_(columns), map_(std::move(map)), path_(std::move(path)) {}
  ~F32Source() override { ::close(fd_); }
  std::int64_t rows() const override { return rows_; }
  std::int64_t feature_count() const override { return static_cast<std::int64_t>(map_.features.size()); }
  std::int64_t label_count() const override { return static_cast<std::int64_t>(map_.labels.size()); }
  bool in_memory() const override { return false; }

  Status Read(const std::vector<std::int64_t>& indices, float* x, float* y) const override {
    // Consecutive row indices are read with one pread per run of rows.
    const std::int64_t f = feature_count(), l = label_count();
    std::vector<float> buf;
    std::size_t i = 0;
    while (i < indices.size()) {
      std::size_t j = i + 1;
      while (j < indices.size() && indices[j] == indices[j - 1] + 1 && j - i < 4096) ++j;
      const std::int64_t first = indices[i], count = static_cast<std::int64_t>(j - i);
      TRY(ReadRaw(first, count, buf));
      for (std::int64_t r = 0; r < count; ++r) {
        const float* row = buf.data() + r * columns_;
        float* xo = x + (static_cast<std::int64_t>(i) + r) * f;
        float* yo = y + (static_cast<std::int64_t>(i) + r) * l;
        for (std::int64_t c = 0; c < f; ++c) xo[c] = row[map_.features[static_cast<std::size_t>(c)]];
        for (std::int64_t c = 0; c < l; ++c) yo[c] = row[map_.labels[static_cast<std::size_t>(c)]];
      }
      i = j;
    }
    return {};
  }

  Status ReadRaw(std::int64_t first, std::int64_t count, std::vector<float>& buf) const {
    if (first < 0 || first + count > rows_) return Fail(ErrorKind::kInternal, "row index out of range");
    buf.resize(static_cast<std::size_t>(count * columns_));
    const std::size_t bytes = buf.size() * sizeof(float);
    std::size_t done = 0;
    const off_t offset = static_cast<off_t>(first * columns_ * 4);
    while (done < bytes) {
      ssize_t n = ::pread(fd_, reinterpret_cast<char*>(buf.data()) + done, bytes - done,
                          offset + static_cast<off_t>(done));
      if (n <= 0) {
        return Fail(ErrorKind::kIo, path_ + ": read failed at row " + std::to_string(first + 1) + ": " +
                                        (n == 0 ? "unexpected end of file" : std::strerror(errno)));
      }
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

  Status Validate(const DataCheck& check) const {
    std::vector<float> buf;
    const std::int64_t chunk = std::max<std::int64_t>(1, (1 << 20) / columns_);
    for (std::int64_t first = 0; first < rows_; first += chunk) {
      const std::int64_t count = std::min(chunk, rows_ - first);
      TRY(ReadRaw(first, count, buf));
      for (std::int64_t r = 0; r < count; ++r) {
        const RowPlace where{path_, first + r + 1};
        const float* row = buf.data() + r * columns_;
        for (std::int64_t c = 0; c < columns_; ++c) {
          if (!std::isfinite(row[c])) {
            return DataError(where.str() + ", column " + std::to_string(c + 1) + ": value is not finite");
          }
        }
        for (std::int64_t c : map_.labels) TRY(CheckLabel(row[c], check, where));
      }
    }
    return {};
  }

 private:
  int fd_;
  std::int64_t rows_, columns_;
  ColumnMap map_;
  std::string path_;
};

Result<std::unique_ptr<RowSource>> OpenF32(const DataSpec& spec, const DataCheck& check) {
  int fd = ::open(spec.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail(ErrorKind::kNotFound, spec.path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Fail(ErrorKind::kIo, spec.path + ": cannot stat: " + std::strerror(errno));
  }
  const std::int64_t row_bytes = spec.columns * 4;
  if (st.st_size == 0 || st.st_size % row_bytes != 0) {
    ::close(fd);
    return DataError(spec.path + ": size " + std::to_string(st.st_size) + " bytes is not a whole number of " +
                     std::to_string(spec.columns) + "-value float32 rows");
  }
  auto map = MapColumns(spec, spec.columns);
  if (!map) {
    ::close(fd);
    return std::unexpected(map.error());
  }
  auto source = std::make_unique<F32Source>(fd, st.st_size / row_bytes, spec.columns, *map, spec.path);
  TRY(source->Validate(check));
  return std::unique_ptr<RowSource>(std::move(source));
}

std::int64_t PartSize(double part, std::int64_t n) {
  if (part >= 1) return static_cast<std::int64_t>(part);
  return static_cast<std::int64_t>(std::llround(part * static_cast<double>(n)));
}

}  // namespace

Result<std::unique_ptr<RowSource>> OpenRowSource(const DataSpec& spec, const DataCheck& check,
                                                 const StreamOptions& stream) {
  if (spec.format == "f32") return OpenF32(spec, check);
  if (stream.stream) return CsvStreamSource::Open(spec, check, stream);
  return ParseCsv(spec, check);
}

Result<SplitRows> SplitDataset(std::int64_t n, const SplitSpec& split) {
  const std::int64_t train = PartSize(split.train, n);
  const std::int64_t validation = PartSize(split.validation, n);
  const std::int64_t test = split.test ? PartSize(*split.test, n) : n - train - validation;
  if (train <= 0 || test < 0 || train + validation + test > n) {
    return DataError("data.split asks for " + std::to_string(train) + " train + " + std::to_string(validation) +
                     " validation + " + std::to_string(std::max<std::int64_t>(test, 0)) + " test rows, the file has " +
                     std::to_string(n));
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  if (split.shuffle) {
    std::mt19937_64 gen(DeriveSeed(split.split_seed, kStreamShuffle));
    Shuffle(order, gen);
  }
  SplitRows out;
  auto take = [&](std::int64_t from, std::int64_t count) {
    std::vector<std::int64_t> v(order.begin() + from, order.begin() + from + count);
    std::sort(v.begin(), v.end());
    return v;
  };
  out.train = take(0, train);
  out.validation = take(train, validation);
  out.test = take(train + validation, test);
  return out;
}

void Normalizer::Apply(float* x, std::int64_t rows) const {
  if (shift.empty()) return;
  const std::size_t f = shift.size();
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = x + static_cast<std::size_t>(r) * f;
    for (std::size_t c = 0; c < f; ++c) row[c] = (row[c] - shift[c]) * scale[c];
  }
}

namespace {

// Sums for the normalisation statistics, in double precision, row by row.
class NormStats {
 public:
  explicit NormStats(std::size_t f) : sum_(f, 0.0), sum_sq_(f, 0.0), lo_(f, INFINITY), hi_(f, -INFINITY) {}
  void Add(const float* x) {
    for (std::size_t c = 0; c < sum_.size(); ++c) {
      const double v = x[c];
      sum_[c] += v;
      sum_sq_[c] += v * v;
      lo_[c] = std::min(lo_[c], v);
      hi_[c] = std::max(hi_[c], v);
    }
    ++n_;
  }
  Normalizer Finish(const std::string& kind) const {
    Normalizer norm;
    if (kind == "none") return norm;
    const std::size_t f = sum_.size();
    const double n = static_cast<double>(n_);
    norm.shift.resize(f);
    norm.scale.resize(f);
    for (std::size_t c = 0; c < f; ++c) {
      if (kind == "standard") {
        const double mean = sum_[c] / n;
        const double var = std::max(0.0, sum_sq_[c] / n - mean * mean);
        const double sd = std::sqrt(var);
        norm.shift[c] = static_cast<float>(mean);
        // A constant column is centred and left unscaled.
        norm.scale[c] = static_cast<float>(sd > 1e-12 ? 1.0 / sd : 1.0);
      } else {
        const double range = hi_[c] - lo_[c];
        norm.shift[c] = static_cast<float>(lo_[c]);
        norm.scale[c] = static_cast<float>(range > 1e-12 ? 1.0 / range : 1.0);
      }
    }
    return norm;
  }

 private:
  std::vector<double> sum_, sum_sq_, lo_, hi_;
  std::int64_t n_ = 0;
};

constexpr std::size_t kReadChunkRows = 8192;

}  // namespace

Result<Normalizer> FitNormalizer(const RowSource& source, const std::vector<std::int64_t>& train_rows,
                                 const std::string& kind) {
  if (kind == "none") return Normalizer{};
  const std::size_t f = static_cast<std::size_t>(source.feature_count());
  NormStats stats(f);
  std::vector<float> x, y;
  for (std::size_t start = 0; start < train_rows.size(); start += kReadChunkRows) {
    std::vector<std::int64_t> idx(
        train_rows.begin() + static_cast<std::ptrdiff_t>(start),
        train_rows.begin() + static_cast<std::ptrdiff_t>(std::min(train_rows.size(), start + kReadChunkRows)));
    x.resize(idx.size() * f);
    y.resize(idx.size() * static_cast<std::size_t>(source.label_count()));
    TRY(source.Read(idx, x.data(), y.data()));
    for (std::size_t r = 0; r < idx.size(); ++r) stats.Add(x.data() + r * f);
  }
  return stats.Finish(kind);
}

Result<SplitBlocks> ReadSplits(const RowSource& source, const SplitRows& split, const std::string& normalize,
                               bool keep_train) {
  // The three splits merged in row order: (row, split 0/1/2).
  std::vector<std::pair<std::int64_t, int>> rows;
  rows.reserve(split.train.size() + split.validation.size() + split.test.size());
  for (std::int64_t r : split.train) rows.emplace_back(r, 0);
  for (std::int64_t r : split.validation) rows.emplace_back(r, 1);
  for (std::int64_t r : split.test) rows.emplace_back(r, 2);
  std::sort(rows.begin(), rows.end());
  const std::size_t f = static_cast<std::size_t>(source.feature_count());
  const std::size_t l = static_cast<std::size_t>(source.label_count());
  NormStats stats(f);
  SplitBlocks out;
  RowBlock* blocks[3] = {&out.train, &out.validation, &out.test};
  for (int b = 0; b < 3; ++b) {
    const std::size_t n = b == 0 ? (keep_train ? split.train.size() : 0) : (b == 1 ? split.validation : split.test).size();
    blocks[b]->x.reserve(n * f);
    blocks[b]->y.reserve(n * l);
  }
  std::vector<std::int64_t> idx;
  std::vector<float> x, y;
  for (std::size_t start = 0; start < rows.size(); start += kReadChunkRows) {
    const std::size_t end = std::min(rows.size(), start + kReadChunkRows);
    idx.clear();
    for (std::size_t i = start; i < end; ++i) idx.push_back(rows[i].first);
    x.resize(idx.size() * f);
    y.resize(idx.size() * l);
    TRY(source.Read(idx, x.data(), y.data()));
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const int which = rows[start + i].second;
      const float* xr = x.data() + i * f;
      const float* yr = y.data() + i * l;
      if (which == 0) stats.Add(xr);
      if (which == 0 && !keep_train) continue;
      RowBlock& block = *blocks[which];
      block.x.insert(block.x.end(), xr, xr + f);
      block.y.insert(block.y.end(), yr, yr + l);
      ++block.rows;
    }
  }
  out.norm = stats.Finish(normalize);
  for (RowBlock* block : blocks) out.norm.Apply(block->x.data(), block->rows);
  return out;
}

Result<RowBlock> ReadRows(const RowSource& source, const std::vector<std::int64_t>& indices,
                          const Normalizer& norm) {
  RowBlock block;
  block.rows = static_cast<std::int64_t>(indices.size());
  block.x.resize(indices.size() * static_cast<std::size_t>(source.feature_count()));
  block.y.resize(indices.size() * static_cast<std::size_t>(source.label_count()));
  TRY(source.Read(indices, block.x.data(), block.y.data()));
  norm.Apply(block.x.data(), block.rows);
  return block;
}

Status WriteF32(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) return Fail(ErrorKind::kIo, path + ": write failed");
  return {};
}

}  // namespace trainq::trainer
