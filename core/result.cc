#include "core/result.h"

namespace trainq {

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid_argument";
    case ErrorKind::kNotFound: return "not_found";
    case ErrorKind::kConflict: return "conflict";
    case ErrorKind::kUnavailable: return "unavailable";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kIo: return "io";
    case ErrorKind::kCorruption: return "corruption";
    case ErrorKind::kInternal: return "internal";
  }
  return "internal";
}

Error Error::Wrap(std::string_view context) const {
  return Error{kind, std::string(context) + ": " + message};
}

}  // namespace trainq
