#include "stats/multiple.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace trainq::stats;

TEST_CASE("Holm and BH adjusted p equal the reference values on 50 random families", "[multiple]") {
  // Written by tests/stats/multiple_reference.py (NumPy, from the published
  // definitions; statsmodels' multipletests computes the same).
  std::ifstream in(std::string(TRAINQ_SOURCE_DIR) + "/tests/stats/data/multiple_reference.json");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str());
  const auto& families = j.at("families");
  REQUIRE(families.size() == 50);
  int values = 0;
  for (const auto& f : families) {
    auto p = f.at("p").get<std::vector<double>>();
    auto holm = HolmAdjust(p);
    auto bh = BhAdjust(p);
    auto want_holm = f.at("holm").get<std::vector<double>>();
    auto want_bh = f.at("bh").get<std::vector<double>>();
    REQUIRE(holm.size() == p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      CHECK(holm[i] == Approx(want_holm[i]).epsilon(1e-12).margin(1e-15));
      CHECK(bh[i] == Approx(want_bh[i]).epsilon(1e-12).margin(1e-15));
      ++values;
    }
  }
  CHECK(values > 500);
}

TEST_CASE("Holm and BH by hand on a small family", "[multiple]") {
  std::vector<double> p = {0.01, 0.04, 0.03, 0.005};
  // Sorted: 0.005, 0.01, 0.03, 0.04. Holm: 4*0.005=0.02, 3*0.01=0.03,
  // max(0.03, 2*0.03)=0.06, max(0.06, 0.04)=0.06.
  auto h = HolmAdjust(p);
  CHECK(h[3] == Approx(0.02));
  CHECK(h[0] == Approx(0.03));
  CHECK(h[2] == Approx(0.06));
  CHECK(h[1] == Approx(0.06));
  // BH: 4*0.04/4=0.04, min(0.04, 4*0.03/3=0.04), min(0.04, 4*0.01/2=0.02), 4*0.005/1=0.02.
  auto b = BhAdjust(p);
  CHECK(b[1] == Approx(0.04));
  CHECK(b[2] == Approx(0.04));
  CHECK(b[0] == Approx(0.02));
  CHECK(b[3] == Approx(0.02));
  auto none = Adjust(Correction::kNone, p);
  CHECK(none == p);
  CHECK(HolmAdjust(std::vector<double>{}).empty());
  CHECK(HolmAdjust(std::vector<double>{0.7}) == std::vector<double>{0.7});
}

TEST_CASE("interval levels match the correction", "[multiple]") {
  CHECK(IntervalLevel(Correction::kHolm, 0.05, 20, 0) == Approx(1 - 0.05 / 20));
  CHECK(IntervalLevel(Correction::kBh, 0.05, 20, 3) == Approx(1 - 3 * 0.05 / 20));
  CHECK(IntervalLevel(Correction::kBh, 0.05, 20, 0) == Approx(1 - 0.05 / 20));
  CHECK(IntervalLevel(Correction::kNone, 0.05, 20, 0) == Approx(0.95));
}

TEST_CASE("corrections parse by name and refuse others", "[multiple]") {
  CHECK(*ParseCorrection("holm") == Correction::kHolm);
  CHECK(*ParseCorrection("bh") == Correction::kBh);
  CHECK(*ParseCorrection("none") == Correction::kNone);
  auto bad = ParseCorrection("bonferroni");
  REQUIRE(!bad);
  CHECK(bad.error().message.find("holm, bh or none") != std::string::npos);
}
