#include "bench/sweep_objectives.h"

#include <algorithm>
#include <boost/random/mersenne_twister.hpp>
#include <boost/random/normal_distribution.hpp>
#include <cmath>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

namespace trainq::bench {

using nlohmann::json;

double Branin(double x1, double x2) {
  const double pi = 3.14159265358979323846;
  double a = 1, b = 5.1 / (4 * pi * pi), c = 5 / pi, r = 6, s = 10, t = 1 / (8 * pi);
  double q = x2 - b * x1 * x1 + c * x1 - r;
  return a * q * q + s * (1 - t) * std::cos(x1) + s;
}

double Hartmann6(const std::array<double, 6>& x) {
  static constexpr double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  static constexpr double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                     {0.05, 10, 17, 0.1, 8, 14},
                                     {3, 3.5, 1.7, 10, 17, 8},
                                     {17, 8, 0.05, 10, 0.1, 14}};
  static constexpr double P[4][6] = {{1312, 1696, 5569, 124, 8283, 5886},
                                     {2329, 4135, 8307, 3736, 1004, 9991},
                                     {2348, 1451, 3522, 2883, 3047, 6650},
                                     {4047, 8828, 8732, 5743, 1091, 381}};
  double f = 0;
  for (int i = 0; i < 4; ++i) {
    double e = 0;
    for (int j = 0; j < 6; ++j) {
      double d = x[static_cast<std::size_t>(j)] - P[i][j] * 1e-4;
      e += A[i][j] * d * d;
    }
    f -= alpha[i] * std::exp(-e);
  }
  return f;
}

std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double Normal(std::uint64_t key) {
  boost::random::mt19937_64 rng(Mix(key));
  return boost::random::normal_distribution<double>(0, 1)(rng);
}

namespace {

double Logistic(double x) { return 1 / (1 + std::exp(-x)); }

// A key for x rounded to 1e-9 per coordinate (in the parameters' order).
std::uint64_t PointKey(const json& p) {
  std::uint64_t h = 0x70696e74ULL;
  for (const auto& [name, v] : p.items()) {
    h = Mix(h ^ std::hash<std::string>{}(name));
    if (v.is_number()) {
      h = Mix(h ^ static_cast<std::uint64_t>(std::llround(v.get<double>() * 1e9)));
    }
  }
  return h;
}

SweepParam Range(const char* name, ParamKind kind, double lo, double hi, bool log = false) {
  SweepParam p;
  p.name = name;
  p.kind = kind;
  p.lo = lo;
  p.hi = hi;
  p.log = log;
  return p;
}

}  // namespace

double SyntheticObjective::RunSd(const json& p, double noise) const {
  return noise * (0.5 + 1.5 * Shape(p));
}

double SyntheticObjective::Run(const json& p, int seed, std::uint64_t sweep, double noise) const {
  const auto s = static_cast<std::uint64_t>(seed);
  double shared = Normal(Mix(sweep * 1000003 + s) ^ 0x73656564ULL);
  double point = Normal(Mix(Mix(sweep * 1000003 + s) ^ PointKey(p)));
  return True(p) + RunSd(p, noise) * (0.5 * shared + 0.8660254037844386 * point);
}

std::vector<SweepParam> BraninObjective::params() const {
  return {Range("x1", ParamKind::kUniform, -5, 10), Range("x2", ParamKind::kUniform, 0, 15)};
}
double BraninObjective::True(const json& p) const {
  return -Branin(p["x1"].get<double>(), p["x2"].get<double>());
}
double BraninObjective::Shape(const json& p) const { return Logistic(p["x1"].get<double>() - 2.5); }

std::vector<SweepParam> Hartmann6Objective::params() const {
  std::vector<SweepParam> out;
  for (const char* n : {"x1", "x2", "x3", "x4", "x5", "x6"}) {
    out.push_back(Range(n, ParamKind::kUniform, 0, 1));
  }
  return out;
}
double Hartmann6Objective::True(const json& p) const {
  std::array<double, 6> x{};
  for (std::size_t i = 0; i < 6; ++i) x[i] = p["x" + std::to_string(i + 1)].get<double>();
  return -Hartmann6(x);
}
double Hartmann6Objective::Shape(const json& p) const {
  return Logistic((p["x2"].get<double>() - 0.5) / 0.1);
}
int Hartmann6Objective::budget() const { return 150; }

DigitsTable::DigitsTable(const std::string& csv_path) {
  std::ifstream in(csv_path);
  if (!in) throw std::runtime_error(csv_path + ": cannot open (bench/data/make_digits_grid.py makes it)");
  std::string line;
  std::getline(in, line);
  if (line != "lr,width,batch_size,seed,accuracy") {
    throw std::runtime_error(csv_path + ":1: expected the header lr,width,batch_size,seed,accuracy");
  }
  std::set<double> lrs, widths, batches;
  std::map<std::array<double, 3>, std::map<int, double>> rows;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::string f[5];
    for (auto& x : f) std::getline(ss, x, ',');
    try {
      double lr = std::stod(f[0]), w = std::stod(f[1]), b = std::stod(f[2]);
      int seed = std::stoi(f[3]);
      double acc = std::stod(f[4]);
      lrs.insert(lr);
      widths.insert(w);
      batches.insert(b);
      rows[{lr, w, b}][seed] = acc;
    } catch (const std::exception&) {
      throw std::runtime_error(csv_path + ":" + std::to_string(lineno) + ": bad row '" + line + "'");
    }
  }
  lrs_.assign(lrs.begin(), lrs.end());
  widths_.assign(widths.begin(), widths.end());
  batches_.assign(batches.begin(), batches.end());
  if (rows.size() != lrs_.size() * widths_.size() * batches_.size()) {
    throw std::runtime_error(csv_path + ": the grid is incomplete");
  }
  best_ = -1e300;
  for (const auto& [key, seeds] : rows) {
    if (seeds.size() != 10 || seeds.begin()->first != 1 || seeds.rbegin()->first != 10) {
      throw std::runtime_error(csv_path + ": a grid point lacks seeds 1..10");
    }
    Cell c;
    for (const auto& [s, a] : seeds) c.acc.push_back(a);
    c.mean = std::accumulate(c.acc.begin(), c.acc.end(), 0.0) / 10;
    double ss = 0;
    for (double a : c.acc) ss += (a - c.mean) * (a - c.mean);
    c.sd = std::sqrt(ss / 9);
    best_ = std::max(best_, c.mean);
    auto idx = [](const std::vector<double>& v, double x) {
      return static_cast<int>(std::lower_bound(v.begin(), v.end(), x) - v.begin());
    };
    cells_[{idx(lrs_, key[0]), idx(widths_, key[1]), idx(batches_, key[2])}] = c;
  }
}

std::vector<SweepParam> DigitsTable::params() const {
  return {Range("lr", ParamKind::kLogUniform, lrs_.front(), lrs_.back()),
          Range("width", ParamKind::kInt, widths_.front(), widths_.back(), true),
          Range("batch_size", ParamKind::kInt, batches_.front(), batches_.back(), true)};
}

json DigitsTable::Snap(const json& p) const {
  auto nearest = [](const std::vector<double>& v, double x) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < v.size(); ++i) {
      if (std::abs(std::log(v[i] / x)) < std::abs(std::log(v[best] / x))) best = i;
    }
    return v[best];
  };
  json out;
  out["lr"] = nearest(lrs_, p["lr"].get<double>());
  out["width"] = static_cast<std::int64_t>(nearest(widths_, p["width"].get<double>()));
  out["batch_size"] = static_cast<std::int64_t>(nearest(batches_, p["batch_size"].get<double>()));
  return out;
}

const DigitsTable::Cell& DigitsTable::At(const json& p) const {
  auto idx = [](const std::vector<double>& v, double x) {
    auto it = std::lower_bound(v.begin(), v.end(), x * (1 - 1e-9));
    if (it == v.end() || std::abs(*it - x) > 1e-9 * std::abs(x)) {
      throw std::runtime_error("digits table: value " + std::to_string(x) + " is not on the grid");
    }
    return static_cast<int>(it - v.begin());
  };
  return cells_.at({idx(lrs_, p["lr"].get<double>()), idx(widths_, p["width"].get<double>()),
                    idx(batches_, p["batch_size"].get<double>())});
}

double DigitsTable::True(const json& p) const { return At(p).mean; }
double DigitsTable::RunSd(const json& p, double noise) const { return noise * At(p).sd; }

double DigitsTable::Run(const json& p, int seed, std::uint64_t sweep, double noise) const {
  if (seed < 1 || seed > 10) throw std::runtime_error("digits table: seed out of 1..10");
  std::array<int, 10> perm{};
  std::iota(perm.begin(), perm.end(), 0);
  boost::random::mt19937_64 rng(Mix(sweep ^ 0x64696769ULL));
  for (int i = 9; i > 0; --i) {  // Fisher-Yates, own draw so it is portable
    auto j = static_cast<int>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(j)]);
  }
  const Cell& c = At(p);
  return c.mean + noise * (c.acc[static_cast<std::size_t>(perm[static_cast<std::size_t>(seed - 1)])] - c.mean);
}

}  // namespace trainq::bench
