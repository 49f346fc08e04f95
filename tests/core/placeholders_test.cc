#include "core/placeholders.h"

#include <catch2/catch.hpp>
#include <map>

#include "core/strings.h"

namespace trainq {
namespace {

std::vector<std::string> Names(std::string_view text) {
  std::vector<std::string> out;
  for (const auto& p : FindPlaceholders(text)) out.push_back(p.name);
  return out;
}

TEST_CASE("FindPlaceholders finds ours and leaves the shell's alone", "[placeholders]") {
  CHECK(Names("train --seed {seed} --lr {lr}") == std::vector<std::string>{"seed", "lr"});
  CHECK(Names("echo ${HOME} $PATH {out_dir}/x") == std::vector<std::string>{"out_dir"});
  CHECK(Names("echo ${seed}").empty());
  CHECK(Names("python -c 'd={}; e={\"a\": 1}' {seed").empty());
  CHECK(Names("awk '{print $1}'").empty());
  CHECK(Names("{optimizer.lr} {model-width} {9lives}") ==
        std::vector<std::string>{"optimizer.lr", "model-width"});
  CHECK(Names("{{seed}}") == std::vector<std::string>{"seed"});
  auto p = FindPlaceholders("a {bc} d");
  REQUIRE(p.size() == 1);
  CHECK(p[0].pos == 2);
  CHECK(p[0].size == 4);
}

TEST_CASE("FillPlaceholders replaces only names with a value", "[placeholders]") {
  auto value = [](const std::string& n) -> std::optional<std::string> {
    if (n == "lr") return "0.1";
    return std::nullopt;
  };
  CHECK(FillPlaceholders("--lr {lr} --seed {seed} ${lr} $lr", value) ==
        "--lr 0.1 --seed {seed} ${lr} $lr");
}

TEST_CASE("Substitute leaves the shell's dollar-brace variables alone", "[placeholders]") {
  // Regression (sweep branch 5917d78): ${VAR} used to be filled as $value.
  CHECK(Substitute("echo ${seed} {seed}", {{"seed", "3"}}) == "echo ${seed} 3");
}

}  // namespace
}  // namespace trainq
