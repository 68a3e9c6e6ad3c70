#!/usr/bin/env bash
# Installs those of the Debian packages named on the command line that are missing, with
# apt-get (as root or through sudo), and starts or enables no service: a refusing policy-rc.d
# keeps the maintainer scripts from starting one (nginx, php8.2-fpm), and on a systemd machine
# the units of services installed here are disabled again (one that was there before is left
# alone). Used by scripts/setup.sh and bench/setup.sh. The first argument is the name the
# progress line says.
set -euo pipefail

who=$1
shift
missing=()
for p in "$@"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
((${#missing[@]})) || exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "$who: installing ${missing[*]}"

policy=/usr/sbin/policy-rc.d
added_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  added_policy=1
fi
trap '[ -z "$added_policy" ] || $sudo rm -f "$policy"' EXIT

$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  for p in "${missing[@]}"; do
    case "$p" in
      nginx) $sudo systemctl disable --now nginx.service >/dev/null 2>&1 || true ;;
      php8.2-fpm) $sudo systemctl disable --now php8.2-fpm.service >/dev/null 2>&1 || true ;;
    esac
  done
fi
