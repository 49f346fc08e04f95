// The cursor a sender of the outbox (notify.h, mlflow.h) keeps over finished
// runs: "(finished_ms):(run id)" of the last run its scan looked at, in one of
// the outbox's marks. Read here once for both.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"
#include "queue/outbox.h"
#include "queue/types.h"

namespace trainq {

struct RunCursor {
  TimeMs after_ms = 0;
  std::int64_t after_id = 0;
};

// The cursor in mark `name`. The first read ever (no mark) starts at `now` and
// records it: history from before the sender was set up is not news. A mark
// that does not parse starts at `now` too, rather than throwing.
inline Result<RunCursor> ReadRunCursor(Outbox& outbox, const std::string& name, TimeMs now) {
  ASSIGN_OR_RETURN(auto mark, outbox.Mark(name));
  RunCursor c{now, 0};
  if (!mark) {
    TRY(outbox.SetMark(name, std::to_string(now) + ":0", now));
    return c;
  }
  std::string_view text = *mark;
  const auto colon = text.find(':');
  const std::string_view ms = text.substr(0, colon);
  TimeMs after_ms = 0;
  if (std::from_chars(ms.data(), ms.data() + ms.size(), after_ms).ec != std::errc()) return c;
  std::int64_t after_id = 0;
  if (colon != std::string_view::npos) {
    const std::string_view id = text.substr(colon + 1);
    if (std::from_chars(id.data(), id.data() + id.size(), after_id).ec != std::errc()) after_id = 0;
  }
  return RunCursor{after_ms, after_id};
}

// Moves the cursor in mark `name` past `last`, the newest run a scan looked at.
inline Status WriteRunCursor(Outbox& outbox, const std::string& name, const RunCursor& from,
                             const RunRow& last, TimeMs now) {
  return outbox.SetMark(name,
                        std::to_string(last.finished_ms.value_or(from.after_ms)) + ":" +
                            std::to_string(last.id),
                        now);
}

}  // namespace trainq
