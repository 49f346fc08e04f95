// The usual mistakes in a repository's trainq.yaml, as commits: each must be
// refused before anything is queued, by `trainq submit` (cli_test.cc) and by
// the push pipeline (server_worker_test.cc), with the file, line and key.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace trainq::testing {

struct Mistake {
  std::string what;
  std::map<std::string, std::string> files;  // committed over a valid repository
  std::vector<std::string> expected;         // each must appear in the error
};

inline const char* kGoodSpec = R"(data:
  path: data.csv
model:
  layers:
    - {type: linear, out: 3}
trainer:
  epochs: 2
)";

inline std::string ManyExperiments(int n) {
  std::string y = "version: 1\nexperiments:\n";
  for (int i = 0; i < n; ++i) {
    y += "  e" + std::to_string(i) + ":\n    command: echo {seed}\n    repeats: 1\n";
  }
  return y;
}

inline std::vector<Mistake> Mistakes() {
  return {
      {"a trainer spec that is not in the commit",
       {{"trainq.yaml",
         "version: 1\nexperiments:\n  mlp:\n    trainer: configs/digit_mlp.yaml\n"}},
       {"trainq.yaml:4: experiments.mlp.trainer: configs/digit_mlp.yaml not found"}},
      {"an unknown key inside a trainer spec",
       {{"trainq.yaml", "version: 1\nexperiments:\n  mlp:\n    trainer: configs/mlp.yaml\n"},
        {"configs/mlp.yaml", std::string(kGoodSpec) + "optimizer:\n  type: sgd\n  learning_rate: 0.1\n"}},
       {"trainq.yaml:4: experiments.mlp.trainer: ", "configs/mlp.yaml:10: optimizer.learning_rate: unknown key"}},
      {"a trainer spec whose template is missing",
       {{"trainq.yaml", "version: 1\nexperiments:\n  mlp:\n    trainer: configs/mlp.yaml\n"},
        {"configs/mlp.yaml", "template: base.yaml\ntrainer: {epochs: 3}\n"}},
       {"trainq.yaml:4: experiments.mlp.trainer: configs/mlp.yaml:1: template",
        "configs/base.yaml"}},
      {"{sed} instead of {seed}",
       {{"trainq.yaml", "version: 1\nexperiments:\n  t:\n    command: python3 train.py --seed {sed}\n"}},
       {"trainq.yaml:4: experiments.t.command: unknown placeholder {sed} (known: {seed}, {repeat}, "
        "{run_id}, {output_dir})"}},
      {"a key written twice",
       {{"trainq.yaml",
         "version: 1\nexperiments:\n  t:\n    command: echo {seed}\n    repeats: 3\n    repeats: 5\n"}},
       {"trainq.yaml:6: experiments.t.repeats: duplicate key (first written at line 5"}},
      {"an unterminated quote",
       {{"trainq.yaml",
         "version: 1\nexperiments:\n  t:\n    command: echo 'unfinished {seed}\n"}},
       {"trainq.yaml:4: experiments.t.command: shell syntax error (sh -n): ",
        "Unterminated quoted string"}},
      {"an unterminated double quote (yaml-cpp alone reads it to the end of the file)",
       {{"trainq.yaml",
         "version: 1\nexperiments:\n  t:\n    command: \"./train.sh {seed}\n"}},
       {"trainq.yaml:4: invalid YAML: "}},
      {"a seed whose seeds pass INT64_MAX",
       {{"trainq.yaml",
         "version: 1\nexperiments:\n  t:\n    command: echo {seed}\n    repeats: 2\n"
         "    seed: 9223372036854775807\n"}},
       {"trainq.yaml:6: experiments.t.seed: expected a seed of at most 9223372036853775807"}},
      {"a watch glob with brackets",
       {{"trainq.yaml",
         "version: 1\nexperiments:\n  t:\n    command: echo {seed}\n    watch: [src/**, 'src/[ab].py']\n"}},
       {"trainq.yaml:5: experiments.t.watch: glob 'src/[ab].py': '[' is not supported"}},
      {"too many runs",
       {{"trainq.yaml", "version: 1\nexperiments:\n  t:\n    command: echo {seed}\n    repeats: 6000\n"}},
       {"trainq.yaml", "6000 runs in one submission, more than the limit of 5000", "nothing queued"}},
      {"too many experiments",
       {{"trainq.yaml", ManyExperiments(101)}},
       {"trainq.yaml", "101 experiments in one submission, more than the limit of 100"}},
      {"a trainq.yaml over 1 MiB",
       {{"trainq.yaml", ManyExperiments(30000)}},
       {"trainq.yaml: ", "bytes, more than the 1048576 allowed"}},
  };
}

}  // namespace trainq::testing
