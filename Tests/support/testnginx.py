"""What the Python test scripts (Tests/browser, Tests/aria2) share: a free loopback port, and a foreground nginx
serving a folder of theirs, /slow/ at 1 MiB/s, started on a free port and waited for with a deadline."""
import os
import shutil
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx(work, processes, probe, access_log=None, locations=""):
    """nginx serving `work`/www (which the caller fills) with one worker and its files in `work`; /slow/ at 1 MiB/s.
    `access_log` is an nginx log_format string for `work`/access.log (none when omitted); `locations` adds location
    blocks. Appends the process to `processes` and returns the port once `probe` (a path under www) is served."""
    port = free_port()
    www = os.path.join(work, "www")
    log = (f"log_format custom '{access_log}'; access_log {work}/access.log custom;" if access_log
           else "access_log off;")
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""
daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx-error.log;
events {{ worker_connections 256; }}
http {{
  {log}
  client_body_temp_path {work}/tmp; proxy_temp_path {work}/tmp; fastcgi_temp_path {work}/tmp;
  uwsgi_temp_path {work}/tmp; scgi_temp_path {work}/tmp;
  server {{
    listen 127.0.0.1:{port}; root {www};
    location /slow/ {{ limit_rate 1m; }}
    {locations}
  }}
}}
""")
    os.makedirs(os.path.join(work, "tmp"), exist_ok=True)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    processes.append(subprocess.Popen([nginx, "-c", conf, "-e", os.path.join(work, "nginx-error.log")]))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/{probe}").read()
            return port
        except OSError:
            time.sleep(0.05)
    with open(os.path.join(work, "nginx-error.log")) as log_file:
        raise SystemExit("nginx did not start: " + log_file.read()[-2000:])
