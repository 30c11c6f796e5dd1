"""stock_rpc.py: stock TensorPipe's CUDA channels on a real GPU, through
PyTorch's RPC (the TensorPipe inside torch): a CUDA tensor goes to a second
process and comes back plus one, over cuda_basic and cuda_ipc, with the
second process in the same namespaces and in its own pid namespace (a
container: field failure T03). Prints one line per case with what happened.
Run by run.sh; standard library and torch only."""
import os
import subprocess
import sys
import time

SIZES = [1, 31, 32, 1 << 20, (1 << 20) + 1]


def add1(t):
    return t + 1


def worker(rank, channel, port):
    import torch
    import torch.distributed.rpc as rpc
    chans = [channel, "basic"] if channel != "basic" else ["basic"]
    opts = rpc.TensorPipeRpcBackendOptions(
        init_method="tcp://127.0.0.1:%d" % port, num_worker_threads=4, rpc_timeout=30,
        _transports=["uv"], _channels=chans, devices=[0])
    if rank == 0:
        opts.set_device_map("worker1", {0: 0})
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        for n in SIZES:
            x = torch.arange(n, device="cuda:0").to(torch.uint8)
            try:
                y = rpc.rpc_sync("worker1", add1, args=(x,))
                print("  n=%d ok=%s device=%s" % (n, torch.equal(y.cpu(), (x + 1).cpu()), y.device),
                      flush=True)
            except Exception as e:  # what stock does is the finding
                print("  n=%d error: %s" % (n, str(e).splitlines()[0][:300]), flush=True)
                break
    rpc.shutdown()


def case(channel, pidns, port):
    me = os.path.abspath(__file__)
    w1 = [sys.executable, me, "worker", "1", channel, str(port)]
    if pidns:
        w1 = ["unshare", "--pid", "--fork", "--mount-proc"] + w1
    start = time.time()
    p1 = subprocess.Popen(w1, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    p0 = subprocess.Popen([sys.executable, me, "worker", "0", channel, str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outs = []
    for p in (p0, p1):
        try:
            o, _ = p.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
            o += "\n  (killed after 150 s)"
        outs.append((p.returncode, o))
    print("%s, worker1 %s: %.1fs, exit %s/%s" % (
        channel, "in its own pid namespace" if pidns else "beside worker0",
        time.time() - start, outs[0][0], outs[1][0]), flush=True)
    for rc, o in outs:
        lines = [l for l in o.splitlines() if l.strip()]
        for l in lines[-12:]:
            print("    " + l[:300], flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    import torch
    print("torch %s, cuda %s, %s" % (torch.__version__, torch.version.cuda,
                                     torch.cuda.get_device_name(0)), flush=True)
    port = 29600
    for channel, pidns in (("cuda_basic", False), ("cuda_ipc", False), ("cuda_ipc", True),
                           ("cuda_basic", True)):
        case(channel, pidns, port)
        port += 1
