#!/usr/bin/env bash
# Headless Chromium for the operator-console browser test (tests/console/test_browser.py).
# Debian's package, driven by Playwright's Python client; never `playwright install`.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
echo "[ensure_extra_chromium] installing chromium from Debian"
DEBIAN_FRONTEND=noninteractive apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
test -x /usr/bin/chromium
