#!/usr/bin/env bash
# Installs what Peregrine needs on a fresh Debian machine, from Debian's packages: PHP 8.2 CLI
# with OPcache, libphp8.2-embed and php8.2-dev (the native runtime is built against them),
# PHPUnit and the PSR-7/PSR-17 libraries, curl (the HTTP/2 end-to-end tests), and what the
# integration suite runs for real (WordPress with the MariaDB client, Laravel, Symfony, Slim,
# SQLite, and nginx + PHP-FPM, which the WordPress journey is compared with step by step; Redis
# and NATS, which the jobs tests start themselves when they are not running; dpkg and composer,
# which make deb and its test use; curl and pgsql, which the concurrency tests measure; chromium,
# headless, which opens examples/chat in the integration suite; valgrind and strace, which the
# native tests run the runtime under); then
# the Go modules, with the tools go.mod lists (h2spec, pebble). Safe to run again: it installs
# only what is missing, and starts or enables no service (the tests run nginx and php-fpm8.2
# themselves, in the foreground, with configs of their own).
set -euo pipefail

packages=(php8.2-cli php8.2-opcache phpunit php-nyholm-psr7 php-psr-http-message php-psr-http-factory libphp8.2-embed php8.2-dev curl
  wordpress wordpress-theme-twentytwentythree mariadb-client nginx php8.2-fpm
  php-laravel-framework php8.2-sqlite3 php-symfony-runtime php-symfony-framework-bundle php-symfony-security-bundle php-symfony-dotenv php-slim
  redis-server nats-server php-psr-simple-cache php-amphp-amp php-redis
  dpkg composer php8.2-curl php8.2-pgsql chromium valgrind strace)
"$(dirname "$0")/install-packages.sh" setup "${packages[@]}"
go mod download
