#!/usr/bin/env bash
# Installs what `make bench` needs from Debian's packages, only what is missing: nginx, PHP-FPM,
# wrk, ab (apache2-utils), h2load (nghttp2-client), gnuplot, Slim 3, the Laravel framework and
# the Symfony 5.4 components examples/symfony runs on, and PDO's MySQL and PostgreSQL drivers
# and clients for the TechEmpower scenario, and MediaWiki (bench/apps/mediawiki/install.sh installs
# a wiki into the benchmark's temporary directory with SQLite). The benchmark runs nginx and
# php-fpm8.2 itself, as foreground child processes with generated configs; the packages' own
# system services are neither started nor enabled (scripts/install-packages.sh).
set -euo pipefail

packages=(nginx php8.2-fpm php8.2-cli php8.2-opcache wrk apache2-utils nghttp2-client gnuplot-nox php-slim
  php-laravel-framework php-nyholm-psr7 php-psr-http-message php-psr-http-factory
  php-symfony-framework-bundle php-symfony-security-bundle php-symfony-runtime php-symfony-dotenv
  php8.2-mysql php8.2-pgsql mariadb-client postgresql-client mediawiki php8.2-sqlite3)
"$(dirname "$0")/../scripts/install-packages.sh" bench/setup.sh "${packages[@]}"
