// Result<T>: the one way trainq code reports an expected failure.
//
// An Error carries a kind, which tells callers whether to retry (unavailable,
// timeout) or give up (everything else), and a message written for the user:
// it names the file, line, field or request at fault.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace trainq {

enum class ErrorKind {
  kInvalidArgument,
  kNotFound,
  kConflict,
  kUnavailable,
  kTimeout,
  kIo,
  kCorruption,
  kInternal,
};

std::string_view ErrorKindName(ErrorKind kind);

struct Error {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;

  bool retryable() const { return kind == ErrorKind::kUnavailable || kind == ErrorKind::kTimeout; }
  // Returns a copy whose message is "<context>: <message>".
  Error Wrap(std::string_view context) const;
};

// [[nodiscard]]: a Result dropped on the floor is a failure nobody hears of.
// Where ignoring one is right (best effort), say so with (void) and a reason.
template <typename T>
class [[nodiscard]] Result : public std::expected<T, Error> {
 public:
  using std::expected<T, Error>::expected;
  Result(const std::expected<T, Error>& e) : std::expected<T, Error>(e) {}
  Result(std::expected<T, Error>&& e) : std::expected<T, Error>(std::move(e)) {}
};
using Status = Result<void>;

inline std::unexpected<Error> Fail(ErrorKind kind, std::string message) {
  return std::unexpected<Error>(Error{kind, std::move(message)});
}

}  // namespace trainq

// TRY(expr): evaluates a Result<void>-like expression and returns its error
// from the enclosing function. ASSIGN_OR_RETURN(lhs, expr) does the same and
// moves the value into lhs.
#define TRAINQ_CONCAT_INNER(a, b) a##b
#define TRAINQ_CONCAT(a, b) TRAINQ_CONCAT_INNER(a, b)
#define TRY(expr)                                              \
  do {                                                         \
    auto trainq_try_result = (expr);                           \
    if (!trainq_try_result) {                                  \
      return std::unexpected(std::move(trainq_try_result).error()); \
    }                                                          \
  } while (0)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)         \
  auto tmp = (expr);                                  \
  if (!tmp) return std::unexpected(std::move(tmp).error()); \
  lhs = std::move(*tmp)
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(TRAINQ_CONCAT(trainq_aor_, __LINE__), lhs, expr)
