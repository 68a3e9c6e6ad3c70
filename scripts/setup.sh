#!/usr/bin/env bash
# Installs what Peregrine needs on a fresh Debian machine, from Debian's packages: PHP 8.2 CLI
# with OPcache, libphp8.2-embed and php8.2-dev (the native runtime is built against them),
# PHPUnit and the PSR-7/PSR-17 libraries, curl (the HTTP/2 end-to-end tests), and what the
# integration suite runs for real (WordPress with the MariaDB client, Laravel, Symfony, Slim,
# SQLite, and nginx + PHP-FPM, which the WordPress journey is compared with step by step); then
# the Go modules, with the tools go.mod lists (h2spec, pebble). Safe to run again: it installs
# only what is missing, and starts or enables no service (the tests run nginx and php-fpm8.2
# themselves, in the foreground, with configs of their own).
set -euo pipefail

packages=(php8.2-cli php8.2-opcache phpunit php-nyholm-psr7 php-psr-http-message php-psr-http-factory libphp8.2-embed php8.2-dev curl
  wordpress wordpress-theme-twentytwentythree mariadb-client nginx php8.2-fpm
  php-laravel-framework php8.2-sqlite3 php-symfony-runtime php-symfony-framework-bundle php-symfony-security-bundle php-symfony-dotenv php-slim)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  # Keep maintainer scripts from starting services (invoke-rc.d obeys policy-rc.d).
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
  # With systemd the packages also enable their units for the next boot: undo that for the
  # services installed here (one that was there before is left alone).
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for p in "${missing[@]}"; do
      case "$p" in
        nginx) $sudo systemctl disable --now nginx.service >/dev/null 2>&1 || true ;;
        php8.2-fpm) $sudo systemctl disable --now php8.2-fpm.service >/dev/null 2>&1 || true ;;
      esac
    done
  fi
fi
go mod download
