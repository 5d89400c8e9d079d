"""Debian's nginx as an https gateway in front of a server we started (a server nobody here wrote),
its certificate signed by a private CA made for the test: what a replay of a production endpoint behind
a TLS-terminating gateway talks to.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.real_engines import require

INSTALL = "apt-get update && apt-get install -y --no-install-recommends nginx-light"


def find_nginx() -> Path | None:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    return Path(found) if found else None


def private_ca(folder: Path, names: tuple[str, ...] = ("localhost",)) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate it signed for `names` (DNS names or IP addresses), as
    PEM files: (CA certificate, server certificate, server key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject: str, issuer: str, public_key, signer, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            alt: list[x509.GeneralName] = []
            for name in names:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    alt.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = build("faithful-replay test CA", "faithful-replay test CA", ca_key.public_key(), ca_key, ca=True)
    server = build(names[0], "faithful-replay test CA", server_key.public_key(), ca_key, ca=False)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Nginx:
    """nginx serving https on 127.0.0.1:`port` (its certificate signed by the CA `ca`, for the name
    `localhost`) and plain http on `http_port`, the same locations on both."""

    port: int
    http_port: int
    ca: Path  # the CA that signed the server's certificate (--ca-cert)
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


def start_nginx(folder: Path, locations: str, http_block: str = "") -> Nginx:
    """nginx (one worker, keep-alive without limit) serving `locations` over https and http, with
    `http_block` in its http block. Skips, or fails under CI, when nginx is not installed."""
    nginx = require(find_nginx(), "nginx", INSTALL)
    folder.mkdir(parents=True, exist_ok=True)
    ca, cert, key = private_ca(folder)
    port, http_port = _free_port(), _free_port()
    user = "user root;\n" if os.geteuid() == 0 else ""
    (folder / "nginx.conf").write_text(f"""{user}worker_processes 1;
pid {folder}/nginx.pid;
worker_rlimit_nofile 20000;
error_log {folder}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    {http_block}
    server {{
        listen 127.0.0.1:{port} ssl;
        listen 127.0.0.1:{http_port};
        ssl_certificate {cert};
        ssl_certificate_key {key};
        keepalive_requests 1000000;
        client_max_body_size 64m;
        {locations}
    }}
}}
""")
    process = subprocess.Popen(
        [str(nginx), "-p", str(folder), "-c", str(folder / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server = Nginx(port=port, http_port=http_port, ca=ca, process=process)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with process.stderr:
                raise RuntimeError(f"nginx exited: {process.stderr.read().decode(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError("nginx did not listen within 10 s")


def start_gateway(upstream: str, folder: Path) -> Nginx:
    """nginx in front of `upstream` (http://host:port), streaming responses as they come (no
    buffering either way, keep-alive to the upstream)."""
    host_port = upstream.split("://", 1)[1].rstrip("/")
    return start_nginx(
        folder,
        http_block=f"upstream engine {{ server {host_port}; keepalive 64; }}",
        locations="""
        location / {
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }""",
    )


def sse_events(tokens: int = 19) -> list[str]:
    """A chat completion's stream as an OpenAI-compatible server sends it: a role event, `tokens`
    one-token deltas, a usage event and [DONE] (21 events by default)."""
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    events = [{**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    events += [{**chunk, "choices": [{"index": 0, "delta": {"content": f" tok{i}"}}]} for i in range(tokens)]
    events.append(
        {**chunk, "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": tokens, "total_tokens": 11 + tokens}}
    )
    return [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]


def start_static_sse(folder: Path, events: list[str] | None = None) -> Nginx:
    """nginx answering every POST to /v1/chat/completions (and /v1/completions) at once with one
    fixed SSE stream (`sse_events()` by default), and GET /v1/models with one model: a server
    nobody here wrote, with nothing behind it to wait for."""
    body = "".join(events or sse_events())
    models = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
    return start_nginx(
        folder,
        locations=f"""
        location /v1/models {{
            default_type application/json;
            return 200 {_quoted(models)};
        }}
        location ~ ^/v1/(chat/)?completions$ {{
            default_type text/event-stream;
            return 200 {_quoted(body)};
        }}""",
    )


def _quoted(text: str) -> str:
    """`text` as an nginx double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
