// server.yaml's `mlflow:` (issue 43): every finished batch exported to an
// MLflow tracking server (agent/triggers/mlflow.h, docs/mlflow.md).
//
//   mlflow:
//     tracking_uri: https://mlflow.example.com   # the server's root (its REST API is under /api/2.0/mlflow)
//     token: {file: /etc/trainq/mlflow-token}    # optional: sent as "Authorization: Bearer ..."
//     experiment_prefix: trainq/                 # MLflow experiment = prefix + trainq experiment
//
// The token is a secret: read from {file:} or {env:}, never in a log or an error.
#pragma once

#include <string>

#include "core/result.h"
#include "core/yaml_reader.h"

namespace trainq {

struct MlflowConfig {
  std::string tracking_uri;  // no trailing '/'; "" = no export
  SecretValue token;         // "" = no Authorization header
  std::string experiment_prefix = "trainq/";
  int line = 0;
  bool enabled() const { return !tracking_uri.empty(); }
};

// Reads the `mlflow:` mapping at `n` (`path` is "mlflow").
Result<MlflowConfig> ParseMlflowConfig(const YamlReader& r, const YAML::Node& n,
                                       const std::string& path);

}  // namespace trainq
