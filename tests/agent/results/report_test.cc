#include "agent/results/report.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <cmath>
#include <regex>

#include "core/strings.h"
#include "tests/support/git_cli.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;

std::int64_t Run(Store& store, const std::string& sha, const std::string& parent,
                 const std::string& subject, const std::vector<double>& values, TimeMs at) {
  CommitInfo c;
  c.sha = sha;
  c.parent_sha = parent;
  c.message = subject;
  BatchSpec s;
  s.experiment = "digits";
  s.command = "true";
  s.repeats = static_cast<int>(values.size());
  auto r = store.runs().Submit("/repos/model", c, {s}, at);
  REQUIRE(r);
  auto leased = store.runs().Lease("w", at, 60'000, static_cast<int>(values.size())).value();
  for (const auto& l : leased) {
    REQUIRE(store.runs().Complete(l.run_id, l.token, at, values[static_cast<size_t>(l.repeat)]));
  }
  return r->front().batch_id;
}

const std::string kA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const std::string kC = "cccccccccccccccccccccccccccccccccccccccc";

struct World {
  testing::TempDir dir;
  Store store = Store::Open(dir / "t.db").value();
  World() {
    Run(store, kA, "", "baseline", {0.90, 0.91, 0.92, 0.905, 0.915}, kT0);
    // Clearly better, same seeds.
    Run(store, kB, kA, "wider layer <b>", {0.93, 0.94, 0.95, 0.935, 0.945}, kT0 + 1000);
    // Same mean, far larger spread.
    Run(store, kC, kB, "unstable lr", {0.85, 1.0, 0.88, 0.99, 0.98}, kT0 + 2000);
  }
};

// Checks that every opened tag is closed in order (void elements aside), with
// Python's html.parser reading the file.
bool HtmlWellFormed(const std::string& path, std::string* out) {
  std::string script =
      "import sys, html.parser\n"
      "VOID = {'meta', 'br', 'img', 'input', 'link', 'hr'}\n"
      "class P(html.parser.HTMLParser):\n"
      "    def __init__(self):\n"
      "        super().__init__(); self.stack = []; self.bad = []\n"
      "    def handle_starttag(self, t, a):\n"
      "        if t not in VOID: self.stack.append(t)\n"
      "    def handle_startendtag(self, t, a): pass\n"
      "    def handle_endtag(self, t):\n"
      "        if not self.stack or self.stack[-1] != t: self.bad.append(t)\n"
      "        else: self.stack.pop()\n"
      "p = P(); p.feed(open(sys.argv[1]).read()); p.close()\n"
      "print('unclosed', p.stack, 'bad', p.bad)\n"
      "sys.exit(1 if p.stack or p.bad else 0)\n";
  std::string py = path + ".check.py";
  REQUIRE(WriteFile(py, script));
  return testing::RunShell("python3 " + py + " " + path, out) == 0;
}

}  // namespace

TEST_CASE("BuildReport compares each batch with its parent and flags a grown spread",
          "[report]") {
  World w;
  auto r = BuildReport(w.store, 0, "all", {}).value();
  REQUIRE(r.experiments.size() == 1);
  const auto& e = r.experiments[0].entries;
  REQUIRE(e.size() == 3);
  CHECK(r.batches == 3);
  CHECK(r.runs == 15);
  CHECK_FALSE(e[0].vs_parent);
  REQUIRE(e[1].vs_parent);
  CHECK(e[1].vs_parent->verdict == stats::Verdict::kBetter);
  CHECK_FALSE(e[1].spread_grew);
  CHECK(e[2].spread_grew);
  CHECK(e[2].spread_p < 0.05);
}

TEST_CASE("BuildReport honours the window and the experiment filter", "[report]") {
  World w;
  CHECK(BuildReport(w.store, kT0 + 1500, "x", {}).value().batches == 1);
  CHECK(BuildReport(w.store, 0, "x", {"other"}).value().batches == 0);
  CHECK(BuildReport(w.store, 0, "x", {"digits"}).value().batches == 3);
}

TEST_CASE("The report files are byte-identical for the same store", "[report]") {
  World w;
  auto r1 = BuildReport(w.store, 0, "7d", {}).value();
  auto r2 = BuildReport(w.store, 0, "7d", {}).value();
  CHECK(RenderMarkdown(r1) == RenderMarkdown(r2));
  CHECK(RenderHtml(r1) == RenderHtml(r2));
  CHECK(RenderJson(r1) == RenderJson(r2));
  CHECK(RenderRunsCsv(r1) == RenderRunsCsv(r2));
}

TEST_CASE("The Markdown report lists significant changes first", "[report]") {
  World w;
  auto md = RenderMarkdown(BuildReport(w.store, 0, "7d", {}).value());
  auto sig = md.find("## Significant changes");
  auto better = md.find("**digits** at `bbbbbbb`");
  auto table = md.find("| batch | commit");
  REQUIRE(sig != std::string::npos);
  REQUIRE(better != std::string::npos);
  CHECK(sig < better);
  CHECK(better < table);
  CHECK(md.find("**grew**") != std::string::npos);
}

TEST_CASE("The HTML report is well formed, escapes text and draws every run", "[report]") {
  World w;
  auto html = RenderHtml(BuildReport(w.store, 0, "7d", {}).value());
  testing::TempDir dir;
  REQUIRE(WriteFile(dir / "report.html", html));
  std::string out;
  CHECK(HtmlWellFormed(dir / "report.html", &out));
  INFO(out);
  CHECK(html.find("wider layer &lt;b&gt;") != std::string::npos);
  CHECK(html.find("<b>") != std::string::npos);  // our own markup only
  size_t circles = 0;
  for (size_t p = html.find("<circle"); p != std::string::npos; p = html.find("<circle", p + 1)) {
    ++circles;
  }
  CHECK(circles == 15 + 3);  // one per run, one per batch in the spread chart
  // Issue 38.9: the y ticks are round numbers, one 1-2-5 step apart.
  std::regex tick(R"re(<text class="ytick"[^>]*>([-0-9.]+)</text>)re");
  std::vector<double> ticks;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tick); it != std::sregex_iterator();
       ++it) {
    ticks.push_back(std::stod((*it)[1].str()));
  }
  REQUIRE(ticks.size() >= 3);
  const double step = ticks[1] - ticks[0];
  const double mag = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / mag;
  INFO("first step " << step);
  CHECK((std::fabs(m - 1) < 1e-6 || std::fabs(m - 2) < 1e-6 || std::fabs(m - 5) < 1e-6));
  // The first chart's first three ticks (each chart has 3 at least).
  CHECK(std::fabs(ticks[2] - ticks[1] - step) < step * 1e-6);
  for (int i = 0; i < 3; ++i) CHECK(std::fabs(ticks[i] / step - std::round(ticks[i] / step)) < 1e-6);
}

TEST_CASE("The JSON report and runs.csv hold every run", "[report]") {
  World w;
  auto r = BuildReport(w.store, 0, "7d", {}).value();
  auto j = nlohmann::json::parse(RenderJson(r));
  REQUIRE(j["experiments"].size() == 1);
  auto batches = j["experiments"][0]["batches"];
  REQUIRE(batches.size() == 3);
  CHECK(batches[1]["vs_parent"]["verdict"] == "better");
  CHECK(batches[0]["vs_parent"].is_null());
  CHECK(batches[2]["spread_grew"] == true);
  auto csv = RenderRunsCsv(r);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 16);  // header + 15 runs
  CHECK(csv.find("digits,1," + kA + ",1,0,succeeded,1,accuracy,0.900000,") != std::string::npos);
}

TEST_CASE("SpreadGrowthP is a one-sided F-test", "[report]") {
  // F = var(later) / var(earlier) = 4 with df (4, 4). Worked by hand: the F(4,4)
  // CDF at F is the regularized incomplete beta I_x(2, 2) = 3x^2 - 2x^3 with
  // x = 4F / (4F + 4) = 0.8, so the upper tail is 1 - (1.92 - 1.024) = 0.104.
  std::vector<double> earlier = {1, 2, 3, 4, 5};
  std::vector<double> later = {2, 4, 6, 8, 10};
  CHECK(SpreadGrowthP(earlier, later) == Approx(0.104).epsilon(1e-9));
  CHECK(SpreadGrowthP(later, earlier) > 0.5);
  CHECK(SpreadGrowthP({1}, later) == 1);
  CHECK(SpreadGrowthP({1, 1, 1}, later) == 1);
}

TEST_CASE("The report follows the default branch's first parents: an unmerged pull request's "
          "head is not a significant change, and a reused batch is listed once (issue 38.6)",
          "[report][branch]") {
  testing::TempDir dir;
  testing::GitCli git(dir / "work");
  std::string a = git.Commit({{"x", "1"}}, "base");
  git.Run("checkout -q -b pr");
  std::string pr = git.Commit({{"x", "2"}}, "pr head, never merged");
  git.Run("checkout -q main");
  std::string b = git.Commit({{"x", "3"}}, "merged change");
  std::string c = git.Commit({{"README.md", "docs"}}, "docs only");
  Store store = Store::Open(dir / "t.db").value();
  auto batch = [&](const std::string& sha, const std::string& parent,
                   const std::vector<double>& values, TimeMs at) {
    CommitInfo ci{sha, parent, "s", "me", 0};
    BatchSpec s;
    s.experiment = "digits";
    s.command = "true";
    s.repeats = static_cast<int>(values.size());
    auto r = store.runs().Submit(git.dir(), ci, {s}, at);
    REQUIRE(r);
    auto leased = store.runs().Lease("w", at, 60'000, 10).value();
    for (const auto& l : leased) {
      REQUIRE(store.runs().Complete(l.run_id, l.token, at, values[static_cast<size_t>(l.repeat)]));
    }
    return r->front().batch_id;
  };
  batch(a, "", {0.90, 0.91, 0.92, 0.905, 0.915}, kT0);
  batch(pr, a, {0.80, 0.81, 0.82, 0.805, 0.815}, kT0 + 1000);  // much worse, unmerged
  std::int64_t at_b = batch(b, a, {0.93, 0.94, 0.95, 0.935, 0.945}, kT0 + 2000);
  REQUIRE(store.runs().ReuseBatch(git.dir(), {c, b, "docs only", "me", 0}, "digits", at_b,
                                  "same inputs", kT0 + 3000));

  auto r = BuildReport(store, 0, "all", {}).value();
  REQUIRE(r.experiments.size() == 1);
  std::vector<std::string> shas;
  for (const auto& e : r.experiments[0].entries) shas.push_back(e.batch.sha);
  CHECK(shas == std::vector<std::string>{a, b});
  CHECK(r.experiments[0].entries[1].reused_at == std::vector<std::string>{c});
  CHECK(r.off_branch == 1);
  CHECK(r.branches.begin()->second == "main");
  auto md = RenderMarkdown(r);
  INFO(md);
  CHECK(md.find(pr.substr(0, 7)) == std::string::npos);
  CHECK(md.find("**digits** at `" + b.substr(0, 7) + "`") != std::string::npos);
  CHECK(md.find("1 batch of commits off the branch") != std::string::npos);
  CHECK(md.find("reused unchanged at " + c.substr(0, 7)) != std::string::npos);
}
