#!/bin/sh
# The N longest functions in product code (everything git tracks outside
# tests/, bench/ and ci/), measured as code-review-turn3.md §3 did:
# universal-ctags function tags, length = end - line + 1, lambdas counted
# inside their enclosing function.  Usage: bench/longest_functions.sh [N]
set -eu
n=${1:-15}
cd "$(git rev-parse --show-toplevel)"
git ls-files '*.cc' '*.h' | grep -Ev '^(tests|bench|ci)/' |
  ctags --output-format=json --fields=+neKZS --c++-kinds=f -L - -o - 2>/dev/null |
  python3 -c '
import json, sys
rows = []
for line in sys.stdin:
    t = json.loads(line)
    if t.get("_type") != "tag" or "end" not in t or t["name"].startswith("__anon"):
        continue
    scope = t.get("scope", "")
    name = t["name"]
    if t.get("scopeKind") in ("class", "struct"):
        name = scope.split("::")[-1] + "::" + name
    rows.append((t["end"] - t["line"] + 1, name, "%s:%d" % (t["path"], t["line"])))
rows.sort(key=lambda r: -r[0])
for length, name, where in rows[:int(sys.argv[1])]:
    print("%5d  %-40s %s" % (length, name, where))
' "$n"
