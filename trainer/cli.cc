#include "trainer/cli.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <iostream>

namespace trainq::trainer {

Result<std::optional<Options>> ParseCommandLine(int argc, const char* const* argv,
                                                const std::function<const char*(const char*)>& getenv) {
  Options o;
  if (const char* s = getenv("TRAINQ_SEED"); s != nullptr && *s != '\0') {
    std::string_view v(s);
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), o.seed);
    if (ec != std::errc() || p != v.data() + v.size()) {
      return Fail(ErrorKind::kInvalidArgument, "TRAINQ_SEED='" + std::string(v) + "' is not a seed");
    }
  }
  if (const char* s = getenv("TRAINQ_METRICS_FILE")) o.metrics_file = s;
  if (const char* s = getenv("TRAINQ_OUTPUT_DIR")) o.output_dir = s;

  CLI::App app{"trainq-train: trains the model a YAML spec describes and writes its metrics"};
  app.add_option("spec", o.spec, "the spec file (YAML)")->required();
  app.add_option("--seed", o.seed, "run seed (default $TRAINQ_SEED, else 1)");
  app.add_option("--repeats", o.repeats, "train seeds seed..seed+K-1 fused in one process")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}));
  app.add_option("--device", o.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--metrics-file", o.metrics_file,
                 "JSON-lines metrics (default $TRAINQ_METRICS_FILE); {seed} and {repeat} are substituted");
  app.add_option("--output-dir", o.output_dir, "checkpoints and the merged spec (default $TRAINQ_OUTPUT_DIR)");
  app.add_option("--set", o.sets, "override a spec key: --set trainer.epochs=5 (repeatable)");
  app.add_option("--threads", o.threads, "intra-op CPU threads (default 1)")->check(CLI::Range(1, 1024));
  app.add_option("--fuse", o.fuse, "auto: fuse repeats into one batched model; off: run them one by one")
      ->check(CLI::IsMember({"auto", "off"}));
  app.add_flag("--print-spec", o.print_spec, "print the merged spec (templates and --set applied) and exit");
  app.add_flag("-q,--quiet", o.quiet, "no progress output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return std::optional<Options>();
  } catch (const CLI::ParseError& e) {
    return Fail(ErrorKind::kInvalidArgument, std::string(e.what()) + " (see trainq-train --help)");
  }
  return std::optional<Options>(o);
}

}  // namespace trainq::trainer
