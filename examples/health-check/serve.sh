#!/bin/sh
# A tiny HTTP service on $PORT (default 8787) answering every request with 200 OK.
# Needs busybox nc or a netcat that supports -l -p.
port="${PORT:-8787}"
body='{"status":"ok"}'
while :; do
  printf 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' \
    "${#body}" "$body" | nc -l -p "$port" -q 1 >/dev/null 2>&1 || sleep 1
done
