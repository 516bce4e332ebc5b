#!/usr/bin/env bash
# CI for the VS Code extension, on a fresh machine: installs what it needs, compiles, runs the unit
# tests (node --test), packages the .vsix (vsce) and runs the end-to-end test in code-server +
# Chromium against the real server. Exits non-zero if anything failed.
#
# Environment: MEMOSIGHT_PYTHON (Python with the server's dependencies; default <repo>/.venv/bin/python),
# MEMOSIGHT_E2E_MODEL (model folder for the e2e; default: the embedded default model if it is
# present, else a tiny random model made by make_tiny_model.py), SKIP_E2E=1 (unit tests only).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
E2E="$HERE/.e2e"
CODE_SERVER_VERSION=4.100.3
export MEMOSIGHT_PYTHON="${MEMOSIGHT_PYTHON:-$REPO/.venv/bin/python}"
# Each test's server serves in its own process and leaves with its editor: a model host kept
# after each (host_process/) would carry one test's model into the next and outlive the run.
export MEMOSIGHT_KEEP_ALIVE="${MEMOSIGHT_KEEP_ALIVE:-0}"
START=$SECONDS
FAILED=()

step() { echo; echo "== $1 (t=$((SECONDS - START)) s)"; }
fail() { echo "!! $1"; FAILED+=("$1"); }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

cd "$HERE" || exit 1
mkdir -p "$E2E"

step "system packages (chromium, libkrb5-dev, ripgrep)"
if command -v chromium >/dev/null && command -v rg >/dev/null && [ -e /usr/include/gssapi/gssapi.h ]; then
  echo "already installed"
else
  as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq \
    chromium libkrb5-dev ripgrep >"$E2E/apt.log" 2>&1 || { cat "$E2E/apt.log"; fail "apt-get install"; }
fi

step "npm ci"
npm ci --no-audit --no-fund || { echo "npm ci failed"; exit 1; }

step "code-server $CODE_SERVER_VERSION"
CS_DIR="$E2E/code-server"
# Private config/data folders: code-server writes a config file into XDG_CONFIG_HOME on any start.
export XDG_CONFIG_HOME="$E2E/xdg-config" XDG_DATA_HOME="$E2E/xdg-data"
if "$CS_DIR/node_modules/.bin/code-server" --version 2>/dev/null | grep -q "^$CODE_SERVER_VERSION "; then
  echo "already installed"
else
  rm -rf "$CS_DIR" && mkdir -p "$CS_DIR" "$E2E/tmp"
  # @vscode/ripgrep's postinstall downloads rg from GitHub unless its cache holds the archive:
  # seed the cache with Debian's rg.
  RG_CACHE="$E2E/tmp/vscode-ripgrep-cache-1.15.11"
  mkdir -p "$RG_CACHE" "$E2E/tmp/rg" && cp "$(command -v rg)" "$E2E/tmp/rg/rg" &&
    tar -czf "$RG_CACHE/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" -C "$E2E/tmp/rg" rg
  echo '{"name": "memosight-e2e-code-server", "private": true}' >"$CS_DIR/package.json"
  # code-server's postinstall builds native modules (node-pty through `npx node-gyp`, kerberos);
  # npm 11 skips dependency install scripts unless allowed.
  (cd "$CS_DIR" && TMPDIR="$E2E/tmp" npm_config_yes=true npm_config_unsafe_perm=true \
    npm_config_nodedir=/usr npm_config_dangerously_allow_all_scripts=true \
    npm install --no-audit --no-fund "code-server@$CODE_SERVER_VERSION" >"$E2E/code-server-install.log" 2>&1) ||
    { tail -40 "$E2E/code-server-install.log"; fail "code-server install"; }
fi

step "compile (tsc, strict)"
npx tsc -p . || fail "compile"

step "unit tests (node --test)"
if node --test out/test/unit/ >"$E2E/unit.log" 2>&1; then
  grep -E '^# (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) ' "$E2E/unit.log"
else
  cat "$E2E/unit.log"; fail "unit tests"
fi

step "package (vsce)"
VSIX="$E2E/memosight.vsix"
npx @vscode/vsce package --out "$VSIX" 2>&1 | grep -E 'DONE|ERROR|WARNING' ; [ "${PIPESTATUS[0]}" = 0 ] || fail "vsce package"

if [ "${SKIP_E2E:-0}" != 1 ]; then
  step "e2e model"
  if [ -z "${MEMOSIGHT_E2E_MODEL:-}" ]; then
    if [ -f "$REPO/memosight_lsp/models/default/config.json" ]; then
      export MEMOSIGHT_E2E_MODEL=default
    else
      export MEMOSIGHT_E2E_MODEL="$E2E/tiny-model"
      [ -f "$MEMOSIGHT_E2E_MODEL/config.json" ] ||
        PYTHONPATH="$REPO" "$MEMOSIGHT_PYTHON" scripts/make_tiny_model.py "$MEMOSIGHT_E2E_MODEL" || fail "tiny model"
    fi
  fi
  echo "model: $MEMOSIGHT_E2E_MODEL"

  step "e2e (code-server + chromium + real server)"
  node out/e2e/run.js "$VSIX" || fail "e2e"
fi

echo
echo "== VS Code CI done in $((SECONDS - START)) s"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "FAILED: ${FAILED[*]}"
  exit 1
fi
echo "all passed"
