// `trainq stats summary|compare`, driven through the same CLI11 registration
// main() uses (AddStatsCommands), with std::cout and std::cerr captured.
#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "agent/cli/cli.h"
#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

using nlohmann::json;

struct Ran {
  int exit_code = 0;
  std::string out;
  std::string err;
};

// Swaps a stream's buffer for the lifetime of the object.
class Capture {
 public:
  Capture(std::ostream& stream, std::ostringstream& into)
      : stream_(stream), old_(stream.rdbuf(into.rdbuf())) {}
  ~Capture() { stream_.rdbuf(old_); }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

 private:
  std::ostream& stream_;
  std::streambuf* old_;
};

Ran RunStats(std::vector<std::string> args) {
  args.insert(args.begin(), {"trainq", "stats"});
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  CLI::App app;
  app.require_subcommand(1);
  Ran ran;
  AddStatsCommands(app, &ran.exit_code);
  std::ostringstream out, err;
  {
    Capture c_out(std::cout, out), c_err(std::cerr, err);
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      ran.exit_code = app.exit(e);
    }
  }
  ran.out = out.str();
  ran.err = err.str();
  return ran;
}

// Student's sleep data (R's `sleep`), and 10 seeds of made-up accuracies;
// tests/stats/compare_test.cc names the sources of the expected values.
constexpr const char* kSleep1 = "# group 1\n0.7\n-1.6\n-0.2\n-1.2\n-0.1\n3.4\n3.7\n0.8\n0.0\n2.0\n";
constexpr const char* kSleep2 = "1.9\n0.8\n1.1\n0.1\n-0.1\n4.4\n5.5\n1.6\n4.6\n3.4\n";
constexpr const char* kAccA =
    "0.662\n0.671\n0.659\n0.668\n0.675\n0.664\n0.669\n0.657\n0.673\n0.666\n";
constexpr const char* kAccB =
    "0.655\n0.661\n0.650\n0.664\n0.659\n0.652\n0.660\n0.648\n0.667\n0.658\n";

class Files {
 public:
  std::string Write(const std::string& name, const std::string& contents) {
    std::string path = dir_ / name;
    REQUIRE(WriteFile(path, contents));
    return path;
  }

 private:
  testing::TempDir dir_;
};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("stats summary: text output") {
  Files f;
  auto path = f.Write("a.txt", kSleep1);
  auto r = RunStats({"summary", path});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(Has(r.out, path + ": n=10\n"));
  CHECK(Has(r.out, "mean    0.75  sd 1.78901  se 0.565735\n"));
  // t-interval -0.52978.. 2.02978 (reference.py, "summary SLEEP1").
  CHECK(Has(r.out, "95% CI  [-0.52978, 2.02978] (t), ["));
  CHECK(Has(r.out, "(bootstrap, 10000 resamples, seed 1)"));
  CHECK(Has(r.out, "median  0.35  IQR 1.875 [-0.175, 1.7]  IQM 0.533333\n"));
  CHECK(Has(r.out, "range   -1.6 .. 3.7\n"));
}

TEST_CASE("stats summary --json: fields and values") {
  Files f;
  auto r = RunStats({"summary", f.Write("a.txt", kAccA), "--json"});
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK(j["n"] == 10);
  CHECK(j["mean"].get<double>() == Approx(0.6664).epsilon(1e-12));
  CHECK(j["sd"].get<double>() == Approx(0.0059292120518291145).epsilon(1e-12));
  CHECK(j["se"].get<double>() == Approx(0.0018749814813900326).epsilon(1e-12));
  CHECK(j["ci95"][0].get<double>() == Approx(0.6621584972117597).epsilon(1e-10));
  CHECK(j["ci95"][1].get<double>() == Approx(0.6706415027882405).epsilon(1e-10));
  CHECK(j["median"].get<double>() == Approx(0.667).epsilon(1e-12));
  CHECK(j["iqm"].get<double>() == Approx(0.6666666666666666).epsilon(1e-12));
  // Golden bootstrap interval (reference.py, 10,000 resamples, seed 1).
  CHECK(j["bootstrap_ci95"][0].get<double>() == Approx(0.6629).epsilon(1e-12));
  CHECK(j["bootstrap_ci95"][1].get<double>() == Approx(0.6698).epsilon(1e-12));
  CHECK(j["min"] == 0.657);
  CHECK(j["max"] == 0.675);
}

TEST_CASE("stats summary: the same seed gives the same output, another seed another") {
  Files f;
  auto path = f.Write("a.txt", kSleep1);
  auto a = RunStats({"summary", path, "--seed", "5", "--resamples", "500"});
  auto b = RunStats({"summary", path, "--seed", "5", "--resamples", "500"});
  auto c = RunStats({"summary", path, "--seed", "6", "--resamples", "500"});
  CHECK(a.exit_code == 0);
  CHECK(a.out == b.out);
  CHECK(a.out != c.out);
}

TEST_CASE("stats summary: n = 1 says there is no interval") {
  Files f;
  auto path = f.Write("one.txt", "0.66\n");
  auto text = RunStats({"summary", path});
  CHECK(text.exit_code == 0);
  CHECK(Has(text.out, "no interval with n=1"));
  auto js = RunStats({"summary", path, "--json"});
  json j = json::parse(js.out);
  CHECK(j["n"] == 1);
  CHECK(j["mean"] == 0.66);
  CHECK(j["ci95"].is_null());
  CHECK(j["sd"].is_null());
  CHECK(j["se"].is_null());
  CHECK(j["bootstrap_ci95"].is_null());
}

TEST_CASE("stats summary: all values equal print no NaN") {
  Files f;
  auto path = f.Write("same.txt", "0.5\n0.5\n0.5\n");
  auto r = RunStats({"summary", path});
  CHECK(r.exit_code == 0);
  CHECK_FALSE(Has(r.out, "nan"));
  CHECK(Has(r.out, "sd 0  se 0"));
  CHECK(Has(r.out, "[0.5, 0.5] (t)"));
}

TEST_CASE("stats summary: bad input names the file and line") {
  Files f;
  auto bad = f.Write("a.txt", "0.5\n0.6\nabc\n");
  auto r = RunStats({"summary", bad});
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(r.err == "trainq: error: " + bad + ":3: not a number: \"abc\"\n");

  auto empty = f.Write("empty.txt", "");
  auto e = RunStats({"summary", empty});
  CHECK(e.exit_code == 1);
  CHECK(e.err == "trainq: error: " + empty + ": no numbers in the file\n");

  auto missing = RunStats({"summary", "/nonexistent/x.txt"});
  CHECK(missing.exit_code == 1);
  CHECK(Has(missing.err, "trainq: error: /nonexistent/x.txt: "));

  auto all_nan = RunStats({"summary", f.Write("nan.txt", "nan\n")});
  CHECK(all_nan.exit_code == 1);
  CHECK(Has(all_nan.err, "no finite numbers"));
}

TEST_CASE("stats summary: non-finite values are left out with a warning") {
  Files f;
  auto path = f.Write("a.txt", "1\nnan\n2\ninf\n3\n");
  auto r = RunStats({"summary", path, "--json"});
  CHECK(r.exit_code == 0);
  CHECK(r.err == "trainq: warning: " + path + ":2: not finite: nan; left out\n" +
                     "trainq: warning: " + path + ":4: not finite: inf; left out\n");
  json j = json::parse(r.out);
  CHECK(j["n"] == 3);
  CHECK(j["mean"] == 2.0);
}

TEST_CASE("stats compare --json: sleep data agree with R") {
  Files f;
  auto r = RunStats(
      {"compare", f.Write("a.txt", kSleep1), f.Write("b.txt", kSleep2), "--json", "--paired"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  for (const char* side : {"a", "b"}) {
    for (const char* key : {"n", "mean", "sd", "se", "ci95", "median", "iqm"}) {
      CHECK(j[side].contains(key));
    }
  }
  CHECK(j["a"]["mean"].get<double>() == Approx(0.75));
  CHECK(j["b"]["mean"].get<double>() == Approx(2.33));
  CHECK(j["diff"].get<double>() == Approx(-1.58).epsilon(1e-12));
  // R: t = -1.8608, df = 17.776, p-value = 0.07939, CI -3.3654832 0.2054832.
  CHECK(j["welch"]["t"].get<double>() == Approx(-1.860813467486853).epsilon(1e-10));
  CHECK(j["welch"]["df"].get<double>() == Approx(17.776473516178488).epsilon(1e-10));
  CHECK(j["welch"]["p"].get<double>() == Approx(0.07939414018735613).epsilon(1e-8));
  CHECK(j["welch"]["ci95"][0].get<double>() == Approx(-3.365483230711722).epsilon(1e-9));
  CHECK(j["welch"]["ci95"][1].get<double>() == Approx(0.2054832307117216).epsilon(1e-9));
  // R, paired = TRUE: t = -4.0621, df = 9, p-value = 0.002833.
  CHECK(j["paired"]["t"].get<double>() == Approx(-4.062127683382037).epsilon(1e-10));
  CHECK(j["paired"]["df"] == 9.0);
  CHECK(j["paired"]["p"].get<double>() == Approx(0.002832890197390081).epsilon(1e-8));
  CHECK(j["paired"]["ci95"][0].get<double>() == Approx(-2.4598857632769766).epsilon(1e-9));
  CHECK(j["hedges_g"].get<double>() == Approx(-0.7970185004474465).epsilon(1e-10));
  CHECK(j["u"] == 25.5);  // R's wilcox.test W
  CHECK(j["p_a_gt_b"].get<double>() == Approx(0.255));
  // With --paired the bootstrap resamples seeds: reference.py's bootstrap_mean
  // of the differences, 10,000 resamples, seed 1.
  CHECK(j["bootstrap_ci95"][0].get<double>() == Approx(-2.37).epsilon(1e-12));
  CHECK(j["bootstrap_ci95"][1].get<double>() == Approx(-0.96).epsilon(1e-12));
  // The paired test decides: p = 0.0028 with goal max and A lower.
  CHECK(j["verdict"] == "worse");
}

TEST_CASE("stats compare --json: no paired field unless asked") {
  Files f;
  auto r = RunStats({"compare", f.Write("a.txt", kSleep1), f.Write("b.txt", kSleep2), "--json"});
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK_FALSE(j.contains("paired"));
  CHECK(j["verdict"] == "no detectable change");  // Welch p = 0.079
}

TEST_CASE("stats compare: text output with the verdict") {
  Files f;
  auto a = f.Write("a.txt", kAccA), b = f.Write("b.txt", kAccB);
  auto r = RunStats({"compare", a, b});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Has(r.out, "A " + a + ": n=10  mean 0.6664  sd 0.00592921  95% CI [0.662158, 0.670642]"));
  CHECK(Has(r.out,
            "A - B:  +0.009  95% CI [0.00334141, 0.0146586]  (Welch t=3.34175, df=17.9831, "
            "p=0.00363425)\n"));
  CHECK(Has(r.out, "P(A>B) 0.85 (Mann-Whitney U=85)  Hedges' g 1.43133\n"));
  CHECK(Has(r.out, "verdict: better (A against B; goal max, alpha 0.05, Welch t-test)\n"));
  auto min = RunStats({"compare", a, b, "--goal", "min"});
  CHECK(Has(min.out, "verdict: worse"));
  auto paired = RunStats({"compare", a, b, "--paired"});
  CHECK(Has(paired.out, "paired: +0.009  95% CI [0.00663944, 0.0113606]  (t=8.62483, df=9, "));
  CHECK(Has(paired.out, "bootstrap 95% CI of A - B: [0.0072, 0.011] (resampling pairs)\n"));
  CHECK(Has(paired.out, ", paired t-test)\n"));
}

TEST_CASE("stats compare: min effect can turn better into not enough runs") {
  Files f;
  auto a = f.Write("a.txt", kAccA), b = f.Write("b.txt", kAccB);
  // Difference 0.009, Welch interval [0.0033, 0.0147]: real, but it may or
  // may not reach 0.01.
  auto r = RunStats({"compare", a, b, "--min-effect", "0.01"});
  CHECK(Has(r.out, "verdict: not enough runs (A against B; goal max, alpha 0.05, min effect 0.01"));
  // Significant, and the whole interval is below 0.05: real but negligible.
  auto small = RunStats({"compare", a, b, "--min-effect", "0.05"});
  CHECK(Has(small.out, "verdict: negligible"));
}

TEST_CASE("stats compare: n = 1 on one side") {
  Files f;
  auto a = f.Write("a.txt", "0.7\n"), b = f.Write("b.txt", kAccB);
  auto text = RunStats({"compare", a, b});
  CHECK(text.exit_code == 0);
  CHECK(Has(text.out, "A " + a + ": n=1  mean 0.7  (no interval with n=1)\n"));
  CHECK(Has(text.out, "no t-test"));
  CHECK(Has(text.out, "verdict: not enough runs"));
  json j = json::parse(RunStats({"compare", a, b, "--json"}).out);
  CHECK(j["a"]["ci95"].is_null());
  CHECK(j["welch"].is_null());
  CHECK(j["hedges_g"].is_null());
  CHECK(j["bootstrap_ci95"].is_null());
  CHECK(j["p_a_gt_b"] == 1.0);
  CHECK(j["verdict"] == "not enough runs");
}

TEST_CASE("stats compare: constant sides stay defined, no NaN anywhere") {
  Files f;
  auto a = f.Write("a.txt", "0.7\n0.7\n0.7\n"), b = f.Write("b.txt", "0.6\n0.6\n0.6\n");
  auto text = RunStats({"compare", a, b});
  CHECK(text.exit_code == 0);
  CHECK_FALSE(Has(text.out, "nan"));
  CHECK(Has(text.out, "verdict: better"));
  auto js = RunStats({"compare", a, b, "--json"});
  CHECK_FALSE(Has(js.out, "nan"));
  json j = json::parse(js.out);
  CHECK(j["welch"]["t"].is_null());  // infinite
  CHECK(j["welch"]["p"] == 0.0);
  CHECK(j["hedges_g"].is_null());  // infinite
  auto same = RunStats({"compare", a, a, "--json"});
  json k = json::parse(same.out);
  CHECK(k["welch"]["t"] == 0.0);
  CHECK(k["welch"]["p"] == 1.0);
  CHECK(k["hedges_g"] == 0.0);
  CHECK(k["verdict"] == "no detectable change");
}

TEST_CASE("stats compare --paired: sizes must match, non-finite pairs dropped") {
  Files f;
  auto a = f.Write("a.txt", "1\n2\n3\n"), b = f.Write("b.txt", "1\n2\n");
  auto r = RunStats({"compare", a, b, "--paired"});
  CHECK(r.exit_code == 1);
  CHECK(r.err ==
        "trainq: error: --paired needs the same number of values in both files (one per "
        "seed): " +
            a + " has 3, " + b + " has 2\n");

  auto c = f.Write("c.txt", "1.5\n2.5\nnan\n3.0\n"), d = f.Write("d.txt", "1\n2\n3\n2\n");
  auto p = RunStats({"compare", c, d, "--paired", "--json"});
  CHECK(p.exit_code == 0);
  CHECK(p.err == "trainq: warning: pair 3 (" + c + ":3 nan, " + d +
                     ":3 3) is not finite; the pair is left out\n");
  json j = json::parse(p.out);
  CHECK(j["a"]["n"] == 3);
  CHECK(j["b"]["n"] == 3);
  // Differences 0.5, 0.5, 1.0: mean 2/3, df 2.
  CHECK(j["paired"]["df"] == 2.0);
}

TEST_CASE("stats compare: bad options and files are errors") {
  Files f;
  auto a = f.Write("a.txt", kAccA), b = f.Write("b.txt", kAccB);
  auto goal = RunStats({"compare", a, b, "--goal", "up"});
  CHECK(goal.exit_code == 1);
  CHECK(Has(goal.err, "trainq: error: goal must be \"max\" or \"min\", got \"up\""));
  CHECK(RunStats({"compare", a, b, "--alpha", "1.5"}).exit_code == 1);
  CHECK(RunStats({"compare", a, b, "--min-effect", "-1"}).exit_code == 1);
  CHECK(RunStats({"compare", a, b, "--resamples", "0"}).exit_code == 1);
  auto bad_b = RunStats({"compare", a, f.Write("bad.txt", "1\n\n1,5\n")});
  CHECK(bad_b.exit_code == 1);
  CHECK(Has(bad_b.err, "bad.txt:3: not a number: \"1,5\""));
}

TEST_CASE("trainq binary: stats errors exit 1") {
  // The real executable, to check main() passes the exit code through.
  Files f;
  auto bad = f.Write("a.txt", "x\n");
  std::string output;
  int rc = testing::RunShell(std::string(TRAINQ_BINARY) + " stats summary " + bad, &output);
  CHECK(rc == 1);
  CHECK(Has(output, "trainq: error: " + bad + ":1: not a number: \"x\""));
  rc = testing::RunShell(std::string(TRAINQ_BINARY) + " stats summary " + f.Write("b.txt", "1\n"),
                         &output);
  CHECK(rc == 0);
}

TEST_CASE("stats power: runs per side from A's sd, pairs from B - A's (SciPy's nct answers)") {
  // Expected n from tests/stats/power_reference.py's functions (scipy.stats.nct)
  // on these files: sd(A) = 0.0059292, sd(B - A) = 0.0032998.
  Files f;
  auto a = f.Write("a.txt", kAccA), b = f.Write("b.txt", kAccB);
  auto two = RunStats({"power", a, "--effect", "0.005"});
  INFO(two.out << two.err);
  REQUIRE(two.exit_code == 0);
  CHECK(Has(two.out, "sd 0.00592921 (of A, n=10); effect ±0.005, alpha 0.05 two-sided, power 0.8\n"));
  CHECK(Has(two.out, "runs per side: 24  (power 0.815878 with 24, 0.798655 with 23; exact "
                     "noncentral t, two-sample t-test)\n"));
  auto j = json::parse(RunStats({"power", a, "--effect", "0.005", "--alpha", "0.01", "--power",
                                 "0.9", "--json"})
                           .out);
  CHECK(j["n"] == 44);
  CHECK(j["design"] == "two-sample");
  auto paired = json::parse(RunStats({"power", a, b, "--paired", "--effect", "-0.005", "--json"}).out);
  CHECK(paired["n"] == 6);
  CHECK(paired["sd_of"] == "B - A");
  CHECK(paired["sd"].get<double>() == Approx(0.0032998316));
  CHECK(json::parse(RunStats({"power", a, b, "--paired", "--effect", "0.002", "--json"}).out)["n"] ==
        24);
}

TEST_CASE("stats power: mistakes are errors that say what to do") {
  Files f;
  auto a = f.Write("a.txt", kAccA), b = f.Write("b.txt", kAccB);
  auto no_b = RunStats({"power", a, "--paired", "--effect", "0.01"});
  CHECK(no_b.exit_code != 0);
  CHECK(Has(no_b.err, "--paired needs FILE_B"));
  auto stray_b = RunStats({"power", a, b, "--effect", "0.01"});
  CHECK(stray_b.exit_code != 0);
  CHECK(Has(stray_b.err, "FILE_B is only read with --paired"));
  auto zero = RunStats({"power", a, "--effect", "0"});
  CHECK(zero.exit_code != 0);
  CHECK(Has(zero.err, "--effect must be"));
  auto one = RunStats({"power", f.Write("one.txt", "0.5\n"), "--effect", "0.1"});
  CHECK(one.exit_code != 0);
  CHECK(Has(one.err, "needs at least 2 values"));
  auto short_b = RunStats({"power", a, f.Write("c.txt", "0.5\n0.6\n"), "--paired", "--effect", "0.1"});
  CHECK(short_b.exit_code != 0);
  CHECK(Has(short_b.err, "the same number of values"));
}

}  // namespace
}  // namespace trainq
