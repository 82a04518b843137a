#!/usr/bin/env python3
"""A slowloris on loopback, and the latency of well-behaved requests during it.

    slowloris.py PORT --connections N --sources 127.0.0.2,127.0.0.3 --seconds S [--path P] [--header-file F]

Opens N non-blocking TCP connections to 127.0.0.1:PORT, each bound to one of the source addresses
(loopback only: 127.0.0.0/8), and sends on each a request head that never ends, one byte every
250 ms. Meanwhile, from 127.0.0.1, it sends one well-behaved GET PATH every 200 ms on a fresh
connection (with the header line in F, if given) and times it, from connect() to the whole
response, bounded at 10 s. Connections the server closes are not opened again.

Prints one JSON line: the latencies (s) of the well-behaved requests, their statuses, and how many
slow connections were open, still connecting or closed at the end.
"""
import argparse
import errno
import json
import resource
import select
import socket
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("--connections", type=int, default=5000)
parser.add_argument("--sources", default="127.0.0.2,127.0.0.3,127.0.0.4")
parser.add_argument("--seconds", type=float, default=5)
parser.add_argument("--path", default="/health")
parser.add_argument("--header-file")
parser.add_argument("--settle", type=float, default=1.0, help="seconds between opening and the first request")
args = parser.parse_args()

sources = args.sources.split(",")
assert all(s.startswith("127.") for s in sources), "loopback sources only"
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < args.connections + 100:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 1000), hard))

HEAD = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 8000
slow = []  # [socket, bytes sent, state]
for index in range(args.connections):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.bind((sources[index % len(sources)], 0))
    try:
        s.connect(("127.0.0.1", args.port))
    except BlockingIOError:
        pass
    slow.append([s, 0, "connecting"])

stop = threading.Event()
lock = threading.Lock()


def dribble():
    while not stop.is_set():
        with lock:
            poller = select.poll()
            live = {}
            for entry in slow:
                if entry[2] != "closed":
                    poller.register(entry[0], select.POLLIN | select.POLLOUT)
                    live[entry[0].fileno()] = entry
            for fd, events in poller.poll(0):
                entry = live[fd]
                if events & (select.POLLERR | select.POLLHUP | select.POLLIN):
                    entry[2] = "closed"
                    entry[0].close()
                elif events & select.POLLOUT:
                    entry[2] = "open"
                    if entry[1] < len(HEAD):
                        try:
                            entry[1] += entry[0].send(HEAD[entry[1]:entry[1] + 1])
                        except OSError:
                            pass
        stop.wait(0.25)


thread = threading.Thread(target=dribble, daemon=True)
thread.start()
time.sleep(args.settle)

header = open(args.header_file, "rb").read().strip() + b"\r\n" if args.header_file else b""
request = b"GET " + args.path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + header + b"\r\n"
latencies, statuses = [], []
end = time.monotonic() + args.seconds
while time.monotonic() < end:
    start = time.monotonic()
    status = 0
    try:
        with socket.create_connection(("127.0.0.1", args.port), timeout=10, source_address=("127.0.0.1", 0)) as c:
            c.sendall(request)
            response = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                response += chunk
            status = int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.") else 0
    except OSError as error:
        status = -(error.errno or errno.ETIMEDOUT)
    latencies.append(time.monotonic() - start)
    statuses.append(status)
    time.sleep(max(0.0, 0.2 - (time.monotonic() - start)))
stop.set()
thread.join()
with lock:
    counts = {state: sum(1 for e in slow if e[2] == state) for state in ("open", "connecting", "closed")}
    for entry in slow:
        if entry[2] != "closed":
            entry[0].close()
print(json.dumps({"latencies": latencies, "statuses": statuses, **counts}))
