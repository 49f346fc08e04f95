#!/bin/sh
# The dashboard's unit tests (tests/web/unit/*_test.mjs) under node's own
# runner; no npm packages. Exits 77 (ctest: skipped) when there is no node.
# Debian 12's nodejs is 18.x: the tests use only node:test and node:assert.
NODE=$(command -v node || command -v nodejs) || { echo "no node on PATH: skipped"; exit 77; }
cd "${0%/*}" || exit 1
"$NODE" --version
exec "$NODE" --test html_test.mjs format_test.mjs plot_test.mjs lint_test.mjs
