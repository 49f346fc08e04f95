#include "agent/repo/git_repo.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/agent/agent_test_util.h"
#include "tests/support/git_fixture.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;

namespace trainq {
namespace {

using testing::Slurp;
using testing::Spit;

// A repository with two commits:
//   c1: a.txt = "one", sub/deep.txt = "deep"
//   c2: a.txt = "two", b.txt = "new"
struct TwoCommits {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string c1 = git.Commit({{"a.txt", "one\n"}, {"sub/deep.txt", "deep\n"}}, "first commit");
  std::string c2 = git.Commit({{"a.txt", "two\n"}, {"b.txt", "new\n"}}, "second commit\n\nbody");

  GitRepo Open() {
    auto r = GitRepo::Open(git.dir());
    REQUIRE(r.has_value());
    return std::move(*r);
  }
};

TEST_CASE("git: Open gives the canonical location of the work tree", "[git]") {
  TwoCommits t;
  auto repo = t.Open();
  CHECK(repo.location() == fs::canonical(t.git.dir()).string());
  // A trailing slash or a ./ detour names the same repository.
  auto again = GitRepo::Open(t.git.dir() + "/./");
  REQUIRE(again.has_value());
  CHECK(again->location() == repo.location());
}

TEST_CASE("git: Resolve HEAD, HEAD~1, a short sha, a branch and a tag", "[git]") {
  TwoCommits t;
  REQUIRE(t.c1.size() == 40);
  REQUIRE(t.c1 != t.c2);
  // Branches and tags as loose refs, written the way git writes them.
  Spit(fs::path(t.git.dir()) / ".git/refs/heads/feature", t.c1 + "\n");
  fs::create_directories(fs::path(t.git.dir()) / ".git/refs/tags");
  Spit(fs::path(t.git.dir()) / ".git/refs/tags/v1", t.c2 + "\n");
  auto repo = t.Open();

  auto head = repo.Resolve("HEAD");
  REQUIRE(head.has_value());
  CHECK(head->sha == t.c2);
  CHECK(head->parent_sha == t.c1);
  CHECK(head->message == "second commit");  // the subject line only
  CHECK(head->author == "Test");
  CHECK(head->committed_ms == 1'700'000'000'000);

  auto prev = repo.Resolve("HEAD~1");
  REQUIRE(prev.has_value());
  CHECK(prev->sha == t.c1);
  CHECK(prev->parent_sha.empty());  // a root commit
  CHECK(prev->message == "first commit");

  auto short_sha = repo.Resolve(t.c1.substr(0, 7));
  REQUIRE(short_sha.has_value());
  CHECK(short_sha->sha == t.c1);

  auto full = repo.Resolve(t.c2);
  REQUIRE(full.has_value());
  CHECK(full->sha == t.c2);

  auto branch = repo.Resolve("feature");
  REQUIRE(branch.has_value());
  CHECK(branch->sha == t.c1);

  auto tag = repo.Resolve("v1");
  REQUIRE(tag.has_value());
  CHECK(tag->sha == t.c2);

  // The default branch HEAD points at, by its name.
  std::string head_ref = Slurp(fs::path(t.git.dir()) / ".git/HEAD");
  REQUIRE(head_ref.rfind("ref: refs/heads/", 0) == 0);
  std::string default_branch = head_ref.substr(16, head_ref.find('\n') - 16);
  auto def = repo.Resolve(default_branch);
  REQUIRE(def.has_value());
  CHECK(def->sha == t.c2);
}

TEST_CASE("git: an unknown revision is a clear kNotFound error", "[git][errors]") {
  TwoCommits t;
  auto repo = t.Open();
  auto r = repo.Resolve("no-such-branch");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == ErrorKind::kNotFound);
  CHECK_THAT(r.error().message, Catch::Contains("unknown revision 'no-such-branch'"));
  CHECK_THAT(r.error().message, Catch::Contains(repo.location()));

  auto too_far = repo.Resolve("HEAD~5");
  REQUIRE_FALSE(too_far.has_value());
  CHECK_THAT(too_far.error().message, Catch::Contains("HEAD~5"));

  // A tree is an object but not a commit.
  auto tree = repo.Resolve("HEAD^{tree}");
  REQUIRE_FALSE(tree.has_value());
  CHECK_THAT(tree.error().message, Catch::Contains("does not name a commit"));
}

TEST_CASE("git: a plain directory is not a repository", "[git][errors]") {
  testing::TempDir tmp;
  fs::create_directories(tmp.path() / "plain");
  auto r = GitRepo::Open(tmp / "plain");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == ErrorKind::kInvalidArgument);
  CHECK_THAT(r.error().message, Catch::StartsWith(tmp / "plain"));
  CHECK_THAT(r.error().message, Catch::Contains("not a git repository"));

  auto missing = GitRepo::Open(tmp / "missing");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().kind == ErrorKind::kNotFound);
  CHECK_THAT(missing.error().message, Catch::Contains("no such directory"));
}

TEST_CASE("git: a subdirectory of a work tree is not taken for the repository", "[git][errors]") {
  TwoCommits t;
  auto r = GitRepo::Open(t.git.dir() + "/sub");
  REQUIRE_FALSE(r.has_value());
  CHECK_THAT(r.error().message, Catch::Contains("not a git repository"));
}

TEST_CASE("git: ReadFile reads each commit's version of a file", "[git]") {
  TwoCommits t;
  auto repo = t.Open();
  auto a1 = repo.ReadFile(t.c1, "a.txt");
  auto a2 = repo.ReadFile(t.c2, "a.txt");
  REQUIRE(a1.has_value());
  REQUIRE(a2.has_value());
  CHECK(*a1 == "one\n");
  CHECK(*a2 == "two\n");
  auto deep = repo.ReadFile(t.c2, "sub/deep.txt");  // unchanged since c1
  REQUIRE(deep.has_value());
  CHECK(*deep == "deep\n");

  // b.txt came with c2.
  auto b1 = repo.ReadFile(t.c1, "b.txt");
  REQUIRE_FALSE(b1.has_value());
  CHECK(b1.error().kind == ErrorKind::kNotFound);
  CHECK_THAT(b1.error().message, Catch::Contains("b.txt not found at commit " + t.c1.substr(0, 12)));
  CHECK(repo.ReadFile(t.c2, "b.txt").value_or("") == "new\n");

  auto missing = repo.ReadFile(t.c2, "trainq.yaml");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().kind == ErrorKind::kNotFound);

  auto dir = repo.ReadFile(t.c2, "sub");
  REQUIRE_FALSE(dir.has_value());
  CHECK_THAT(dir.error().message, Catch::Contains("is not a file"));

  auto bad = repo.ReadFile("not-a-sha", "a.txt");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().kind == ErrorKind::kInvalidArgument);

  auto absent = repo.ReadFile(std::string(40, 'a'), "a.txt");
  REQUIRE_FALSE(absent.has_value());
  CHECK(absent.error().kind == ErrorKind::kNotFound);
}

TEST_CASE("git: the working tree does not leak into ReadFile", "[git]") {
  TwoCommits t;
  Spit(fs::path(t.git.dir()) / "a.txt", "uncommitted\n");
  auto repo = t.Open();
  CHECK(repo.ReadFile(t.c2, "a.txt").value_or("") == "two\n");
}

TEST_CASE("git: CheckoutTo writes the commit's tree and leaves the repository alone", "[git]") {
  TwoCommits t;
  fs::path work = t.git.dir();
  // The user has uncommitted edits and an untracked file.
  Spit(work / "a.txt", "user edit\n");
  Spit(work / "untracked.txt", "mine\n");
  std::string head_before = Slurp(work / ".git/HEAD");
  std::string index_before = Slurp(work / ".git/index");
  REQUIRE_FALSE(index_before.empty());
  auto repo = t.Open();

  testing::TempDir out;
  fs::path target = out.path() / "checkouts" / "c1";  // created, with parents
  auto st = repo.CheckoutTo(t.c1, target.string());
  REQUIRE(st.has_value());
  CHECK(Slurp(target / "a.txt") == "one\n");
  CHECK(Slurp(target / "sub/deep.txt") == "deep\n");
  CHECK_FALSE(fs::exists(target / "b.txt"));
  CHECK_FALSE(fs::exists(target / "untracked.txt"));
  CHECK_FALSE(fs::exists(target / ".git"));

  // The repository: same HEAD, same index, same working files.
  CHECK(Slurp(work / ".git/HEAD") == head_before);
  CHECK(Slurp(work / ".git/index") == index_before);
  CHECK(Slurp(work / "a.txt") == "user edit\n");
  CHECK(Slurp(work / "b.txt") == "new\n");
  CHECK(Slurp(work / "untracked.txt") == "mine\n");
  CHECK(repo.Resolve("HEAD").value().sha == t.c2);

  // A second checkout of the other commit into another directory.
  fs::path target2 = out.path() / "c2";
  REQUIRE(repo.CheckoutTo(t.c2, target2.string()).has_value());
  CHECK(Slurp(target2 / "a.txt") == "two\n");
  CHECK(Slurp(target2 / "b.txt") == "new\n");
  CHECK(Slurp(target / "a.txt") == "one\n");  // the first checkout is untouched

  // Checking out over an existing, modified directory restores the commit's files.
  Spit(target / "a.txt", "scribbled\n");
  fs::remove(target / "sub/deep.txt");
  REQUIRE(repo.CheckoutTo(t.c1, target.string()).has_value());
  CHECK(Slurp(target / "a.txt") == "one\n");
  CHECK(Slurp(target / "sub/deep.txt") == "deep\n");
  CHECK(Slurp(work / ".git/index") == index_before);
  CHECK(Slurp(work / "a.txt") == "user edit\n");
}

TEST_CASE("git: CheckoutTo an unknown commit fails without creating files", "[git][errors]") {
  TwoCommits t;
  auto repo = t.Open();
  testing::TempDir out;
  auto st = repo.CheckoutTo(std::string(40, 'b'), out / "x");
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().kind == ErrorKind::kNotFound);
  CHECK_FALSE(fs::exists(out.path() / "x"));
  auto bad = repo.CheckoutTo("zzz", out / "y");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().kind == ErrorKind::kInvalidArgument);
}

TEST_CASE("git: a repository handle can be moved", "[git]") {
  TwoCommits t;
  auto repo = t.Open();
  GitRepo moved = std::move(repo);
  CHECK(moved.Resolve("HEAD").value().sha == t.c2);
  auto other = GitRepo::Open(t.git.dir());
  REQUIRE(other.has_value());
  moved = std::move(*other);
  CHECK(moved.ReadFile(t.c1, "a.txt").value_or("") == "one\n");
}

TEST_CASE("git: PackCommit carries a commit's whole tree, and only it, to another repository",
          "[git]") {
  TwoCommits t;
  fs::path work = t.git.dir();
  // An executable script and a symlink, staged from the working tree's modes.
  fs::create_directories(work / "bin");
  Spit(work / "bin/train.sh", "#!/bin/sh\necho hi\n");
  fs::permissions(work / "bin/train.sh", fs::perms::owner_exec, fs::perm_options::add);
  fs::create_symlink("a.txt", work / "link.txt");
  std::string c3 = t.git.Commit({}, "script and link");
  auto repo = t.Open();
  auto pack = repo.PackCommit(c3);
  REQUIRE(pack.has_value());
  CHECK(pack->starts_with("PACK"));

  testing::TempDir other;
  auto bare = GitRepo::OpenOrInitBare(other / "source.git");
  REQUIRE(bare.has_value());
  CHECK_FALSE(bare->HasCommit(c3));
  REQUIRE(bare->AddPack(*pack).has_value());
  CHECK(bare->HasCommit(c3));
  CHECK_FALSE(bare->HasCommit(t.c2));  // the parent is named, not sent
  CHECK_FALSE(bare->HasCommit(t.c1));

  fs::path target = other.path() / "checkout";
  REQUIRE(bare->CheckoutTo(c3, target.string()).has_value());
  CHECK(Slurp(target / "a.txt") == "two\n");
  CHECK(Slurp(target / "b.txt") == "new\n");
  CHECK(Slurp(target / "sub/deep.txt") == "deep\n");
  CHECK(Slurp(target / "bin/train.sh") == "#!/bin/sh\necho hi\n");
  CHECK((fs::status(target / "bin/train.sh").permissions() & fs::perms::owner_exec) !=
        fs::perms::none);
  CHECK(fs::is_symlink(target / "link.txt"));
  CHECK(fs::read_symlink(target / "link.txt") == "a.txt");

  // Reopening finds the objects; a second pack of the same commit adds nothing wrong.
  auto again = GitRepo::OpenOrInitBare(other / "source.git");
  REQUIRE(again.has_value());
  CHECK(again->HasCommit(c3));
  CHECK(again->AddPack(*pack).has_value());
}

TEST_CASE("git: a damaged packfile is refused, and an unknown commit is not packed",
          "[git][errors]") {
  TwoCommits t;
  auto repo = t.Open();
  auto pack = repo.PackCommit(t.c2);
  REQUIRE(pack.has_value());
  testing::TempDir other;
  auto bare = GitRepo::OpenOrInitBare(other / "source.git");
  REQUIRE(bare.has_value());

  std::string damaged = *pack;
  damaged[damaged.size() / 2] ^= 0x5a;
  auto st = bare->AddPack(damaged);
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().kind == ErrorKind::kCorruption);
  CHECK_FALSE(bare->HasCommit(t.c2));
  auto cut = bare->AddPack(std::string_view(*pack).substr(0, pack->size() / 3));
  REQUIRE_FALSE(cut.has_value());
  CHECK_FALSE(bare->HasCommit(t.c2));

  auto unknown = repo.PackCommit(std::string(40, 'd'));
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().kind == ErrorKind::kNotFound);
}

}  // namespace
}  // namespace trainq
