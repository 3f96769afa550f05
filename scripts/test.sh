#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test suite with meson test.
# Extra arguments go to meson test (e.g. --suite tcp).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-torch.sh
scripts/build.sh
status=0
meson test -C build --print-errorlogs "$@" || status=$?
# One plain closing line with the counts.
python3 - <<'PY' || true
import json
counts = {"OK": 0, "FAIL": 0, "SKIP": 0, "TIMEOUT": 0, "EXPECTEDFAIL": 0, "UNEXPECTEDPASS": 0, "ERROR": 0}
with open("build/meson-logs/testlog.json") as f:
    for line in f:
        r = json.loads(line).get("result", "ERROR")
        counts[r] = counts.get(r, 0) + 1
failed = counts["FAIL"] + counts["TIMEOUT"] + counts["UNEXPECTEDPASS"] + counts["ERROR"]
print(f"{counts['OK'] + counts['EXPECTEDFAIL']} passed, {failed} failed, {counts['SKIP']} skipped")
PY
exit $status
