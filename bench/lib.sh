# Shared by the benchmark scripts (sourced, not run).

# A free TCP port on loopback.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Makes $work, a new folder named after NAME under /tmp, and has it removed, with the nginx the bench started
# ($nginx_pid), when the script exits.
make_work() {
    nginx_pid=
    work=$(mktemp -d "/tmp/haul-$1.XXXXXX")
    trap 'remove_work' EXIT
}

remove_work() {
    [ -n "$nginx_pid" ] && kill -9 "$nginx_pid" 2>/dev/null
    rm -rf "$work"
}

# Writes 1000 files of 64 KiB of random bytes into DIR/small.
make_small_files() {
    mkdir -p "$1/small"
    python3 - "$1/small" <<'PY'
import os, sys
for i in range(1000):
    with open(os.path.join(sys.argv[1], f"f{i:04}.bin"), "wb") as f:
        f.write(os.urandom(64 * 1024))
PY
}

# Starts nginx serving WORK/www on 127.0.0.1:PORT (with EXTRA inside its server block and HTTP_EXTRA inside its http
# block), in the background, and waits until it answers; its pid is in $nginx_pid. Everything it writes stays in WORK.
start_nginx() {
    local work=$1 port=$2 extra=${3:-} http_extra=${4:-}
    cat > "$work/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 256; }
http {
    access_log off;
    $http_extra
    sendfile on;
    client_body_temp_path $work/tmp-body;
    proxy_temp_path $work/tmp-proxy;
    fastcgi_temp_path $work/tmp-fastcgi;
    uwsgi_temp_path $work/tmp-uwsgi;
    scgi_temp_path $work/tmp-scgi;
    server {
        listen 127.0.0.1:$port;
        root $work/www;
        $extra
    }
}
CONF
    nginx -c "$work/nginx.conf" -p "$work" &
    nginx_pid=$!
    disown "$nginx_pid" # no "Killed" line from the shell when the cleanup stops it
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && return 0; sleep 0.05; done
}
