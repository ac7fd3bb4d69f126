"""Shared by the benchmarks that put knap's router and nginx side by side in front of one loopback
pod, without knapd: the test app as the pod, bench/tls/tls_bench --serve-pod as knap's Router
in-process (one worker thread, linked like knapd), nginx with one worker and a keep-alive upstream
pool. Used by bench/router/bench_slow_head.py and bench/tls/bench_idle_connections.py.
"""
import os
import re
import socket
import subprocess
import time

HOST = "bench.example.com"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, what, timeout=10):
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def start_pod(build, procs):
    """tests/apps/knap-testapp on a free loopback port; returns the port."""
    port = free_port()
    procs.append(subprocess.Popen([f"{build}/tests/apps/knap-testapp", "--port-from-arg", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return port


def start_knap(build, work, pod_port, procs):
    """knap's Router in-process in front of the pod; returns (process, http port, https port)."""
    out = os.path.join(work, "knap.out")
    with open(out, "w") as f:
        knap = subprocess.Popen([f"{build}/bench/tls/tls_bench", "--serve-pod", str(pod_port), "--seconds", "3600",
                                 "--sni", HOST], stdout=f, stderr=subprocess.STDOUT)
    procs.append(knap)

    def ports():
        text = open(out).read()
        http = re.search(r"^serving http on port (\d+)", text, re.M)
        https = re.search(r"^serving https on port (\d+)", text, re.M)
        return (int(http.group(1)), int(https.group(1))) if http and https else None
    http, https = wait_for(ports, "tls_bench's listeners")
    return knap, http, https


def start_nginx(work, pod_port, procs, tls=False, events="worker_connections 1024;", http_extra=""):
    """nginx, one worker, proxying to the pod (TLS 1.2 and 1.3 with a fresh EC P-256 certificate when
    `tls`); returns (process, port)."""
    port = free_port()
    listen = f"listen 127.0.0.1:{port};"
    if tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "1", "-subj", f"/CN={HOST}", "-keyout", f"{work}/key.pem", "-out",
                        f"{work}/cert.pem"], check=True, capture_output=True)
        listen = (f"listen 127.0.0.1:{port} ssl; ssl_certificate {work}/cert.pem; "
                  f"ssl_certificate_key {work}/key.pem; ssl_protocols TLSv1.2 TLSv1.3;")
    with open(f"{work}/nginx.conf", "w") as f:
        f.write(f"""worker_processes 1; daemon off; master_process off; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ {events} }}
http {{ access_log off; {http_extra} upstream pod {{ server 127.0.0.1:{pod_port}; keepalive 64; }}
  server {{ {listen}
    location / {{ proxy_pass http://pod; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host $host; }} }} }}
""")
    nginx = subprocess.Popen(["nginx", "-c", f"{work}/nginx.conf", "-p", work], stderr=subprocess.DEVNULL)
    procs.append(nginx)

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    wait_for(up, "nginx")
    return nginx, port


def stop(procs):
    for p in procs:
        p.kill()
        p.wait()
