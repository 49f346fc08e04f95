// One commit as `trainq show --json` and the dashboard's commit page see it
// (agent/results/commit_view.h): here, a commit where nothing ran.
#include "agent/results/commit_view.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "queue/pushes.h"
#include "queue/store.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

TEST_CASE("commit view: a commit where nothing ran carries each push's result and the "
          "statuses it posted (the docs-only commit's page says why)",
          "[commit_view]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "q.db").value();
  Pushes::Push p;
  p.source = "github";
  p.delivery_id = "d1";
  p.repo_url = "https://example.com/acme/model.git";
  p.ref = "refs/heads/main";
  p.before_sha = std::string(40, 'b');
  p.after_sha = "abcd" + std::string(36, 'e');
  const auto id = store.pushes().RecordPush(p, 1000).value().value();
  REQUIRE(store.pushes().FinishPush(id, "done", "no watched path or experiment changed", "", 1001));
  Pushes::CommitStatus s;
  s.push_id = id;
  s.repo_url = p.repo_url;
  s.sha = p.after_sha;
  s.context = "trainq/mlp";
  s.state = "success";
  s.description = "no watched path or experiment changed";
  REQUIRE(store.pushes().AddPushStatus(s, 1001));

  auto view = LoadCommitView(store, "abcd");
  REQUIRE(view);
  const auto& j = *view;
  CHECK(j["batches"].empty());
  REQUIRE(j["pushes"].size() == 1);
  CHECK(j["pushes"][0]["result"] == "no watched path or experiment changed");
  REQUIRE(j["pushes"][0]["statuses"].size() == 1);
  CHECK(j["pushes"][0]["statuses"][0]["context"] == "trainq/mlp");
  CHECK(j["pushes"][0]["statuses"][0]["wanted"] == "success");
  CHECK(j["pushes"][0]["statuses"][0]["description"] == "no watched path or experiment changed");
}

}  // namespace
}  // namespace trainq
