#!/usr/bin/env python3
"""A libzmq peer (python3-zmq) for the interop tests of package zmtp.

  pub-bind ENDPOINT       bind a PUB (tcp://127.0.0.1:0 picks a port) and publish
  pub-connect ENDPOINT    connect a PUB to ENDPOINT and publish
  router-bind ENDPOINT    bind a ROUTER that answers KV-event replay requests

A PUB sends, every few milliseconds until stdin closes, the messages
[b"kv@w0@m", seq (8 bytes, big-endian), payload of --payload bytes] and
[b"other", b"x"]. The ROUTER answers [b"", start (8 bytes)] with
[b"", seq, b"payload-<seq>"] for seq in start, start+1, then the end marker
[b"", 0xFF * 8, b""]. The first line written is "READY <endpoint>".
"""

import argparse
import struct
import sys
import threading
import time

import zmq


def watch_stdin(done):
    for _ in sys.stdin:
        pass
    done.set()


def publish(sock, args, done):
    seq = 0
    payload = b"p" * args.payload
    while not done.is_set():
        sock.send_multipart([b"kv@w0@m", struct.pack(">Q", seq), payload])
        sock.send_multipart([b"other", b"x"])
        seq += 1
        time.sleep(0.005)


def serve_replay(sock, done):
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while not done.is_set():
        if not poller.poll(50):
            continue
        frames = sock.recv_multipart()
        if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
            continue
        ident, start = frames[0], struct.unpack(">Q", frames[2])[0]
        for seq in (start, start + 1):
            sock.send_multipart([ident, b"", struct.pack(">Q", seq), b"payload-%d" % seq])
        sock.send_multipart([ident, b"", b"\xff" * 8, b""])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["pub-bind", "pub-connect", "router-bind"])
    ap.add_argument("endpoint")
    ap.add_argument("--payload", type=int, default=300)
    args = ap.parse_args()

    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER if args.mode == "router-bind" else zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    if args.mode == "pub-connect":
        sock.connect(args.endpoint)
        endpoint = args.endpoint
    else:
        sock.bind(args.endpoint)
        endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    print("READY %s" % endpoint, flush=True)

    done = threading.Event()
    threading.Thread(target=watch_stdin, args=(done,), daemon=True).start()
    if args.mode == "router-bind":
        serve_replay(sock, done)
    else:
        publish(sock, args, done)
    sock.close(linger=0)
    ctx.term()


if __name__ == "__main__":
    main()
