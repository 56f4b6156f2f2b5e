#!/usr/bin/env python3
"""An independent KV-event publisher, for interop tests of tollgate's subscriber.

It speaks vLLM's wire protocol with libzmq (python3-zmq) and python3-msgpack,
written from vLLM's and SGLang's published format, sharing no code with
tollgate:

* PUB socket, messages of three frames: topic, an 8-byte big-endian sequence
  number (0 per process, +1 per batch), a msgpack event batch;
* ROUTER replay socket: a request [b"", start_seq (8 bytes BE)] is answered
  with [b"", seq, payload] for every buffered batch from start_seq on, then
  the end marker [b"", 0xFFFFFFFFFFFFFFFF, b""];
* batches as positional arrays [ts, events, data_parallel_rank] or maps;
  events as positional arrays with the tag first or maps tagged by "type";
* block hashes as integers (the last 8 bytes of a SHA-256 digest, unsigned;
  SGLang flavour: signed int64, one event per page) or as raw digests.

Commands arrive one JSON object per line on stdin; each is answered with one
line on stdout ("OK <next seq>" or "ERR <reason>"). The first line written
is "READY <pub endpoint> <replay endpoint>".

  {"op": "store", "tokens": [...]}   cache the prompt's full blocks
  {"op": "remove", "tokens": [...]}  evict the prompt's full blocks
  {"op": "clear"}                    AllBlocksCleared
  {"op": "drop", "n": 1}             do not send the next n batches (they stay
                                     in the replay buffer)
  {"op": "restart"}                  a new engine process: sequence 0, empty
                                     cache and buffer, then AllBlocksCleared
"""

import argparse
import hashlib
import json
import struct
import sys
import threading
import time

import msgpack
import zmq

END_SEQ = b"\xff" * 8


class Publisher:
    def __init__(self, args):
        self.args = args
        self.ctx = zmq.Context.instance()
        self.pub = self.ctx.socket(zmq.PUB)
        pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = self.ctx.socket(zmq.ROUTER)
        replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoints = ("tcp://127.0.0.1:%d" % pub_port, "tcp://127.0.0.1:%d" % replay_port)
        self.lock = threading.Lock()
        self.seq = 0
        self.buffer = []
        self.drop = 0
        self.cached = set()
        self.done = False

    # Hashes: chained over the parent digest and the block's tokens.
    def digests(self, tokens):
        bs = self.args.block_size
        out, parent = [], b""
        for i in range(len(tokens) // bs):
            block = tokens[i * bs:(i + 1) * bs]
            h = hashlib.sha256(parent + struct.pack("<%dI" % bs, *block)).digest()
            out.append(h)
            parent = h
        return out

    def wire_hash(self, digest):
        if self.args.hashes == "bytes":
            return digest
        value = int.from_bytes(digest, "big") & (2**64 - 1)
        if self.args.flavor == "sglang" and value >= 2**63:
            value -= 2**64  # SGLang's hashes are signed 64-bit integers
        return value

    def stored_event(self, hashes, parent, tokens):
        fields = [
            ("block_hashes", [self.wire_hash(h) for h in hashes]),
            ("parent_block_hash", None if parent is None else self.wire_hash(parent)),
            ("token_ids", tokens),
            ("block_size", self.args.block_size),
            ("lora_id", None),
            ("medium", "GPU"),
        ]
        if self.args.flavor == "vllm":
            fields.append(("lora_name", None))
        return self.event("BlockStored", fields)

    def event(self, tag, fields):
        if self.args.shape == "map":
            ev = {"type": tag}
            ev.update(fields)
            return ev
        return [tag] + [v for _, v in fields]

    def batch(self, events):
        rank = self.args.rank
        if self.args.shape == "map":
            return {"ts": time.time(), "events": events, "data_parallel_rank": rank}
        return [time.time(), events, rank]

    def publish(self, events):
        payload = msgpack.packb(self.batch(events), use_bin_type=True)
        with self.lock:
            seq = struct.pack(">Q", self.seq)
            self.seq += 1
            self.buffer.append((seq, payload))
            del self.buffer[:-self.args.buffer_steps]
            if self.drop > 0:
                self.drop -= 1
                return
            self.pub.send_multipart([self.args.topic.encode(), seq, payload])

    def store(self, tokens):
        bs = self.args.block_size
        ds = self.digests(tokens)
        new = [i for i, d in enumerate(ds) if d not in self.cached]
        if not new:
            return
        events = []
        if self.args.flavor == "sglang":
            for i in new:  # SGLang reports one page per event
                parent = ds[i - 1] if i > 0 else None
                events.append(self.stored_event([ds[i]], parent, tokens[i * bs:(i + 1) * bs]))
        else:
            first = new[0]
            parent = ds[first - 1] if first > 0 else None
            events.append(self.stored_event(ds[first:], parent, tokens[first * bs:len(ds) * bs]))
        self.cached.update(ds)
        self.publish(events)

    def remove(self, tokens):
        ds = [d for d in self.digests(tokens) if d in self.cached]
        self.cached.difference_update(ds)
        self.publish([self.event("BlockRemoved", [("block_hashes", [self.wire_hash(d) for d in ds]), ("medium", "GPU")])])

    def clear(self):
        self.cached.clear()
        self.publish([self.event("AllBlocksCleared", [])])

    def serve_replay(self):
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self.done:
            if not poller.poll(100):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                continue
            ident, start = frames[0], struct.unpack(">Q", frames[2])[0]
            with self.lock:
                batches = [(s, p) for s, p in self.buffer if struct.unpack(">Q", s)[0] >= start]
            for s, p in batches:
                self.router.send_multipart([ident, b"", s, p])
            self.router.send_multipart([ident, b"", END_SEQ, b""])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topic", default="kv@pod@model")
    ap.add_argument("--shape", choices=["array", "map"], default="array")
    ap.add_argument("--hashes", choices=["int", "bytes"], default="int")
    ap.add_argument("--flavor", choices=["vllm", "sglang"], default="vllm")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--buffer-steps", type=int, default=10000)
    args = ap.parse_args()

    p = Publisher(args)
    replay = threading.Thread(target=p.serve_replay, daemon=True)
    replay.start()
    print("READY %s %s" % p.endpoints, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "store":
                p.store(cmd["tokens"])
            elif op == "remove":
                p.remove(cmd["tokens"])
            elif op == "clear":
                p.clear()
            elif op == "drop":
                with p.lock:
                    p.drop += int(cmd["n"])
            elif op == "restart":
                with p.lock:
                    p.seq, p.buffer = 0, []
                p.clear()
            else:
                raise ValueError("unknown op %r" % op)
            with p.lock:
                print("OK %d" % p.seq, flush=True)
        except Exception as e:  # report and carry on: the test reads it
            print("ERR %s" % e, flush=True)
    p.done = True
    replay.join()
    p.pub.close(linger=0)
    p.router.close(linger=0)


if __name__ == "__main__":
    main()
