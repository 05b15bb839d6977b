#!/bin/sh
# A persistent HTTP service on $PORT (set from the manifest's `port`): GET /health answers
# 200 {"status":"ok"}, anything else 404.
exec python3 -c '
import http.server, json, os

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health"
        body = json.dumps({"status": "ok"} if ok else {"error": "not found"}).encode()
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

port = int(os.environ.get("PORT", "8787"))
server = http.server.HTTPServer(("127.0.0.1", port), Health)
# Said once the socket listens, so whoever waits for this line can connect.
print(f"health-check listening on 127.0.0.1:{port}", flush=True)
server.serve_forever()
'
