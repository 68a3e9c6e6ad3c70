#!/usr/bin/env python3
"""Records how nginx + PHP-FPM route request paths, for TestResolveNginx (../../resolve_test.go).

Needs Debian's nginx-light and php8.2-fpm (apt-get install nginx-light php8.2-fpm) and runs both
on 127.0.0.1:18081 only, as root or not, in a temporary directory it removes afterwards. It builds
the tree of the tests' tree(), the nginx configuration of Resolve's doc comment, requests every
path of SEGMENTS^1..3 (a fixed sample of SAMPLE of them) with curl --path-as-is, and writes
answers.tsv beside this file: path, status, then for a PHP script SCRIPT_NAME, PATH_INFO and
DOCUMENT_URI, for a file its path under the root, for a redirect its Location.

    python3 internal/docroot/testdata/nginx/record.py
"""
import itertools, json, os, random, shutil, subprocess, tempfile, time

PORT = 18081
SAMPLE = 3000
SEGMENTS = ["a.php", "sub", "noidx", "style.css", ".env", "dir.php", "x", "..", ".", "", "index.php",
            "A.PHP", "html", ".well-known", "phpidx", "index.html", "x.txt", "deep", "b.php", "s.txt",
            "x.php.bak", "%2e%2e", "a%2ephp", "sub%2f.."]
# The tree of resolve_test.go's tree(); PHP files print their $_SERVER, other files their name.
PHP = ["index.php", "a.php", "sub/index.php", "deep/b.php", "A.PHP", "x.php.bak"]
FILES = ["noidx/x.txt", "html/index.html", "style.css", "style.css.gz", "dir.php/s.txt", ".env",
         ".git/config", ".well-known/x.txt", "phpidx/index.php/x"]
DUMP = """<?php header('Content-Type: application/json');
echo json_encode(['script' => $_SERVER['SCRIPT_NAME'], 'info' => $_SERVER['PATH_INFO'] ?? null,
    'uri' => $_SERVER['DOCUMENT_URI']]);
"""
NGINX = """worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/t1; fastcgi_temp_path {d}/t2; proxy_temp_path {d}/t3;
  uwsgi_temp_path {d}/t4; scgi_temp_path {d}/t5;
  server {{
    listen 127.0.0.1:{port};
    root {d}/www;
    index index.php index.html;
    location ~ /\\.(?!well-known/) {{ deny all; }}
    location / {{ try_files $uri $uri/ /index.php?$query_string; }}
    location ~ [^/]\\.php(/|$) {{
      include /etc/nginx/snippets/fastcgi-php.conf;
      fastcgi_pass unix:{d}/fpm.sock;
    }}
  }}
}}
"""
FPM = """[global]
pid = {d}/fpm.pid
error_log = {d}/fpm.log
[www]
user = www-data
group = www-data
listen = {d}/fpm.sock
listen.mode = 0666
pm = static
pm.max_children = 2
"""


def main():
    d = tempfile.mkdtemp(prefix="peregrine-nginx-")
    os.chmod(d, 0o755)
    try:
        for name in PHP + FILES:
            p = os.path.join(d, "www", name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(DUMP if name in PHP else name)
        subprocess.run(["chmod", "-R", "a+rX", d], check=True)
        # nginx resolves the snippet's "include fastcgi.conf" against the configuration's directory.
        shutil.copy("/etc/nginx/fastcgi.conf", d)
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(NGINX.format(d=d, port=PORT))
        with open(os.path.join(d, "fpm.conf"), "w") as f:
            f.write(FPM.format(d=d))
        try:
            subprocess.run(["php-fpm8.2", "-R", "-y", os.path.join(d, "fpm.conf"), "-D"], check=True)
            subprocess.run(["nginx", "-c", os.path.join(d, "nginx.conf")], check=True)
            time.sleep(0.5)
            record(d)
        finally:
            for pidfile in ("nginx.pid", "fpm.pid"):
                try:
                    with open(os.path.join(d, pidfile)) as f:
                        os.kill(int(f.read()), 15)
                except (OSError, ValueError):
                    pass
            time.sleep(0.5)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def record(d):
    paths = sorted({"/" + "/".join(c) for n in (1, 2, 3) for c in itertools.product(SEGMENTS, repeat=n)})
    random.Random(7).shuffle(paths)
    rows = []
    for p in sorted(paths[:SAMPLE]):
        out = subprocess.run(["curl", "-s", "--path-as-is", "-o", os.path.join(d, "body"), "-w",
                              "%{http_code} %{redirect_url}", "http://127.0.0.1:%d%s" % (PORT, p)],
                             capture_output=True, text=True, check=True).stdout
        status, _, location = out.partition(" ")
        with open(os.path.join(d, "body"), "rb") as f:
            body = f.read().decode("latin1")
        row = [p, status]
        if status == "200" and body.startswith("{"):
            v = json.loads(body)
            row += ["script", v["script"], v["info"], v["uri"]]
        elif status == "200":
            row += ["file", body if body.startswith(tuple(FILES)) else "SOURCE:" + body[:5]]
        elif status == "301":
            row += ["redirect", location.replace("http://127.0.0.1:%d" % PORT, "")]
        rows.append("\t".join(row))
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "answers.tsv"), "w") as f:
        f.write("# Recorded by record.py from nginx %s and php8.2-fpm: path, status, answer.\n" % nginx_version())
        f.write("\n".join(rows) + "\n")


def nginx_version():
    return subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1]


if __name__ == "__main__":
    main()
