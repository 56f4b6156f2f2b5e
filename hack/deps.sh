#!/usr/bin/env bash
# Installs what the tests need beyond Go modules, on a fresh machine:
# the Debian packages listed in hack/debian-packages.txt (one per line,
# '#' starts a comment) and the npm packages of every package-lock.json
# listed in hack/npm-dirs.txt (npm ci, then the directory's "slim" script
# when package.json has one). It installs only what is missing, so a
# second run costs a few dpkg queries. Needs root (or sudo) for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

want=()
while read -r pkg; do
  pkg=${pkg%%#*}
  pkg=$(echo "$pkg" | xargs)
  [ -n "$pkg" ] || continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || want+=("$pkg")
done < hack/debian-packages.txt

if [ ${#want[@]} -gt 0 ]; then
  echo "deps: installing Debian packages: ${want[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi

if [ -f hack/npm-dirs.txt ]; then
  while read -r dir; do
    dir=${dir%%#*}
    dir=$(echo "$dir" | xargs)
    [ -n "$dir" ] || continue
    if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
      echo "deps: npm ci in $dir"
      # npm ci, then the package's "slim" script if it has one: it deletes
      # installed files the tests never read (ignore-scripts in .npmrc keeps
      # npm from running install hooks). npm ci rewrites
      # node_modules/.package-lock.json, which the test above compares with.
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error && npm run --if-present --silent slim)
    fi
  done < hack/npm-dirs.txt
fi
