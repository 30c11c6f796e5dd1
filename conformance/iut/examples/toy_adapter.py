#!/usr/bin/env python3
"""toy_adapter.py - an agent-protocol adapter (spec/agent.md) in Python,
standard library only, over toypipe (a toy implementation; see toypipe.py).

It shows everything an adapter does: JSON lines on stdin and stdout, one
response per request in order, one event per callback of the implementation
(from its threads, each line written whole under one lock), buffers made
from (seed, len) with the generator of spec/agent.md 4.1, received buffers
reported as XXH3-64 checksums (4.2, through ctypes on Debian's
libxxhash.so.0). Like every adapter it adds no behaviour of its own: it never
retries, reorders or filters what the implementation does.

    tensorwire-conform --suite semantic --reference none \
        --iut toy='python3 conformance/iut/examples/toy_adapter.py' \
        --profiles conformance/iut/examples
"""

import array
import ctypes
import ctypes.util
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import toypipe  # noqa: E402

# spec/agent.md 9; TOY_AGENT_PROTOCOL pretends another one, to see a runner
# refuse it (CTest conformance.toy_protocol_refused)
PROTOCOL = int(os.environ.get("TOY_AGENT_PROTOCOL", "1"))
ADAPTER = "toy_adapter.py 0.1.0"

# ---- output: whole lines, one writer at a time (agent.md 2.3) -------------------
_out = threading.Lock()
_quiet = False  # after shutdown's response no event may follow (6.11)


def emit(obj):
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with _out:
        if _quiet and "event" in obj:
            return
        sys.stdout.write(line)
        sys.stdout.flush()


def ok(rid, **results):
    emit(dict(results, id=rid, ok=True))


def err(rid, kind, text, status=None):
    emit({"id": rid, "ok": False, "error": {"kind": kind, "status": status or kind, "text": text}})


def event(name, rid, error=None, **results):
    if error is None:
        emit(dict(results, event=name, id=rid, ok=True))
    else:
        emit({"event": name, "id": rid, "ok": False,
              "error": {"kind": error.kind, "status": "toypipe." + error.kind, "text": error.text}})


# ---- buffers (agent.md 4.1, 4.2) ---------------------------------------------------
# splitmix64 over many 64-bit words at once: each word sits in its own 128-bit
# lane of one Python integer, so one big-integer operation steps them all
# (a product of a 64-bit word and a 64-bit constant fits its lane).
M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
CHUNK_WORDS = 1 << 15
_lanes = {}


def _lane_consts(n):
    if n not in _lanes:
        low = int.from_bytes(b"\xff" * 8 + b"\x00" * 8, "little")
        ones = int.from_bytes((b"\x01" + b"\x00" * 15) * n, "little")
        _lanes[n] = (low * ones, ones)
    return _lanes[n]


def gen_chunks(seed, n):
    """The bytes of (seed, n), in chunks of at most 256 KiB."""
    k0 = 0
    words = (n + 7) // 8
    while k0 < words:
        w = min(CHUNK_WORDS, words - k0)
        low, ones = _lane_consts(w)
        idx = bytearray(16 * w)
        memoryview(idx).cast("Q")[0::2] = memoryview(array.array("Q", range(k0 + 1, k0 + w + 1)))
        z = (int.from_bytes(idx, "little") * GAMMA + seed * ones) & low
        z ^= (z >> 30) & low
        z = (z * 0xBF58476D1CE4E5B9) & low
        z ^= (z >> 27) & low
        z = (z * 0x94D049BB133111EB) & low
        z ^= (z >> 31) & low
        out = memoryview(z.to_bytes(16 * w, "little")).cast("Q")[0::2].tobytes()
        k0 += w
        yield out[: n - 8 * (k0 - w)] if k0 == words else out


def gen(seed, n):
    return b"".join(gen_chunks(seed, n))


_xxh = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
_xxh.XXH3_64bits.restype = ctypes.c_uint64
_xxh.XXH3_64bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def xxh3(buf):
    b = bytes(buf)
    return "%016x" % _xxh.XXH3_64bits(b, len(b))


def report(buf):
    return {"len": len(buf), "xxh3": xxh3(buf)}


def described(b):
    b = b or {}
    return int(b.get("len", 0)), int(b.get("seed", 0))


def gen_of(b):
    n, seed = described(b)
    return gen(seed, n)


def make_buffer(b):
    n, seed = described(b)
    return toypipe.Lazy(n, lambda: gen_chunks(seed, n)) if n > (1 << 20) else gen(seed, n)


def device_error(d):
    """None for cpu:0; otherwise (kind, text): a string that is not
    "<type>:<index>" is malformed (inval, agent.md 5), a well-formed other
    device one toypipe cannot place a buffer on (unsupported)."""
    if d == "cpu:0":
        return None
    t, sep, i = d.partition(":") if isinstance(d, str) else ("", "", "")
    if not (sep and t.isalpha() and t.islower() and i.isdigit()):
        return "inval", "%r is not a device (\"<type>:<index>\", agent.md 5)" % (d,)
    return "unsupported", "toypipe has CPU buffers only, not %s" % d


# ---- state -----------------------------------------------------------------------
ctx = None
has_transport = True  # the context asked for uv (or named no transports)
objs = {}        # "p1" / "l1" -> Pipe / Listener
descs = {}       # pipe name -> descriptors delivered and not read yet
_names = threading.Lock()
_count = [0, 0]


def name_of(obj):
    with _names:
        i = 0 if isinstance(obj, toypipe.Pipe) else 1
        _count[i] += 1
        n = ("p%d" if i == 0 else "l%d") % _count[i]
        objs[n] = obj
        descs.setdefault(n, [])
        return n


def lookup(req, key, rid):
    obj = objs.get(req.get(key))
    if obj is None:
        err(rid, "inval", "no %s named %r" % (key, req.get(key)))
    return obj


# ---- commands (agent.md 6) --------------------------------------------------------
def cmd_hello(rid, req):
    ok(rid, impl="toypipe", version="0.1.0", adapter=ADAPTER, protocol=PROTOCOL,
       transports=["uv"], channels=["basic"])


def cmd_context(rid, req):
    global ctx, has_transport
    if ctx is not None:
        return err(rid, "inval", "a second context in one session")
    for key, known in (("transports", "uv"), ("channels", "basic")):
        for e in req.get(key) or []:
            if e.get("kind", e.get("name")) != known:
                return err(rid, "unsupported", "toypipe has no %s kind %r" % (key[:-1], e.get("kind")))
    unhonoured = [{"name": m, "reason": "toypipe has no such bound"}
                  for m in ("handshake_timeout_ms", "operation_timeout_ms") if m in req]
    # spec/agent.md 6.2: an extension asked on that the IUT does not have
    unhonoured += [{"name": x, "reason": "toypipe implements no spec section 8 extension"}
                   for x, on in (req.get("extensions") or {}).items() if on is True]
    # "transports": [] is a context that can neither listen nor connect
    has_transport = req.get("transports") is None or len(req["transports"]) > 0
    ctx = toypipe.Context(req.get("name", ""))
    ok(rid, skipped=[], unhonoured=unhonoured)


def no_transport(rid):
    return err(rid, "unsupported", "the context has no transport")


def cmd_listen(rid, req):
    if ctx is None:
        return err(rid, "inval", "no context")
    if not has_transport:
        return no_transport(rid)
    try:
        l = ctx.listen(req["urls"][0])
    except (toypipe.ToyError, OSError) as e:
        return err(rid, getattr(e, "kind", "sys"), str(e))
    ok(rid, listener=name_of(l), urls=[l.url])


def cmd_accept(rid, req):
    l = lookup(req, "listener", rid)
    if l is not None:
        ok(rid)
        l.accept(lambda e, p: event("accept", rid, e, **({} if e else {"pipe": name_of(p)})))


def cmd_connect(rid, req):
    if ctx is None:
        return err(rid, "inval", "no context")
    if not has_transport:
        return no_transport(rid)
    try:
        p = ctx.connect(req["url"])
    except toypipe.ToyError as e:
        return err(rid, e.kind, e.text)
    ok(rid, pipe=name_of(p))


def cmd_write(rid, req):
    p = lookup(req, "pipe", rid)
    if p is None:
        return
    m = req.get("message") or {}
    for t in m.get("tensors") or []:
        for d in (t.get("source_device", "cpu:0"), t.get("target_device")):
            bad = d is not None and device_error(d)
            if bad:
                return err(rid, *bad)
    msg = {"metadata": gen_of(m.get("metadata")),
           "payloads": [(make_buffer(x), gen_of(x.get("metadata")))
                        for x in m.get("payloads") or []],
           "tensors": [(make_buffer(x), gen_of(x.get("metadata")),
                        x.get("source_device", "cpu:0"), x.get("target_device"))
                       for x in m.get("tensors") or []]}
    ok(rid)
    p.write(msg, lambda e: event("write", rid, e))


def cmd_read_descriptor(rid, req):
    p = lookup(req, "pipe", rid)
    if p is None:
        return
    pname = req["pipe"]

    def done(e, d):
        if e is not None:
            return event("read_descriptor", rid, e)
        with _names:
            descs[pname].append(d)
        md = lambda h: report(bytes.fromhex(h))  # noqa: E731
        event("read_descriptor", rid, descriptor={
            "metadata": md(d["metadata"]),
            "payloads": [{"len": x["len"], "metadata": md(x["metadata"])} for x in d["payloads"]],
            "tensors": [{"len": x["len"], "source_device": x["source_device"],
                         "target_device": x["target_device"], "metadata": md(x["metadata"])}
                        for x in d["tensors"]]})
    ok(rid)
    p.read_descriptor(done)


def cmd_read(rid, req):
    p = lookup(req, "pipe", rid)
    if p is None:
        return
    # the oldest descriptor not read yet; it stays so until the read is
    # handed to the pipe (a refused read may be asked again, agent.md 3.2)
    with _names:
        pending = descs[req["pipe"]]
        d = pending[0] if pending else None
    if d is None:
        return err(rid, "inval", "no descriptor delivered and not read on %s" % req["pipe"])
    wants = ((req.get("allocation") or {}).get("tensors")) or []
    devices = [(wants[i].get("device") if i < len(wants) and wants[i] else None)
               or t["target_device"] or "cpu:0" for i, t in enumerate(d["tensors"])]
    for dev in devices:
        bad = device_error(dev)
        if bad:
            return err(rid, *bad)
    try:
        pbufs = [memoryview(bytearray(x["len"])) for x in d["payloads"]]
        tbufs = [memoryview(bytearray(x["len"])) for x in d["tensors"]]
    except (MemoryError, OverflowError):
        # refused: the descriptor stays to be read again (agent.md 3.2)
        return err(rid, "nomem", "cannot allocate the message's %d bytes" %
                   sum(x["len"] for x in d["payloads"] + d["tensors"]))
    with _names:
        pending.pop(0)

    def done(e):
        if e is not None:
            return event("read", rid, e)
        event("read", rid, payloads=[report(b) for b in pbufs],
              tensors=[dict(report(b), device=dev) for b, dev in zip(tbufs, devices)])
    ok(rid)
    p.read((pbufs, tbufs), done)


def cmd_info(rid, req):
    p = lookup(req, "pipe", rid)
    if p is not None:
        try:
            ok(rid, **p.info())
        except toypipe.ToyError as e:
            err(rid, e.kind, e.text)


def cmd_close(rid, req):
    if req.get("context"):
        if ctx is not None:
            ctx.close()
        return ok(rid)
    obj = lookup(req, "pipe" if "pipe" in req else "listener", rid)
    if obj is not None:
        ok(rid)
        obj.close()


def shutdown():
    global _quiet
    if ctx is not None:
        ctx.close()
        ctx.join()
    with _out:
        _quiet = True


def cmd_shutdown(rid, req):
    shutdown()
    with _out:
        sys.stdout.write(json.dumps({"id": rid, "ok": True}) + "\n")
        sys.stdout.flush()


COMMANDS = {n[4:]: f for n, f in globals().items() if n.startswith("cmd_")}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            rid = req["id"] if isinstance(req, dict) else None
        except ValueError:
            req, rid = None, None
        if not isinstance(rid, int) or isinstance(rid, bool) or rid < 0:
            err(None, "inval", "request without a non-negative integer 'id'")
            continue
        fn = COMMANDS.get(req.get("cmd"))
        if fn is None:
            err(rid, "unsupported", "toy_adapter.py has no command %r" % req.get("cmd"))
            continue
        try:
            fn(rid, req)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            err(rid, "inval", "bad request: %s: %s" % (type(e).__name__, e))
    shutdown()  # stdin ended (agent.md 2.4)


if __name__ == "__main__":
    main()
