#!/usr/bin/env bash
# Installs what Peregrine needs on a fresh Debian machine: PHP 8.2 CLI with OPcache, PHPUnit and
# the PSR-7/PSR-17 libraries from Debian's packages, and the Go modules. Safe to run again: it
# installs only what is missing.
set -euo pipefail

packages=(php8.2-cli php8.2-opcache phpunit php-nyholm-psr7 php-psr-http-message php-psr-http-factory)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
go mod download
