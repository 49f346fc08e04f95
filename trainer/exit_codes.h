// Exit codes of trainq-train, shared by the command line (cli.h, main.cc) and
// the training code (TrainFailure::exit_code), so that neither includes the other.
#pragma once

namespace trainq::trainer {

inline constexpr int kExitOk = 0;
inline constexpr int kExitTrainingFailed = 1;
inline constexpr int kExitBadSpec = 2;
inline constexpr int kExitDataError = 3;
// distributed: a rank failed, exited or went silent past the timeout; every rank exits with it.
inline constexpr int kExitDistributed = 4;

}  // namespace trainq::trainer
