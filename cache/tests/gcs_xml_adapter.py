#!/usr/bin/env python3
"""XML-to-JSON-API adapter in front of fake-gcs-server, for the tier-3 tests.

object_store uploads through GCS's XML API (`PUT /<bucket>/<object>`, with
`x-goog-if-generation-match: 0` for write-once creates). fake-gcs-server
1.54 answers those with 400 "invalid uploadType" (see shared/DESIGN.md,
"Remote cache tier"). This proxy turns each such PUT into a JSON-API
multipart upload (`POST /upload/storage/v1/b/<bucket>/o?uploadType=multipart`,
with `ifGenerationMatch=0` when the header asked for it) and answers in the
XML API's terms: 200 with `ETag` and `x-goog-generation` headers, or 412 with
an XML error body, which object_store maps to `AlreadyExists`. Every other
request (GET, HEAD, DELETE, XML listing) is passed through unchanged.

Usage: gcs_xml_adapter.py --upstream http://127.0.0.1:PORT --bucket NAME
It binds 127.0.0.1 on a free port (or --port), creates the bucket on the
upstream (waiting for the emulator to come up), then prints `READY <port>`
on stdout. Standard library only.
"""

import argparse
import http.client
import json
import sys
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "te", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
}

PRECONDITION_XML = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ConditionNotMet</Code>"
    b"<Message>At least one of the pre-conditions you specified did not hold.</Message></Error>"
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream_host = "127.0.0.1"
    upstream_port = 0
    verbose = False

    def log_message(self, fmt, *args):
        if self.verbose:
            sys.stderr.write("adapter: " + fmt % args + "\n")

    def _body(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _upstream(self, method, path, body, headers):
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            return r.status, r.getheaders(), data
        finally:
            conn.close()

    def _reply(self, status, headers, body):
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _is_xml_object_put(self):
        path = urllib.parse.urlsplit(self.path).path
        if self.command != "PUT" or "x-goog-copy-source" in self.headers:
            return False
        parts = path.lstrip("/").split("/", 1)
        return (len(parts) == 2 and parts[1] != ""
                and urllib.parse.unquote(parts[0]) not in ("storage", "upload", "download", "_internal"))

    def _xml_put(self):
        body = self._body()
        path = urllib.parse.urlsplit(self.path).path
        # object_store percent-encodes bucket and object name (slashes too).
        bucket, name = (urllib.parse.unquote(p) for p in path.lstrip("/").split("/", 1))
        ctype = self.headers.get("content-type") or "application/octet-stream"
        boundary = "tpuc-" + uuid.uuid4().hex
        meta = json.dumps({"name": name, "contentType": ctype}).encode()
        multipart = (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
            + meta
            + f"\r\n--{boundary}\r\nContent-Type: {ctype}\r\n\r\n".encode()
            + body
            + f"\r\n--{boundary}--\r\n".encode()
        )
        query = {"uploadType": "multipart", "name": name}
        gen = self.headers.get("x-goog-if-generation-match")
        if gen is not None:
            query["ifGenerationMatch"] = gen
        target = f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?" + urllib.parse.urlencode(query)
        try:
            status, _, data = self._upstream(
                "POST", target, multipart, {"Content-Type": f"multipart/related; boundary={boundary}"})
        except OSError as e:
            return self._reply(502, [("Content-Type", "text/plain")], f"upstream: {e}".encode())
        if status == 412:
            return self._reply(412, [("Content-Type", "application/xml")], PRECONDITION_XML)
        if status != 200:
            return self._reply(status, [("Content-Type", "text/plain")], data)
        obj = json.loads(data)
        headers = [("ETag", '"%s"' % obj.get("etag", obj.get("md5Hash", ""))),
                   ("x-goog-generation", str(obj.get("generation", "1")))]
        return self._reply(200, headers, b"")

    def _pass(self):
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            status, rheaders, data = self._upstream(self.command, self.path, body or None, headers)
        except OSError as e:
            return self._reply(502, [("Content-Type", "text/plain")], f"upstream: {e}".encode())
        return self._reply(status, rheaders, data)

    def _handle(self):
        if self._is_xml_object_put():
            self._xml_put()
        else:
            self._pass()

    do_GET = do_HEAD = do_DELETE = do_POST = do_PUT = do_PATCH = _handle


def create_bucket(host, port, bucket, wait_s):
    deadline = time.monotonic() + wait_s
    body = json.dumps({"name": bucket}).encode()
    last = None
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            conn.request("POST", "/storage/v1/b", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            conn.close()
            if r.status in (200, 409):
                return
            last = f"HTTP {r.status}"
        except OSError as e:
            last = str(e)
        time.sleep(0.05)
    sys.exit(f"adapter: could not create bucket {bucket!r} on {host}:{port}: {last}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT of fake-gcs-server")
    ap.add_argument("--bucket", help="create this bucket on the upstream before READY")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--wait", type=float, default=20.0, help="seconds to wait for the upstream")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    up = urllib.parse.urlsplit(args.upstream)
    Handler.upstream_host = up.hostname
    Handler.upstream_port = up.port
    Handler.verbose = args.verbose
    if args.bucket:
        create_bucket(up.hostname, up.port, args.bucket, args.wait)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
