#!/usr/bin/env bash
# Installs Debian's MediaWiki (the `mediawiki` package, /usr/share/mediawiki) into a scratch
# directory with an SQLite database, non-interactively (maintenance/install.php), for the
# benchmark's classic scenario: bench/apps/mediawiki/install.sh DIR. DIR gets hard links to
# Debian's files (MediaWiki finds its LocalSettings.php beside the real path of its code, so
# symlinks would read Debian's /var/lib/mediawiki), its own LocalSettings.php, images/ and the
# database under DIR/data. Nothing outside DIR is written; removing DIR removes the wiki.
set -euo pipefail

dir=${1:?usage: install.sh DIR}
src=/usr/share/mediawiki
[ -f "$src/maintenance/install.php" ] || { echo "MediaWiki is not installed (apt-get install mediawiki)" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
cp -al "$src/." "$dir/" 2>/dev/null || cp -a "$src/." "$dir/"
rm -f "$dir/LocalSettings.php" "$dir/images" "$dir/config"
mkdir -p "$dir/images" "$dir/data"
php "$dir/maintenance/install.php" --dbtype=sqlite --dbpath="$dir/data" --dbname=wiki \
  --server=http://127.0.0.1 --scriptpath="" --lang=en --pass="bench-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')" \
  --confpath="$dir" "Peregrine Bench" Admin
# Both servers serve this wiki on ports of their own: links follow the request's Host.
cat >>"$dir/LocalSettings.php" <<'PHP'

# Added by bench/apps/mediawiki/install.sh.
$wgServer = 'http://' . ($_SERVER['HTTP_HOST'] ?? '127.0.0.1');
PHP
