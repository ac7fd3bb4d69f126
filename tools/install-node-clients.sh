#!/bin/sh
# Installs the npm packages the e2e suite drives knapd with
# (@kubernetes/client-node, pinned by tests/e2e/node/package-lock.json) into
# tests/e2e/node/node_modules with `npm ci`. Needs node and npm (Node 20).
# Does nothing when the locked version is already installed.
set -eu
dir="$(cd "$(dirname "$0")/.." && pwd)/tests/e2e/node"
cd "$dir"
if node -e '
  const want = require("./package-lock.json").packages["node_modules/@kubernetes/client-node"].version;
  const have = require("./node_modules/@kubernetes/client-node/package.json").version;
  process.exit(want === have ? 0 : 1);' 2>/dev/null; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
