#include "agent/triggers/mlflow_config.h"

#include <yaml-cpp/yaml.h>

#include "core/http_client.h"

namespace trainq {

Result<MlflowConfig> ParseMlflowConfig(const YamlReader& r, const YAML::Node& n,
                                       const std::string& path) {
  if (!n.IsMap()) {
    return r.Err(n, path, "expected {tracking_uri: URL, token: {file: PATH}, experiment_prefix: "
                          "PREFIX}, got " + YamlReader::Show(n));
  }
  TRY(r.CheckKeys(n, path, {"tracking_uri", "token", "experiment_prefix"}));
  MlflowConfig c;
  c.line = n.Mark().line + 1;
  if (!n["tracking_uri"]) {
    return r.Err(n, path + ".tracking_uri", "missing (the MLflow tracking server's URL)");
  }
  ASSIGN_OR_RETURN(c.tracking_uri, r.NonEmptyStr(n["tracking_uri"], path + ".tracking_uri"));
  if (!c.tracking_uri.starts_with("https://") && !c.tracking_uri.starts_with("http://")) {
    return r.Err(n["tracking_uri"], path + ".tracking_uri",
                 "expected an http:// or https:// URL, got \"" + c.tracking_uri + "\"");
  }
  if (auto host = UrlHost(c.tracking_uri); !host || host->empty()) {
    return r.Err(n["tracking_uri"], path + ".tracking_uri",
                 "expected a URL with a host, got \"" + c.tracking_uri + "\"");
  }
  if (c.tracking_uri.find('?') != std::string::npos || c.tracking_uri.find('#') != std::string::npos) {
    return r.Err(n["tracking_uri"], path + ".tracking_uri",
                 "expected the server's root URL, without a query or fragment");
  }
  while (c.tracking_uri.ends_with("/")) c.tracking_uri.pop_back();
  if (auto t = n["token"]) {
    ASSIGN_OR_RETURN(c.token, r.Secret(t, path + ".token"));
    for (char ch : c.token.value) {
      if (ch == '\r' || ch == '\n' || static_cast<unsigned char>(ch) < 0x20) {
        return r.Err(t, path + ".token", "the token read from " + c.token.source +
                                             " holds a control character");
      }
    }
  }
  if (auto p = n["experiment_prefix"]) {
    ASSIGN_OR_RETURN(c.experiment_prefix, r.Str(p, path + ".experiment_prefix"));
    if (c.experiment_prefix.size() > 200) {
      return r.Err(p, path + ".experiment_prefix", "longer than 200 characters");
    }
  }
  return c;
}

}  // namespace trainq
