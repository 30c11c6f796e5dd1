#!/usr/bin/env python3
"""requests_test.py ADAPTER... - an adapter's answers to requests it must
refuse or survive (spec/agent.md 3.2, 3.3, 6.2), fed line by line:

  * a read refused for its arguments leaves the descriptor to be read again;
  * a length no machine can allocate is answered nomem, not a crash: at the
    write, or (an adapter that makes the bytes as they are sent) at the
    read of its descriptor;
  * an unknown command whose name is cut inside a character still gets an
    error object naming it;
  * an unknown transport kind fails the context request with unsupported;
  * a context with no transport answers listen and connect unsupported;
  * the adapter exits 0 at the end of its input.

Exit 0 when every adapter given answers so, 1 otherwise (each problem named).
"""
import json
import os
import subprocess
import sys


def adapter_env():
    """The sanitizer options the wire fuzzer gives the adapters it starts
    (conformance/wirefuzz/exec.c, prepare_env): an allocation that cannot be
    had fails as in a release build (NULL), nothing above 1 GiB is handed
    out. Options already set win."""
    env = dict(os.environ)
    cur = env.get("ASAN_OPTIONS", "")
    for opt in ("allocator_may_return_null=1", "max_allocation_size_mb=1024"):
        if opt.split("=")[0] not in cur:
            cur = cur + (":" if cur else "") + opt
    env["ASAN_OPTIONS"] = cur
    return env


class Adapter:
    def __init__(self, cmd):
        self.cmd = cmd
        # stderr is the test's own: a long sanitizer report at exit must
        # not fill an unread pipe
        self.p = subprocess.Popen([cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  env=adapter_env())
        self.next_id = 1
        self.events = {}

    def call(self, req):
        """Sends req, returns its response; events seen meanwhile are kept."""
        rid = self.next_id
        self.next_id += 1
        line = json.dumps(dict(req, id=rid), ensure_ascii=False).encode()
        self.p.stdin.write(line + b"\n")
        self.p.stdin.flush()
        while True:
            out = self.p.stdout.readline()
            if not out:
                raise RuntimeError("%s: no answer to %s (its stderr is above)" % (
                    self.cmd, req.get("cmd")))
            m = json.loads(out)
            if "event" in m:
                self.events[m["id"]] = m
            elif m.get("id") == rid:
                return rid, m

    def event(self, rid):
        while rid not in self.events:
            out = self.p.stdout.readline()
            if not out:
                raise RuntimeError("%s: no event for request %d" % (self.cmd, rid))
            m = json.loads(out)
            if "event" in m:
                self.events[m["id"]] = m
        return self.events[rid]

    def end(self):
        self.p.stdin.close()
        try:
            return self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return "still running 30 s after the end of its input"


def kind(resp):
    err = resp.get("error")
    return err.get("kind") if isinstance(err, dict) else None


def check(cmd):
    problems = []

    def expect(what, cond, got):
        if not cond:
            problems.append("%s: %s; got %s" % (cmd, what, json.dumps(got)[:300]))

    a = Adapter(cmd)
    a.call({"cmd": "hello"})
    a.call({"cmd": "context", "name": "c"})
    _, r = a.call({"cmd": "listen", "urls": ["uv://127.0.0.1:0"]})
    lid, url = r["listener"], r["urls"][0]
    acc, _ = a.call({"cmd": "accept", "listener": lid})
    _, r = a.call({"cmd": "connect", "url": url})
    client, server = r["pipe"], a.event(acc)["pipe"]
    w, _ = a.call({"cmd": "write", "pipe": client,
                   "message": {"tensors": [{"len": 8, "seed": 3, "target_device": "cpu:0"}]}})
    rd, _ = a.call({"cmd": "read_descriptor", "pipe": server})
    a.event(rd)
    _, r = a.call({"cmd": "read", "pipe": server, "allocation": {"tensors": [{"device": "bogus"}]}})
    expect("a read with a malformed device is refused with inval", kind(r) == "inval", r)
    rr, r = a.call({"cmd": "read", "pipe": server})
    expect("the refused read's descriptor can still be read", r.get("ok") is True, r)
    if r.get("ok") is True:
        ev = a.event(rr)
        expect("the read delivers the 8-byte tensor",
               ev.get("ok") is True and ev["tensors"][0]["len"] == 8, ev)
    a.event(w)
    _, r = a.call({"cmd": "write", "pipe": client,
                   "message": {"tensors": [{"len": (1 << 40) + 1}]}})
    if r.get("ok") is True:
        # taken: its bytes are made as they go; the read must be refused
        rd, _ = a.call({"cmd": "read_descriptor", "pipe": server})
        a.event(rd)
        _, r = a.call({"cmd": "read", "pipe": server})
    expect("a write of 1 TiB + 1, or else the read of its descriptor, is answered nomem",
           kind(r) == "nomem", r)
    _, r = a.call({"cmd": "a" * 63 + "\u00e9"})
    expect("an unknown command cut inside a character gets an unsupported error",
           kind(r) == "unsupported", r)
    a.call({"cmd": "shutdown"})
    ended = [a.end()]

    b = Adapter(cmd)
    b.call({"cmd": "hello"})
    _, r = b.call({"cmd": "context", "name": "c",
                   "transports": [{"name": "uv", "kind": "frobnicated"}]})
    expect("an unknown transport kind fails the context with unsupported",
           kind(r) == "unsupported", r)
    ended.append(b.end())

    c = Adapter(cmd)
    c.call({"cmd": "hello"})
    c.call({"cmd": "context", "name": "c", "transports": [], "channels": []})
    _, r = c.call({"cmd": "listen", "urls": ["uv://127.0.0.1:0"]})
    expect("listen with no transport is unsupported", kind(r) == "unsupported", r)
    _, r = c.call({"cmd": "connect", "url": "uv://127.0.0.1:1"})
    expect("connect with no transport is unsupported", kind(r) == "unsupported", r)
    ended.append(c.end())
    expect("the adapter exits 0 at the end of its input, every time", ended == [0, 0, 0], ended)
    return problems


def main():
    problems = []
    for cmd in sys.argv[1:]:
        try:
            problems += check(cmd)
        except (RuntimeError, ValueError, KeyError, BrokenPipeError) as e:
            problems.append("%s: %s" % (cmd, e))
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("PASS: %d adapter(s) answered every request as spec/agent.md says" % (len(sys.argv) - 1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
