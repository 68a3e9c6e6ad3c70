#!/usr/bin/env bash
# Serves WordPress from Debian's `wordpress` package with Peregrine in classic mode, in one
# command: creates the database if it is missing, builds a site directory beside this script
# (hard links to Debian's files plus a wp-config.php of its own), then runs
# `bin/peregrine serve --root SITE`. README.md beside this script explains each step.
#
#   examples/wordpress/serve.sh                 # http://127.0.0.1:8080
#   ADDRESS=127.0.0.1:9000 examples/wordpress/serve.sh
#
# Settings (environment): ADDRESS, WORKERS (default: one per CPU), DB_NAME, DB_USER,
# DB_PASSWORD, DB_HOST, SITE (the document root to build), WORDPRESS (Debian's tree).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ADDRESS=${ADDRESS:-127.0.0.1:8080}
WORKERS=${WORKERS:-0}
DB_NAME=${DB_NAME:-peregrine_wordpress}
DB_USER=${DB_USER:-root}
DB_PASSWORD=${DB_PASSWORD:-}
DB_HOST=${DB_HOST:-localhost}
SITE=${SITE:-$here/site}
WORDPRESS=${WORDPRESS:-/usr/share/wordpress}

if [ ! -f "$WORDPRESS/wp-settings.php" ]; then
  echo "serve.sh: no WordPress in $WORDPRESS: apt-get install wordpress wordpress-theme-twentytwentythree mariadb-client" >&2
  exit 1
fi
if ! command -v mysql >/dev/null; then
  echo "serve.sh: the mysql client is missing: apt-get install mariadb-client" >&2
  exit 1
fi

# 1. The database, created when missing (MariaDB or MySQL must be running).
mysql_args=(-u "$DB_USER")
[ -z "$DB_PASSWORD" ] || mysql_args+=(-p"$DB_PASSWORD")
case "$DB_HOST" in
  localhost) ;;
  *:*) mysql_args+=(-h "${DB_HOST%:*}" -P "${DB_HOST##*:}") ;;
  *) mysql_args+=(-h "$DB_HOST") ;;
esac
if ! mysql "${mysql_args[@]}" -e "CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"; then
  echo "serve.sh: cannot reach the database as $DB_USER@$DB_HOST: start MariaDB" \
    "(start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd) or set DB_USER/DB_PASSWORD/DB_HOST" >&2
  exit 1
fi

# 2. The site. Debian's own wp-config.php reads /etc/wordpress/config-HOST.php, and WordPress
# looks for wp-config.php beside the real path of wp-load.php, so a tree of symlinks would still
# read Debian's configuration. Hard links (a copy when SITE is on another file system) give the
# site its own paths, and its own wp-config.php. After an upgrade of the wordpress package,
# delete SITE (keep wp-config.php and wp-content/uploads) and run this again.
if [ ! -f "$SITE/wp-settings.php" ]; then
  echo "serve.sh: building $SITE from $WORDPRESS"
  mkdir -p "$SITE"
  cp -al "$WORDPRESS/." "$SITE/" 2>/dev/null || cp -a "$WORDPRESS/." "$SITE/"
  rm -f "$SITE/wp-config.php" "$SITE/.htaccess"
fi
if [ ! -f "$SITE/wp-config.php" ] || grep -q DEBIAN_FILE "$SITE/wp-config.php"; then
  salt() { head -c 48 /dev/urandom | base64 | tr -d '\n/+='; }
  {
    echo "<?php"
    echo "// Written by examples/wordpress/serve.sh."
    printf "define('DB_NAME', '%s');\ndefine('DB_USER', '%s');\ndefine('DB_PASSWORD', '%s');\ndefine('DB_HOST', '%s');\n" \
      "$DB_NAME" "$DB_USER" "$DB_PASSWORD" "$DB_HOST"
    echo "define('DB_CHARSET', 'utf8mb4');"
    echo "define('DB_COLLATE', '');"
    for k in AUTH_KEY SECURE_AUTH_KEY LOGGED_IN_KEY NONCE_KEY AUTH_SALT SECURE_AUTH_SALT LOGGED_IN_SALT NONCE_SALT; do
      printf "define('%s', '%s');\n" "$k" "$(salt)"
    done
    echo "\$table_prefix = 'wp_';"
    echo "// Updates come from Debian's package, as with Debian's own configuration."
    echo "define('AUTOMATIC_UPDATER_DISABLED', true);"
    echo "define('WP_AUTO_UPDATE_CORE', false);"
    echo "if (!defined('ABSPATH')) { define('ABSPATH', __DIR__ . '/'); }"
    echo "require_once ABSPATH . 'wp-settings.php';"
  } >"$SITE/wp-config.php"
fi

# 3. Peregrine in classic mode: every request a fresh PHP request, as under PHP-FPM, with nginx's
# try_files $uri $uri/ /index.php?$query_string routing and the static files served by the daemon.
if [ ! -x "$repo/bin/peregrine" ] || [ ! -x "$repo/bin/peregrine-php" ]; then
  make -C "$repo" build
fi
echo "serve.sh: WordPress on http://$ADDRESS/ (the first visit runs WordPress's installer)"
exec "$repo/bin/peregrine" serve --root "$SITE" --address "$ADDRESS" --workers "$WORKERS"
