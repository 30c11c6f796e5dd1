#!/usr/bin/env python3
"""torchrpc.py - the benchmark driver for torch.distributed.rpc rows
(tensorwire issue 16 item 1): the published torchrpc rows were measured
this way, so these rows are the ones a reader of them can compare directly.

Same command line, READY line and result file as the C drivers
(bench/common/twb.h): --system uv-basic|shm-basic|shm-cma --role
server|client --policy reused|fresh --sizes --iters --warmup [--addr]
[--bind] [--out]. The client calls rpc_sync of a function that returns its
CPU tensor argument (uint8, `size` bytes), as the seeds' script did, and
times each call (a round trip, rtt_ns); every reply is compared byte for
byte with what was sent, and each call's tensor differs from the last one.
The transport and channel are chosen through TensorPipeRpcBackendOptions
(_transports, _channels). Systems uv-cuda_basic and uv-cuda_ipc send
cuda:0 tensors both ways (devices=[0], a device map {0: 0}): the stock
rows of a GPU host. Exit 77 with the reason where torch cannot be imported
(python3-torch is opt-in: it is large) or, for those, has no CUDA.
"""
import argparse
import json
import os
import socket
import sys
import time


def echo(t):
    return t


def parse_list(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", required=True)
    ap.add_argument("--role", required=True, choices=["server", "client"])
    ap.add_argument("--policy", default="reused", choices=["reused", "fresh"])
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--iters", required=True)
    ap.add_argument("--warmup", required=True)
    ap.add_argument("--addr")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--out")
    a = ap.parse_args()
    combos = {"uv-basic": (["uv"], ["basic"]), "shm-basic": (["shm"], ["basic"]),
              "shm-cma": (["shm"], ["cma"]),
              # cuda:0 tensors both ways (a device map), over a CUDA channel
              "uv-cuda_basic": (["uv"], ["cuda_basic", "basic"]),
              "uv-cuda_ipc": (["uv"], ["cuda_ipc", "basic"]),
              "uv-cuda_gdr": (["uv"], ["cuda_gdr", "basic"])}
    if a.system not in combos:
        sys.exit("torchrpc.py: unknown --system %r (%s)" % (a.system, ", ".join(combos)))
    try:
        import torch
        import torch.distributed.rpc as rpc
    except ImportError as e:
        print("torchrpc.py: torch is not importable here (%s): install Debian's python3-torch "
              "for these opt-in rows" % e, file=sys.stderr, flush=True)
        sys.exit(77)
    sizes, iters, warm = parse_list(a.sizes), parse_list(a.iters), parse_list(a.warmup)
    transports, channels = combos[a.system]
    cuda = "cuda" in a.system
    if cuda and not torch.cuda.is_available():
        print("torchrpc.py: %s needs a torch with CUDA and a GPU (torch %s: cuda %s)" % (
            a.system, torch.__version__, torch.version.cuda), file=sys.stderr, flush=True)
        sys.exit(77)
    if a.role == "server":
        # the rendezvous (TCPStore) listens where READY says
        s = socket.socket()
        s.bind((a.bind, 0))
        port = s.getsockname()[1]
        s.close()
        init = "tcp://%s:%d" % (a.bind, port)
        print("READY %s" % init, flush=True)
    else:
        init = a.addr
    extra = {"devices": [0]} if cuda else {}
    opts = rpc.TensorPipeRpcBackendOptions(init_method=init, num_worker_threads=8,
                                           rpc_timeout=600, _transports=transports,
                                           _channels=channels, **extra)
    if cuda and a.role == "client":
        opts.set_device_map("server", {0: 0})
    name, rank = ("server", 0) if a.role == "server" else ("client", 1)
    rpc.init_rpc(name, rank=rank, world_size=2, backend=rpc.BackendType.TENSORPIPE,
                 rpc_backend_options=opts)
    if a.role == "server":
        rpc.shutdown()  # waits until the client is done
        return
    results = []
    for size, n, w in zip(sizes, iters, warm):
        base = torch.arange(size, dtype=torch.int64).remainder_(251).to(torch.uint8)
        if cuda:
            base = base.to("cuda:0")
        buf = base.clone()
        samples, checked, wrong = [], 0, 0
        for k in range(w + n):
            t = base.clone() if a.policy == "fresh" else buf
            if size:
                t[0] = k % 256  # each call's tensor differs from the last
            t0 = time.perf_counter_ns()
            r = rpc.rpc_sync("server", echo, args=(t,))
            dt = time.perf_counter_ns() - t0
            checked += 1
            if r.numel() != size:
                wrong += size
            else:
                wrong += int((r != t).sum())
            if k >= w:
                samples.append(dt)
        results.append({"size": size, "iters": n, "warmup": w, "messages_checked": checked,
                        "wrong_bytes": wrong, "rtt_ns": samples})
    # which TensorPipe torch runs: Debian's torch links Debian's libtensorpipe
    tp = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libtensorpipe" in l})
    info = "torch %s, TensorPipe from %s, transports %s, channels %s" % (
        torch.__version__, ", ".join(tp) or "torch itself (no separate libtensorpipe loaded)",
        transports, channels)
    rpc.shutdown()
    doc = {"system": a.system, "policy": a.policy, "info": info, "sanitizer": "",
           "samples": "rtt_ns", "results": results}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.rename(tmp, a.out)


if __name__ == "__main__":
    main()
