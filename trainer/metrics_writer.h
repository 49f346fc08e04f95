// Writes metrics as JSON lines: {"name":"accuracy","value":0.96,"step":1350,
// "epoch":30,"seed":1,"split":"test","final":true}. The trainq worker reads the
// last value of the experiment's metric, preferring a line tagged final.
//
// With fused repeats each replica writes its own stream: the path may contain
// {seed} and {repeat} (one file per replica); without them all replicas append
// to one file and the "seed" field tells the streams apart.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/result.h"

namespace trainq::trainer {

struct MetricLine {
  std::string name;
  double value = 0;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::uint64_t seed = 0;
  std::string split;  // train | validation | test
  bool final = false;
};

std::string FormatMetricLine(const MetricLine& line);

// Substitutes {seed} and {repeat} in a path.
std::string ReplicaPath(const std::string& pattern, std::uint64_t seed, std::int64_t repeat);

// Not thread-safe: the training loop writes from one thread.
class MetricsWriter {
 public:
  // An empty pattern discards every line.
  static Result<std::unique_ptr<MetricsWriter>> Open(const std::string& pattern);
  ~MetricsWriter();
  Status Write(const MetricLine& line, std::int64_t repeat);

 private:
  explicit MetricsWriter(std::string pattern) : pattern_(std::move(pattern)) {}
  std::string pattern_;
  std::map<std::string, std::FILE*> files_;
};

}  // namespace trainq::trainer
