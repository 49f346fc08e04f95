// Small string, time and file helpers shared by every folder.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq {

std::string_view Trim(std::string_view s);
std::vector<std::string> Split(std::string_view s, char sep);
bool StartsWith(std::string_view s, std::string_view prefix);
// ASCII lower case (header names, forge names, hex).
std::string Lower(std::string_view s);
// `s` on one line (newlines and carriage returns as spaces), at most `max`
// bytes ("..." at the end when cut): an error or a command in a table cell.
std::string OneLine(std::string s, std::size_t max);

// A commit id as people read it: its first `chars` characters. 10 in logs,
// commit statuses, pull request comments and the commands' output; 7 (git's
// own abbreviation) in reports, baselines and the gate's lines.
inline constexpr std::size_t kShortShaChars = 10;
inline constexpr std::size_t kReportShaChars = 7;
std::string ShortSha(std::string_view sha, std::size_t chars = kShortShaChars);

// "90" or "90s", "15m", "2h", "1d", "1h30m" -> seconds.
Result<std::int64_t> ParseDurationSeconds(std::string_view text);
// 3725000 ms -> "1h02m05s"; under a minute -> "42s"; under a second -> "0s".
std::string FormatDuration(std::int64_t ms);
// Milliseconds since the epoch -> "2026-11-22 10:04:05" in UTC.
std::string FormatTimestamp(std::int64_t ms);

// Replaces each "{key}" placeholder (core/placeholders.h) in `text` with
// vars[key]; unknown keys and the shell's ${VAR} are left alone.
std::string Substitute(std::string_view text, const std::map<std::string, std::string>& vars);

// `s` as HTML text or a double-quoted attribute value: & < > " escaped.
std::string HtmlEscape(std::string_view s);

// Quotes `s` for /bin/sh.
std::string ShellQuote(std::string_view s);

// Fixed-precision formatting without locale surprises: FormatDouble(0.66421, 4) == "0.6642".
std::string FormatDouble(double v, int precision);

Result<std::string> ReadFile(const std::string& path);
// Replaces `path` with `contents`. Every write and the close are checked (a
// full disk often shows only at close): an error names the path and the
// reason ("No space left on device").
Status WriteFile(const std::string& path, std::string_view contents);
// WriteFile for what must survive a crash or a power cut once this returns:
// the bytes go to `path`.tmp, which is fsynced, closed and renamed over
// `path`, and then the directory is fsynced. On any error `path` keeps its
// old contents (or stays absent) and the temporary file is removed.
Status WriteFileDurably(const std::string& path, std::string_view contents);

}  // namespace trainq
