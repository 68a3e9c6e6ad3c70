#!/usr/bin/env bash
# Compares one classic-mode worker (bin/peregrine-php) with one PHP-FPM child on the same
# document root, one request at a time, the way docs/benchmarks.md's classic-mode profile was
# made (issue 16). Two measures:
#
#   bench/profile/classic-vs-fpm.sh cpu DOCROOT PATH [N]
#       the worker's own user + system CPU per request (/proc/PID/stat) over N requests (ab -c1,
#       default 100, after 20 unmeasured), and its minor page faults, for each server in turn;
#   bench/profile/classic-vs-fpm.sh callgrind DOCROOT PATH [N]
#       valgrind --tool=callgrind instructions per request: a fresh server after N+4 requests
#       minus a fresh server after 4 (default N 10), so start-up and the first compile cancel out.
#       The callgrind files are kept in the scratch directory for callgrind_annotate.
#
# Run from the repository root after `make build`. Servers listen on free 127.0.0.1 ports, run
# from a scratch directory under /tmp (printed at the end) and are stopped by pid. OPcache is
# set as the bench sets it for both (on, no timestamp checks, 128 MiB).
set -euo pipefail

mode=${1:?usage: classic-vs-fpm.sh cpu|callgrind DOCROOT PATH [N]}
root=$(cd "${2:?docroot}" && pwd)
path=${3:?path, e.g. / or /index.php?title=Main_Page}
repo=$(pwd)
[ -x "$repo/bin/peregrine" ] && [ -x "$repo/bin/peregrine-php" ] || { echo "run from the repository root after make build" >&2; exit 1; }
work=$(mktemp -d /tmp/peregrine-profile-XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ini=(-d opcache.enable=1 -d opcache.validate_timestamps=0 -d opcache.memory_consumption=128)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# start SYSTEM WRAP: starts one server, sets url, master and worker.
start() {
  local sys=$1 wrap=$2 p
  p=$(port)
  if [ "$sys" = fpm ]; then
    local dir=$work/fpm-$p
    mkdir -p "$dir"
    cp /etc/nginx/fastcgi.conf "$dir/"
    { echo "[global]"; echo "pid = $dir/fpm.pid"; echo "error_log = $dir/fpm-error.log"; echo "daemonize = no"
      echo "[w]"; [ "$(id -u)" = 0 ] && { echo "user = root"; echo "group = root"; }
      echo "listen = $dir/fpm.sock"; echo "pm = static"; echo "pm.max_children = 1"; echo "clear_env = yes"; } > "$dir/php-fpm.conf"
    local user=""; [ "$(id -u)" = 0 ] && user="user root;"
    cat > "$dir/nginx.conf" <<NGINX
$user
worker_processes 1; pid $dir/nginx.pid; error_log $dir/nginx-error.log warn;
events { worker_connections 1024; }
http { access_log off; fastcgi_read_timeout 600s;
  client_body_temp_path $dir/cb; proxy_temp_path $dir/px; fastcgi_temp_path $dir/fc; uwsgi_temp_path $dir/uw; scgi_temp_path $dir/sc;
  server { listen 127.0.0.1:$p; root $root; include /etc/nginx/mime.types; index index.php index.html;
    location / { try_files \$uri \$uri/ /index.php?\$query_string; }
    location ~ [^/]\.php(/|\$) { include /etc/nginx/snippets/fastcgi-php.conf; fastcgi_pass unix:$dir/fpm.sock; } } }
NGINX
    local r=(); [ "$(id -u)" = 0 ] && r=(-R)
    $wrap php-fpm8.2 -F "${r[@]}" -y "$dir/php-fpm.conf" "${ini[@]}" >"$dir/fpm.out" 2>&1 &
    master=$!; pids+=("$master")
    for _ in $(seq 300); do [ -S "$dir/fpm.sock" ] && break; sleep 0.1; done
    nginx -p "$dir" -e "$dir/nginx-error.log" -c "$dir/nginx.conf" -g 'daemon off;' >"$dir/nginx.out" 2>&1 &
    pids+=("$!"); ngx=$!
  else
    local dir=$work/peregrine-$p bin=$repo/bin
    mkdir -p "$dir"
    if [ -n "$wrap" ]; then # the daemon runs the peregrine-php beside its executable
      cp "$repo/bin/peregrine" "$dir/peregrine"
      printf '#!/bin/sh\nexec %s %s "$@"\n' "$wrap" "$repo/bin/peregrine-php" > "$dir/peregrine-php"
      chmod +x "$dir/peregrine-php"; bin=$dir
    fi
    printf 'http:\n  address: 127.0.0.1:%s\n  root: "%s"\nworkers:\n  count: 1\n  php_ini:\n    opcache.enable: "1"\n    opcache.validate_timestamps: "0"\n    opcache.memory_consumption: "128"\nlog:\n  level: warn\n' "$p" "$root" > "$dir/peregrine.yaml"
    "$bin/peregrine" serve -c "$dir/peregrine.yaml" >"$dir/peregrine.log" 2>&1 &
    master=$!; pids+=("$master"); ngx=""
  fi
  url="http://127.0.0.1:$p$path"
  for _ in $(seq 600); do curl -s -o /dev/null --max-time 120 "$url" && break; sleep 0.2; done
  worker=$(pgrep -P "$master" | tail -1)
}

stop() {
  if [ -n "$ngx" ]; then kill -QUIT "$ngx" 2>/dev/null || true; kill -QUIT "$master" 2>/dev/null || true
  else kill -TERM "$master" 2>/dev/null || true; fi
  wait "$master" 2>/dev/null || true
  [ -z "$ngx" ] || wait "$ngx" 2>/dev/null || true
}

requests() { for _ in $(seq "$1"); do curl -s -o /dev/null -w '%{http_code}\n' --max-time 300 "$url"; done | sort | uniq -c | tr '\n' ' '; }

case $mode in
cpu)
  n=${4:-100}
  for sys in peregrine fpm peregrine fpm; do
    start $sys ""
    ab -q -n 20 -c 1 "$url" >/dev/null 2>&1
    read -r f0 _ _ _ u0 s0 _ < <(cut -d' ' -f10-16 "/proc/$worker/stat")
    wall=$(ab -n "$n" -c 1 "$url" 2>&1 | awk '/Time per request.*\(mean\)/ {print $4}')
    read -r f1 _ _ _ u1 s1 _ < <(cut -d' ' -f10-16 "/proc/$worker/stat")
    stop
    awk -v s=$sys -v n="$n" -v t="$(getconf CLK_TCK)" -v u=$((u1 - u0)) -v k=$((s1 - s0)) -v f=$((f1 - f0)) -v w="$wall" \
      'BEGIN { printf "%-9s worker CPU %.2f ms (user %.2f, sys %.2f), %.1f minor faults, wall %s ms per request\n", s, (u+k)*1000/t/n, u*1000/t/n, k*1000/t/n, f/n, w }'
  done ;;
callgrind)
  n=${4:-10}
  for sys in peregrine fpm; do
    total=()
    for m in 4 $((n + 4)); do
      out=$work/cg-$sys-$m
      start $sys "valgrind --tool=callgrind --dump-instr=no --quiet --callgrind-out-file=$out.%p"
      echo "$sys, $m requests: $(requests $((m - 1)))"
      stop; sleep 1
      best=0
      for f in "$out".*; do v=$(awk '/^summary:/ {print $2; exit}' "$f"); [ "${v:-0}" -gt "$best" ] && best=$v; done
      total+=("$best")
    done
    echo "$sys: $(( (total[1] - total[0]) / n )) instructions per request"
  done ;;
*) echo "mode: cpu or callgrind" >&2; exit 2 ;;
esac
echo "scratch directory: $work"
