// Data files: CSV, gzip CSV and raw little-endian float32 rows.
//
// A RowSource gives random access to the rows of one file as (features,
// labels) float pairs. f32 files stay on disk and are read with pread. CSV and
// gzip CSV are parsed into memory, or with StreamOptions::stream stay on disk:
// opening makes one pass that keeps the byte offset of every
// checkpoint_rows-th row (and, for gzip, access points into the compressed
// stream, see file_reader.h), and a Read parses the rows it needs from the
// nearest checkpoint on. Either way a training set larger than memory can be
// streamed in macrobatches. Opening a source checks every row once (column
// count, numbers, finite values, integer class labels) so that a bad row fails
// up front with its file and row, never in the middle of training.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "trainer/spec.h"

namespace trainq::trainer {

class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual std::int64_t rows() const = 0;
  virtual std::int64_t feature_count() const = 0;
  virtual std::int64_t label_count() const = 0;
  // Whether the rows live in memory (false: each Read goes to the file).
  virtual bool in_memory() const = 0;
  // Copies rows `indices` into x (indices.size() * feature_count floats) and y
  // (indices.size() * label_count). Thread-safe for concurrent reads.
  virtual Status Read(const std::vector<std::int64_t>& indices, float* x, float* y) const = 0;
};

struct DataCheck {
  // Every label must be a non-negative integer (classification losses).
  bool integer_labels = false;
};

struct StreamOptions {
  // CSV and gzip CSV: keep the rows on disk (read on every Read) instead of
  // parsing them into memory. f32 files are always on disk.
  bool stream = false;
  std::int64_t checkpoint_rows = 256;      // a row offset is kept every this many data rows
  std::int64_t gzip_span_bytes = 4 << 20;  // a gzip access point (32 KiB) about every this many bytes of text
};

// Opens the file named by `spec`. Errors are data errors (exit code 3): they
// name the file and, for a bad row, the row (1-based line for CSV).
Result<std::unique_ptr<RowSource>> OpenRowSource(const DataSpec& spec, const DataCheck& check,
                                                 const StreamOptions& stream = {});

struct SplitRows {
  std::vector<std::int64_t> train, validation, test;  // each ascending
};

// Splits rows 0..n-1 by `split`; the same split_seed gives the same split.
Result<SplitRows> SplitDataset(std::int64_t n, const SplitSpec& split);

// Per-feature affine normalisation x' = (x - shift) * scale, fitted on the
// training rows only.
struct Normalizer {
  std::vector<float> shift, scale;  // empty: identity
  void Apply(float* x, std::int64_t rows) const;
};
Result<Normalizer> FitNormalizer(const RowSource& source, const std::vector<std::int64_t>& train_rows,
                                 const std::string& kind);

// Rows read fully into memory (validation and test sets, small training sets).
struct RowBlock {
  std::int64_t rows = 0;
  std::vector<float> x, y;
};
Result<RowBlock> ReadRows(const RowSource& source, const std::vector<std::int64_t>& indices,
                          const Normalizer& norm);

// What training needs before its first epoch, in one read of the source in
// row order: the normaliser fitted on the training rows (exactly as
// FitNormalizer) and the validation and test rows, normalised; with
// keep_train the training rows too (else `train` is empty).
struct SplitBlocks {
  Normalizer norm;
  RowBlock train, validation, test;
};
Result<SplitBlocks> ReadSplits(const RowSource& source, const SplitRows& split, const std::string& normalize,
                               bool keep_train);

// Writes rows as raw float32 (features then labels per row): the f32 format.
Status WriteF32(const std::string& path, const std::vector<float>& values);

}  // namespace trainq::trainer
