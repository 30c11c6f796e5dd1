"""stock_rpc.py: stock TensorPipe's CUDA channels on a real GPU, through
PyTorch's RPC (the TensorPipe inside torch): a CUDA tensor goes to a second
process and comes back plus one, over cuda_basic and cuda_ipc, with the
second process in the same namespaces and in its own pid namespace (a
container: field failure T03), then device tensors of 1.5 and 4.5 GiB over
both (the multi-GiB messages of T19). Prints one line per case with what
happened.
Run by run.sh; standard library and torch only."""
import os
import subprocess
import sys
import time

SIZES = [1, 31, 32, 1 << 20, (1 << 20) + 1]
LARGE = [1536 << 20, 4608 << 20]


def add1(t):
    return t + 1


def worker(rank, channel, port, large=False):
    import torch
    import torch.distributed.rpc as rpc
    chans = [channel, "basic"] if channel != "basic" else ["basic"]
    opts = rpc.TensorPipeRpcBackendOptions(
        init_method="tcp://127.0.0.1:%d" % port, num_worker_threads=4,
        rpc_timeout=120 if large else 30,
        _transports=["uv"], _channels=chans, devices=[0])
    if rank == 0:
        opts.set_device_map("worker1", {0: 0})
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        for n in (LARGE if large else SIZES):
            if large:  # arange would make int64s first: 8 bytes each
                x = torch.empty(n, dtype=torch.uint8, device="cuda:0").random_(0, 256)
            else:
                x = torch.arange(n, device="cuda:0").to(torch.uint8)
            try:
                start = time.time()
                y = rpc.rpc_sync("worker1", add1, args=(x,))
                took = time.time() - start
                ok = torch.equal(y, x + 1) if large else torch.equal(y.cpu(), (x + 1).cpu())
                print("  n=%d ok=%s device=%s%s" % (
                    n, ok, y.device, " (round trip %.2f s)" % took if large else ""), flush=True)
                del y
            except Exception as e:  # what stock does is the finding
                print("  n=%d error: %s" % (n, str(e).splitlines()[0][:300]), flush=True)
                break
    rpc.shutdown()


def case(channel, pidns, port, large=False):
    me = os.path.abspath(__file__)
    extra = ["large"] if large else []
    w1 = [sys.executable, me, "worker", "1", channel, str(port)] + extra
    if pidns:
        w1 = ["unshare", "--pid", "--fork", "--mount-proc"] + w1
    start = time.time()
    p1 = subprocess.Popen(w1, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    p0 = subprocess.Popen([sys.executable, me, "worker", "0", channel, str(port)] + extra,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outs = []
    limit = 120 if large else 150
    for p in (p0, p1):
        try:
            o, _ = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
            o += "\n  (killed after %d s)" % limit
        outs.append((p.returncode, o))
    print("%s%s, worker1 %s: %.1fs, exit %s/%s" % (
        channel, ", 1.5 and 4.5 GiB" if large else "",
        "in its own pid namespace" if pidns else "beside worker0",
        time.time() - start, outs[0][0], outs[1][0]), flush=True)
    for rc, o in outs:
        lines = [l for l in o.splitlines() if l.strip()]
        for l in lines[-12:]:
            print("    " + l[:300], flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5:] == ["large"])
        sys.exit(0)
    import torch
    print("torch %s, cuda %s, %s" % (torch.__version__, torch.version.cuda,
                                     torch.cuda.get_device_name(0)), flush=True)
    port = 29600
    for channel, pidns in (("cuda_basic", False), ("cuda_ipc", False), ("cuda_ipc", True),
                           ("cuda_basic", True)):
        case(channel, pidns, port)
        port += 1
    if os.environ.get("STOCK_RPC_LARGE", "1") != "0":
        for channel in ("cuda_ipc", "cuda_basic"):
            case(channel, False, port, large=True)
            port += 1
