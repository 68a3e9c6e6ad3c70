#!/usr/bin/env bash
# Installs what `make bench` needs from Debian's packages, only what is missing: nginx, PHP-FPM,
# wrk, ab (apache2-utils), h2load (nghttp2-client), gnuplot, Slim 3, the Laravel framework and
# the Symfony 5.4 components examples/symfony runs on. The benchmark runs nginx and
# php-fpm8.2 itself, as foreground child processes with generated configs; this script keeps the
# packages' own system services from being started or enabled.
set -euo pipefail

packages=(nginx php8.2-fpm php8.2-cli php8.2-opcache wrk apache2-utils nghttp2-client gnuplot-nox php-slim
  php-laravel-framework php-nyholm-psr7 php-psr-http-message php-psr-http-factory
  php-symfony-framework-bundle php-symfony-security-bundle php-symfony-runtime php-symfony-dotenv)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
((${#missing[@]})) || exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "bench/setup.sh: installing ${missing[*]}"

# Keep the maintainer scripts from starting nginx or php8.2-fpm as services (invoke-rc.d obeys
# policy-rc.d): put a refusing policy in place for the install unless one is there already.
policy=/usr/sbin/policy-rc.d
added_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  added_policy=1
fi
cleanup() { if [ -n "$added_policy" ]; then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT

$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null

# On a machine with systemd the packages also enable their units for the next boot: undo that
# for the services this script installed (a service that was there before is left alone).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  for p in "${missing[@]}"; do
    case "$p" in
      nginx) $sudo systemctl disable --now nginx.service >/dev/null 2>&1 || true ;;
      php8.2-fpm) $sudo systemctl disable --now php8.2-fpm.service >/dev/null 2>&1 || true ;;
    esac
  done
fi
