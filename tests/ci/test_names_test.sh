#!/bin/sh
# catch_discover_tests splits a Catch2 test name at ';', so a name with one
# becomes ctest tests that match nothing and never run. Fails, naming the
# suite and the test, when any suite given has such a name.
status=0
for suite in "$@"; do
  if "$suite" --list-test-names-only | grep -n ';'; then
    echo "$suite: the test name(s) above hold ';': ctest would run none of them"
    status=1
  fi
done
exit $status
