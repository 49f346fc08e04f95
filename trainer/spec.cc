#include "trainer/spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/strings.h"
#include "core/yaml_reader.h"

namespace trainq::trainer {
namespace {

namespace fs = std::filesystem;

std::unexpected<Error> SpecError(const SpecNode& at, const std::string& path, const std::string& msg) {
  return ConfigError(at.Where(), path, msg);
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Status CheckKeys(const SpecNode& map, const std::string& path, const std::vector<std::string>& allowed) {
  for (std::size_t i = 0; i < map.keys.size(); ++i) {
    if (std::find(allowed.begin(), allowed.end(), map.keys[i]) == allowed.end()) {
      return SpecError(map.values[i], path.empty() ? map.keys[i] : path + "." + map.keys[i],
                       UnknownKeyMessage(allowed));
    }
  }
  return {};
}

Result<const SpecNode*> RequireMap(const SpecNode& n, const std::string& path) {
  if (!n.IsMap()) return SpecError(n, path, "expected a map of keys");
  return &n;
}


Result<std::int64_t> AsInt(const SpecNode& n, const std::string& path) {
  if (!n.IsScalar()) return SpecError(n, path, "expected an integer");
  std::int64_t v = 0;
  const char* b = n.scalar.data();
  const char* e = b + n.scalar.size();
  auto [ptr, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || ptr != e) {
    return SpecError(n, path, "expected an integer, got '" + n.scalar + "'");
  }
  return v;
}

Result<double> AsDouble(const SpecNode& n, const std::string& path) {
  if (!n.IsScalar() || n.scalar.empty()) return SpecError(n, path, "expected a number");
  char* end = nullptr;
  double v = std::strtod(n.scalar.c_str(), &end);
  if (end != n.scalar.c_str() + n.scalar.size() || !std::isfinite(v)) {
    return SpecError(n, path, "expected a number, got '" + n.scalar + "'");
  }
  return v;
}

Result<bool> AsBool(const SpecNode& n, const std::string& path) {
  if (n.IsScalar()) {
    const std::string& s = n.scalar;
    if (s == "true" || s == "yes" || s == "on" || s == "True") return true;
    if (s == "false" || s == "no" || s == "off" || s == "False") return false;
  }
  return SpecError(n, path, "expected true or false, got '" + n.scalar + "'");
}

Result<std::string> AsChoice(const SpecNode& n, const std::string& path,
                             const std::vector<std::string>& choices) {
  if (!n.IsScalar() || std::find(choices.begin(), choices.end(), n.scalar) == choices.end()) {
    return SpecError(n, path, "expected one of: " + Join(choices) +
                                  (n.IsScalar() ? ", got '" + n.scalar + "'" : ""));
  }
  return n.scalar;
}

// Getters that leave *out alone when the key is absent.
Status GetInt(const SpecNode& m, const std::string& key, const std::string& path, std::int64_t* out,
              std::int64_t min = INT64_MIN) {
  const SpecNode* n = m.Find(key);
  if (n == nullptr) return {};
  ASSIGN_OR_RETURN(std::int64_t v, AsInt(*n, ChildPath(path, key)));
  if (v < min) return SpecError(*n, ChildPath(path, key), "must be at least " + std::to_string(min));
  *out = v;
  return {};
}

Status GetDouble(const SpecNode& m, const std::string& key, const std::string& path, double* out,
                 double min = -INFINITY, double max = INFINITY) {
  const SpecNode* n = m.Find(key);
  if (n == nullptr) return {};
  ASSIGN_OR_RETURN(double v, AsDouble(*n, ChildPath(path, key)));
  if (v < min || v > max) {
    return SpecError(*n, ChildPath(path, key),
                     "must be in [" + FormatDouble(min, 4) + ", " + FormatDouble(max, 4) + "]");
  }
  *out = v;
  return {};
}

Status GetBool(const SpecNode& m, const std::string& key, const std::string& path, bool* out) {
  const SpecNode* n = m.Find(key);
  if (n == nullptr) return {};
  ASSIGN_OR_RETURN(*out, AsBool(*n, ChildPath(path, key)));
  return {};
}

Status GetChoice(const SpecNode& m, const std::string& key, const std::string& path, std::string* out,
                 const std::vector<std::string>& choices) {
  const SpecNode* n = m.Find(key);
  if (n == nullptr) return {};
  ASSIGN_OR_RETURN(*out, AsChoice(*n, ChildPath(path, key), choices));
  return {};
}

Result<std::vector<std::int64_t>> AsIntList(const SpecNode& n, const std::string& path) {
  std::vector<std::int64_t> out;
  if (n.IsScalar()) {
    // "a:b" is the half-open column range [a, b); a single number is one column.
    auto colon = n.scalar.find(':');
    if (colon != std::string::npos) {
      SpecNode lo = n, hi = n;
      lo.scalar = n.scalar.substr(0, colon);
      hi.scalar = n.scalar.substr(colon + 1);
      ASSIGN_OR_RETURN(std::int64_t a, AsInt(lo, path));
      ASSIGN_OR_RETURN(std::int64_t b, AsInt(hi, path));
      if (b <= a) return SpecError(n, path, "empty range '" + n.scalar + "'");
      for (std::int64_t i = a; i < b; ++i) out.push_back(i);
      return out;
    }
    ASSIGN_OR_RETURN(std::int64_t v, AsInt(n, path));
    out.push_back(v);
    return out;
  }
  if (!n.IsSequence() || n.items.empty()) {
    return SpecError(n, path, "expected an integer, a range 'a:b' or a list of integers");
  }
  for (std::size_t i = 0; i < n.items.size(); ++i) {
    ASSIGN_OR_RETURN(std::int64_t v, AsInt(n.items[i], path + "[" + std::to_string(i) + "]"));
    out.push_back(v);
  }
  return out;
}

Status ParseSplit(const SpecNode& n, const std::string& path, SplitSpec* s) {
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, path));
  TRY(CheckKeys(*m, path, {"train", "validation", "test", "shuffle", "split_seed"}));
  TRY(GetDouble(*m, "train", path, &s->train, 0.0));
  TRY(GetDouble(*m, "validation", path, &s->validation, 0.0));
  if (const SpecNode* t = m->Find("test")) {
    ASSIGN_OR_RETURN(double v, AsDouble(*t, ChildPath(path, "test")));
    if (v < 0) return SpecError(*t, ChildPath(path, "test"), "must not be negative");
    s->test = v;
  }
  TRY(GetBool(*m, "shuffle", path, &s->shuffle));
  std::int64_t seed = 0;
  TRY(GetInt(*m, "split_seed", path, &seed, 0));
  s->split_seed = static_cast<std::uint64_t>(seed);
  if (s->train <= 0) return SpecError(*m, ChildPath(path, "train"), "the training split is empty");
  bool fractions = s->train < 1 && s->validation < 1 && (!s->test || *s->test < 1);
  if (fractions && s->train + s->validation + s->test.value_or(0) > 1 + 1e-9) {
    return SpecError(*m, path, "train + validation + test fractions exceed 1");
  }
  return {};
}

Status ParseData(const SpecNode& n, DataSpec* d) {
  const std::string path = "data";
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, path));
  d->where = m->Where();
  TRY(CheckKeys(*m, path, {"path", "format", "columns", "header", "features", "labels", "label",
                           "split", "normalize"}));
  const SpecNode* p = m->Find("path");
  if (p == nullptr || !p->IsScalar() || p->scalar.empty()) {
    return SpecError(p ? *p : *m, "data.path", "a data file is required");
  }
  fs::path file = p->scalar;
  // Relative paths are taken from the folder of the YAML file that wrote them
  // (a template's data path stays right when a spec elsewhere uses it);
  // --set values are taken from the current directory.
  if (file.is_relative() && !StartsWith(p->file, "--set")) {
    file = fs::path(p->file).parent_path() / file;
  }
  d->path = file.lexically_normal().string();
  if (const SpecNode* f = m->Find("format")) {
    ASSIGN_OR_RETURN(d->format, AsChoice(*f, "data.format", {"csv", "csv.gz", "f32"}));
  } else if (d->path.ends_with(".csv.gz") || d->path.ends_with(".gz")) {
    d->format = "csv.gz";
  } else if (d->path.ends_with(".f32")) {
    d->format = "f32";
  } else {
    d->format = "csv";
  }
  TRY(GetInt(*m, "columns", path, &d->columns, 1));
  if (d->format == "f32" && d->columns == 0) {
    return SpecError(*m, "data.columns", "the f32 format needs the number of values per row");
  }
  if (const SpecNode* h = m->Find("header")) {
    if (h->IsScalar() && h->scalar == "auto") {
      d->header.reset();
    } else {
      ASSIGN_OR_RETURN(std::int64_t v, AsInt(*h, "data.header"));
      if (v < 0) return SpecError(*h, "data.header", "must not be negative");
      d->header = v;
    }
  }
  if (const SpecNode* f = m->Find("features")) {
    ASSIGN_OR_RETURN(d->features, AsIntList(*f, "data.features"));
  }
  const SpecNode* l = m->Find("labels");
  if (l == nullptr) l = m->Find("label");
  if (l != nullptr) {
    ASSIGN_OR_RETURN(d->labels, AsIntList(*l, "data.labels"));
  }
  if (const SpecNode* s = m->Find("split")) TRY(ParseSplit(*s, "data.split", &d->split));
  TRY(GetChoice(*m, "normalize", path, &d->normalize, {"none", "standard", "minmax"}));
  return {};
}

const std::vector<std::string>& LayerTypes() {
  static const std::vector<std::string> types{
      "linear", "relu", "tanh", "gelu", "sigmoid", "dropout", "batchnorm", "layernorm", "conv2d",
      "maxpool2d", "flatten", "reshape", "embedding", "lstm", "gru"};
  return types;
}

Status ParseLayer(const SpecNode& n, const std::string& path, LayerSpec* layer) {
  layer->where = n.Where() + ": " + path;
  if (n.IsScalar()) {
    SpecNode m;
    m.kind = SpecNode::Kind::kMap;
    m.file = n.file;
    m.line = n.line;
    m.Set("type", n);
    return ParseLayer(m, path, layer);
  }
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, path));
  const SpecNode* t = m->Find("type");
  if (t == nullptr) return SpecError(*m, path, "a layer needs a type (" + Join(LayerTypes()) + ")");
  ASSIGN_OR_RETURN(layer->type, AsChoice(*t, ChildPath(path, "type"), LayerTypes()));
  const std::string& type = layer->type;
  std::vector<std::string> keys{"type"};
  auto need_positive = [&](const std::string& key, std::int64_t* out) -> Status {
    if (m->Find(key) == nullptr) {
      return SpecError(*m, path, "a " + type + " layer needs '" + key + "'");
    }
    return GetInt(*m, key, path, out, 1);
  };
  if (type == "linear") {
    keys.insert(keys.end(), {"out", "bias"});
    TRY(CheckKeys(*m, path, keys));
    TRY(need_positive("out", &layer->out));
    TRY(GetBool(*m, "bias", path, &layer->bias));
  } else if (type == "dropout") {
    keys.push_back("p");
    TRY(CheckKeys(*m, path, keys));
    TRY(GetDouble(*m, "p", path, &layer->p, 0.0, 0.999));
  } else if (type == "batchnorm") {
    keys.insert(keys.end(), {"eps", "momentum"});
    TRY(CheckKeys(*m, path, keys));
    TRY(GetDouble(*m, "eps", path, &layer->eps, 0.0));
    TRY(GetDouble(*m, "momentum", path, &layer->momentum, 0.0, 1.0));
  } else if (type == "layernorm") {
    keys.push_back("eps");
    TRY(CheckKeys(*m, path, keys));
    TRY(GetDouble(*m, "eps", path, &layer->eps, 0.0));
  } else if (type == "conv2d") {
    keys.insert(keys.end(), {"out", "kernel", "stride", "padding", "bias"});
    TRY(CheckKeys(*m, path, keys));
    TRY(need_positive("out", &layer->out));
    TRY(need_positive("kernel", &layer->kernel));
    layer->stride = 1;
    TRY(GetInt(*m, "stride", path, &layer->stride, 1));
    TRY(GetInt(*m, "padding", path, &layer->padding, 0));
    TRY(GetBool(*m, "bias", path, &layer->bias));
  } else if (type == "maxpool2d") {
    keys.insert(keys.end(), {"kernel", "stride"});
    TRY(CheckKeys(*m, path, keys));
    TRY(need_positive("kernel", &layer->kernel));
    layer->stride = layer->kernel;
    TRY(GetInt(*m, "stride", path, &layer->stride, 1));
  } else if (type == "reshape") {
    keys.push_back("shape");
    TRY(CheckKeys(*m, path, keys));
    const SpecNode* s = m->Find("shape");
    if (s == nullptr) return SpecError(*m, path, "a reshape layer needs 'shape' (per sample)");
    ASSIGN_OR_RETURN(layer->shape, AsIntList(*s, ChildPath(path, "shape")));
    int inferred = 0;
    for (std::int64_t d : layer->shape) {
      if (d == -1) ++inferred;
      if (d == 0 || d < -1 || inferred > 1) {
        return SpecError(*s, ChildPath(path, "shape"), "dimensions must be positive (one may be -1)");
      }
    }
  } else if (type == "embedding") {
    keys.insert(keys.end(), {"vocab", "dim"});
    TRY(CheckKeys(*m, path, keys));
    TRY(need_positive("vocab", &layer->vocab));
    TRY(need_positive("dim", &layer->dim));
  } else if (type == "lstm" || type == "gru") {
    keys.insert(keys.end(), {"hidden", "return", "bias"});
    TRY(CheckKeys(*m, path, keys));
    TRY(need_positive("hidden", &layer->hidden));
    std::string ret = "last";
    TRY(GetChoice(*m, "return", path, &ret, {"last", "sequence"}));
    layer->sequence = ret == "sequence";
    TRY(GetBool(*m, "bias", path, &layer->bias));
  } else {
    TRY(CheckKeys(*m, path, keys));  // activations and flatten take no keys
  }
  return {};
}

Status ParseModel(const SpecNode& n, ModelSpec* model) {
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, "model"));
  TRY(CheckKeys(*m, "model", {"layers"}));
  const SpecNode* layers = m->Find("layers");
  if (layers == nullptr || !layers->IsSequence() || layers->items.empty()) {
    return SpecError(layers ? *layers : *m, "model.layers", "expected a non-empty list of layers");
  }
  for (std::size_t i = 0; i < layers->items.size(); ++i) {
    LayerSpec layer;
    TRY(ParseLayer(layers->items[i], "model.layers[" + std::to_string(i) + "]", &layer));
    model->layers.push_back(std::move(layer));
  }
  return {};
}

Status ParseLoss(const SpecNode& n, LossSpec* loss) {
  static const std::vector<std::string> kinds{"cross_entropy", "mse", "l1", "bce_with_logits"};
  if (n.IsScalar()) {
    ASSIGN_OR_RETURN(loss->type, AsChoice(n, "loss", kinds));
    return {};
  }
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, "loss"));
  TRY(CheckKeys(*m, "loss", {"type"}));
  TRY(GetChoice(*m, "type", "loss", &loss->type, kinds));
  return {};
}

Status ParseSchedule(const SpecNode& n, ScheduleSpec* s) {
  const std::string path = "optimizer.schedule";
  static const std::vector<std::string> kinds{"none", "step", "cosine"};
  if (n.IsScalar()) {
    ASSIGN_OR_RETURN(s->type, AsChoice(n, path, kinds));
    return {};
  }
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, path));
  TRY(CheckKeys(*m, path, {"type", "step_size", "gamma", "min_lr", "warmup_epochs"}));
  TRY(GetChoice(*m, "type", path, &s->type, kinds));
  TRY(GetInt(*m, "step_size", path, &s->step_size, 1));
  TRY(GetDouble(*m, "gamma", path, &s->gamma, 0.0));
  TRY(GetDouble(*m, "min_lr", path, &s->min_lr, 0.0));
  TRY(GetInt(*m, "warmup_epochs", path, &s->warmup_epochs, 0));
  return {};
}

Status ParseOptimizer(const SpecNode& n, OptimizerSpec* o) {
  const std::string path = "optimizer";
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, path));
  TRY(CheckKeys(*m, path, {"type", "lr", "momentum", "nesterov", "weight_decay", "betas", "eps",
                           "schedule"}));
  TRY(GetChoice(*m, "type", path, &o->type, {"sgd", "adam", "adamw"}));
  if (o->type == "adamw") o->weight_decay = 0.01;
  TRY(GetDouble(*m, "lr", path, &o->lr, 0.0));
  TRY(GetDouble(*m, "momentum", path, &o->momentum, 0.0, 1.0));
  TRY(GetBool(*m, "nesterov", path, &o->nesterov));
  TRY(GetDouble(*m, "weight_decay", path, &o->weight_decay, 0.0));
  TRY(GetDouble(*m, "eps", path, &o->eps, 0.0));
  if (const SpecNode* b = m->Find("betas")) {
    if (!b->IsSequence() || b->items.size() != 2) {
      return SpecError(*b, "optimizer.betas", "expected two numbers [beta1, beta2]");
    }
    ASSIGN_OR_RETURN(o->beta1, AsDouble(b->items[0], "optimizer.betas[0]"));
    ASSIGN_OR_RETURN(o->beta2, AsDouble(b->items[1], "optimizer.betas[1]"));
    if (o->beta1 < 0 || o->beta1 >= 1 || o->beta2 < 0 || o->beta2 >= 1) {
      return SpecError(*b, "optimizer.betas", "each beta must be in [0, 1)");
    }
  }
  if (o->nesterov && (o->type != "sgd" || o->momentum <= 0)) {
    return SpecError(*m->Find("nesterov"), "optimizer.nesterov", "needs type sgd and momentum > 0");
  }
  if (const SpecNode* s = m->Find("schedule")) TRY(ParseSchedule(*s, &o->schedule));
  return {};
}

Status ParseCallbacks(const SpecNode& n, TrainerSpec* t) {
  const std::string path = "trainer.callbacks";
  if (!n.IsSequence()) return SpecError(n, path, "expected a list of {type, params}");
  for (std::size_t i = 0; i < n.items.size(); ++i) {
    const SpecNode& entry = n.items[i];
    const std::string epath = path + "[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(entry, epath));
    TRY(CheckKeys(*m, epath, {"type", "params"}));
    const SpecNode* type = m->Find("type");
    if (type == nullptr) return SpecError(*m, epath, "a callback needs a type");
    ASSIGN_OR_RETURN(std::string kind,
                     AsChoice(*type, epath + ".type", {"checkpointing", "early_stopping", "loss_logging"}));
    SpecNode empty;
    empty.kind = SpecNode::Kind::kMap;
    empty.file = m->file;
    empty.line = m->line;
    const SpecNode* params = m->Find("params");
    if (params == nullptr) params = &empty;
    const std::string ppath = epath + ".params";
    ASSIGN_OR_RETURN(const SpecNode* p, RequireMap(*params, ppath));
    if (kind == "checkpointing") {
      CheckpointSpec c;
      TRY(CheckKeys(*p, ppath,
                    {"path", "every", "every_batches", "every_macrobatches", "monitor", "mode", "keep_best"}));
      if (const SpecNode* x = p->Find("path")) {
        if (!x->IsScalar() || x->scalar.empty()) return SpecError(*x, ppath + ".path", "expected a folder name");
        c.path = x->scalar;
      }
      TRY(GetInt(*p, "every", ppath, &c.every, 0));
      TRY(GetInt(*p, "every_batches", ppath, &c.every_batches, 0));
      TRY(GetInt(*p, "every_macrobatches", ppath, &c.every_macrobatches, 0));
      if (const SpecNode* x = p->Find("monitor")) {
        if (!x->IsScalar()) return SpecError(*x, ppath + ".monitor", "expected a metric name");
        c.monitor = x->scalar;
      }
      c.mode = MetricIsHigherBetter(c.monitor) ? "max" : "min";
      TRY(GetChoice(*p, "mode", ppath, &c.mode, {"max", "min"}));
      TRY(GetBool(*p, "keep_best", ppath, &c.keep_best));
      if (c.keep_best && c.monitor.empty() && p->Find("keep_best") != nullptr) {
        return SpecError(*p, ppath + ".monitor", "keep_best needs a metric to monitor");
      }
      t->checkpointing = c;
    } else if (kind == "loss_logging") {
      LossLoggingSpec l;
      TRY(CheckKeys(*p, ppath, {"every_batches", "macrobatches"}));
      TRY(GetInt(*p, "every_batches", ppath, &l.every_batches, 0));
      TRY(GetBool(*p, "macrobatches", ppath, &l.macrobatches));
      t->loss_logging = l;
    } else {
      EarlyStoppingSpec e;
      TRY(CheckKeys(*p, ppath, {"monitor", "mode", "patience", "min_delta", "restore_best"}));
      if (const SpecNode* x = p->Find("monitor")) {
        if (!x->IsScalar()) return SpecError(*x, ppath + ".monitor", "expected a metric name");
        e.monitor = x->scalar;
      }
      e.mode = MetricIsHigherBetter(e.monitor) ? "max" : "min";
      TRY(GetChoice(*p, "mode", ppath, &e.mode, {"max", "min"}));
      TRY(GetInt(*p, "patience", ppath, &e.patience, 1));
      TRY(GetDouble(*p, "min_delta", ppath, &e.min_delta, 0.0));
      TRY(GetBool(*p, "restore_best", ppath, &e.restore_best));
      t->early_stopping = e;
    }
  }
  return {};
}

Status ParseTrainer(const SpecNode& n, TrainerSpec* t) {
  const std::string path = "trainer";
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, path));
  TRY(CheckKeys(*m, path, {"epochs", "batch_size", "macro_batch_size", "shuffle_blocks", "eval_batch_size",
                           "shuffle", "callbacks"}));
  TRY(GetInt(*m, "epochs", path, &t->epochs, 1));
  TRY(GetInt(*m, "batch_size", path, &t->batch_size, 1));
  TRY(GetInt(*m, "macro_batch_size", path, &t->macro_batch_size, 0));
  TRY(GetInt(*m, "shuffle_blocks", path, &t->shuffle_blocks, 1));
  TRY(GetInt(*m, "eval_batch_size", path, &t->eval_batch_size, 1));
  TRY(GetBool(*m, "shuffle", path, &t->shuffle));
  if (t->macro_batch_size > 0 && t->macro_batch_size < t->batch_size) {
    return SpecError(*m->Find("macro_batch_size"), "trainer.macro_batch_size",
                     "must be at least batch_size (" + std::to_string(t->batch_size) + ")");
  }
  if (const SpecNode* c = m->Find("callbacks")) TRY(ParseCallbacks(*c, t));
  return {};
}

Status ParseDistributed(const SpecNode& n, DistributedSpec* d) {
  const std::string path = "distributed";
  ASSIGN_OR_RETURN(const SpecNode* m, RequireMap(n, path));
  d->where = n.Where();
  TRY(CheckKeys(*m, path, {"workers", "nodes", "gpus_per_node", "mode", "every_n_epochs", "shuffle",
                           "rendezvous", "timeout"}));
  TRY(GetInt(*m, "workers", path, &d->workers, 1));
  TRY(GetInt(*m, "nodes", path, &d->nodes, 1));
  TRY(GetInt(*m, "gpus_per_node", path, &d->gpus_per_node, 0));
  TRY(GetChoice(*m, "mode", path, &d->mode, {"synchronous", "partially_asynchronous", "asynchronous"}));
  TRY(GetInt(*m, "every_n_epochs", path, &d->every_n_epochs, 0));
  TRY(GetChoice(*m, "shuffle", path, &d->shuffle, {"total", "blocks", "within_blocks", "both", "none"}));
  if (const SpecNode* x = m->Find("rendezvous")) {
    const std::string key = "distributed.rendezvous";
    if (!x->IsScalar()) return SpecError(*x, key, "expected auto, env or tcp://HOST:PORT");
    d->rendezvous = x->scalar;
    if (d->rendezvous != "auto" && d->rendezvous != "env") {
      const std::string rest = StartsWith(d->rendezvous, "tcp://") ? d->rendezvous.substr(6) : "";
      const auto colon = rest.rfind(':');
      std::int64_t port = 0;
      const bool ok = colon != std::string::npos && colon > 0 &&
                      std::from_chars(rest.data() + colon + 1, rest.data() + rest.size(), port).ptr ==
                          rest.data() + rest.size() &&
                      colon + 1 < rest.size() && port > 0 && port < 65536;
      if (!ok) return SpecError(*x, key, "expected auto, env or tcp://HOST:PORT, got '" + d->rendezvous + "'");
    }
  }
  if (const SpecNode* x = m->Find("timeout")) {
    const std::string key = "distributed.timeout";
    if (!x->IsScalar()) return SpecError(*x, key, "expected a positive duration such as 30s or 5m");
    auto t = ParseDurationSeconds(x->scalar);
    if (!t || *t <= 0) {
      return SpecError(*x, key, "expected a positive duration such as 30s or 5m, got '" + x->scalar + "'");
    }
    d->timeout_seconds = *t;
  }
  if (d->workers % d->nodes != 0) {
    return SpecError(*m->Find("nodes"), "distributed.nodes",
                     "workers (" + std::to_string(d->workers) + ") must be a multiple of nodes (" +
                         std::to_string(d->nodes) + ")");
  }
  if (d->nodes > 1 && d->rendezvous == "auto") {
    return SpecError(*m->Find("nodes"), "distributed.rendezvous",
                     "auto starts the workers on this machine only; with nodes > 1 use env or tcp://HOST:PORT");
  }
  if (d->mode == "partially_asynchronous" && m->Find("every_n_epochs") != nullptr) {
    return SpecError(*m->Find("every_n_epochs"), "distributed.every_n_epochs",
                     "partially_asynchronous merges after every epoch (every_n_epochs is for synchronous and "
                     "asynchronous)");
  }
  if (d->mode == "partially_asynchronous") d->every_n_epochs = 1;
  if (d->GradientSync() && d->shuffle != "total" && d->shuffle != "none") {
    return SpecError(*m->Find("shuffle"), "distributed.shuffle",
                     "gradient all-reduce (synchronous without every_n_epochs) splits each global batch, so "
                     "shuffle must be total or none");
  }
  return {};
}

Status ParseMetrics(const SpecNode& n, std::vector<std::string>* metrics) {
  static const std::vector<std::string> kinds{"accuracy", "loss", "mse", "mae", "f1"};
  metrics->clear();
  if (n.IsScalar()) {
    ASSIGN_OR_RETURN(std::string v, AsChoice(n, "metrics", kinds));
    metrics->push_back(v);
    return {};
  }
  if (!n.IsSequence() || n.items.empty()) return SpecError(n, "metrics", "expected a list of metric names");
  for (std::size_t i = 0; i < n.items.size(); ++i) {
    ASSIGN_OR_RETURN(std::string v, AsChoice(n.items[i], "metrics[" + std::to_string(i) + "]", kinds));
    if (std::find(metrics->begin(), metrics->end(), v) == metrics->end()) metrics->push_back(v);
  }
  return {};
}

bool IsMetricName(const std::string& name, const std::vector<std::string>& metrics) {
  for (const std::string prefix : {"val_", "train_", ""}) {
    if (!StartsWith(name, prefix)) continue;
    std::string base = name.substr(std::string(prefix).size());
    if (std::find(metrics.begin(), metrics.end(), base) != metrics.end()) return true;
    if (prefix == std::string("train_") && base == "loss") return true;
  }
  return false;
}

}  // namespace

bool MetricIsHigherBetter(const std::string& name) {
  return name.ends_with("accuracy") || name.ends_with("f1");
}

Result<Spec> ParseSpec(const SpecNode& root, const std::string& spec_file) {
  Spec spec;
  spec.file = spec_file;
  if (!root.IsMap()) return SpecError(root, "(top)", "a spec must be a map of sections");
  TRY(CheckKeys(root, "", {"name", "description", "data", "model", "loss", "optimizer", "trainer",
                           "metrics", "distributed"}));
  const SpecNode* data = root.Find("data");
  if (data == nullptr) return SpecError(root, "data", "the data section is required");
  TRY(ParseData(*data, &spec.data));
  const SpecNode* model = root.Find("model");
  if (model == nullptr) return SpecError(root, "model", "the model section is required");
  TRY(ParseModel(*model, &spec.model));
  if (const SpecNode* n = root.Find("loss")) TRY(ParseLoss(*n, &spec.loss));
  if (const SpecNode* n = root.Find("optimizer")) TRY(ParseOptimizer(*n, &spec.optimizer));
  if (const SpecNode* n = root.Find("trainer")) TRY(ParseTrainer(*n, &spec.trainer));
  if (const SpecNode* n = root.Find("metrics")) TRY(ParseMetrics(*n, &spec.metrics));
  bool classification = spec.loss.type == "cross_entropy" || spec.loss.type == "bce_with_logits";
  for (const std::string& m : spec.metrics) {
    if ((m == "accuracy" || m == "f1") && !classification) {
      return SpecError(*root.Find("metrics"), "metrics",
                       m + " needs a classification loss (cross_entropy or bce_with_logits)");
    }
  }
  for (const std::string& m : spec.metrics) {
    if ((m == "mse" || m == "mae") && classification) {
      return SpecError(*root.Find("metrics"), "metrics", m + " needs a regression loss (mse or l1)");
    }
  }
  if (spec.loss.type == "cross_entropy" && spec.data.labels.size() != 1) {
    return SpecError(*data, "data.labels", "cross_entropy needs exactly one label column");
  }
  // Callbacks may only watch metrics that exist.
  const SpecNode* trainer = root.Find("trainer");
  auto check_monitor = [&](const std::string& name, const char* cb) -> Status {
    if (name.empty() || IsMetricName(name, spec.metrics)) return {};
    return SpecError(trainer ? *trainer : root, std::string("trainer.callbacks.") + cb + ".monitor",
                     "'" + name + "' is not a computed metric (val_<metric>, train_loss)");
  };
  auto needs_validation = [&](const std::string& name, const char* cb) -> Status {
    if (!StartsWith(name, "val_") || spec.data.split.validation > 0) return {};
    return SpecError(*data, std::string("trainer.callbacks.") + cb + ".monitor",
                     "'" + name + "' needs a validation split (data.split.validation)");
  };
  if (spec.trainer.checkpointing) TRY(needs_validation(spec.trainer.checkpointing->monitor, "checkpointing"));
  if (spec.trainer.early_stopping) TRY(needs_validation(spec.trainer.early_stopping->monitor, "early_stopping"));
  if (spec.trainer.checkpointing) TRY(check_monitor(spec.trainer.checkpointing->monitor, "checkpointing"));
  if (spec.trainer.early_stopping) TRY(check_monitor(spec.trainer.early_stopping->monitor, "early_stopping"));
  if (const SpecNode* n = root.Find("distributed")) {
    DistributedSpec d;
    TRY(ParseDistributed(*n, &d));
    // The ranks agree on a stop only where they exchange every epoch.
    if (spec.trainer.early_stopping && d.workers > 1 && !d.GradientSync() &&
        !(d.mode == "synchronous" && d.every_n_epochs == 1)) {
      return SpecError(*n, "trainer.callbacks.early_stopping",
                       "needs distributed.mode synchronous with every_n_epochs 0 or 1 (the ranks must agree on "
                       "a stop every epoch; in " + d.mode + " mode they meet only every " +
                       (d.every_n_epochs > 0 ? std::to_string(d.every_n_epochs) + " epochs)" : "run, at the end)"));
    }
    spec.distributed = d;
  }
  return spec;
}

Result<Spec> LoadSpec(const std::string& path, const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(SpecNode root, LoadSpecTree(path));
  for (const std::string& o : overrides) TRY(ApplyOverride(root, o));
  return ParseSpec(root, path);
}

}  // namespace trainq::trainer
