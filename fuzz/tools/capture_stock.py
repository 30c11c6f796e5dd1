#!/usr/bin/env python3
"""capture_stock.py - records real traffic between two stock TensorPipe
processes and turns it into fuzz seeds (fuzz/corpus/<target>/stock-*).

Usage: python3 fuzz/tools/capture_stock.py ADAPTER
  ADAPTER: the stock adapter of the conformance harness (spec/agent.md),
  e.g. build/<dir>/conformance/tw-iut-stock.

Two adapter processes (server and client) are driven through the agent
protocol. The client connects through a TCP relay in this script, which
records the bootstrap connection in both directions: hello, Brochure,
BrochureAnswer and, when the transport stays uv, every Descriptor and payload
frame of the client's messages (spec/wire.md 3.9, 3.10). The other connections
go straight to the server's advertised address and are not recorded.

Outputs (files named stock-<scenario>-...):
  uv_frame/   the two recorded streams, whole
  packet/ brochure/ brochure_answer/ descriptor/   the frame bodies
  nop_value/  every frame body
Existing stock-* seeds are replaced. Needs only python3 and the adapter.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, 'fuzz', 'corpus')


class Adapter:
    """One adapter process; requests are answered in order, events queue up."""

    def __init__(self, cmd, name):
        self.name = name
        self.proc = subprocess.Popen([cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(os.devnull, 'w'), text=True, bufsize=1)
        self.next_id = 1
        self.events = []

    def request(self, cmd, **args):
        rid = self.next_id
        self.next_id += 1
        args.update(id=rid, cmd=cmd)
        self.proc.stdin.write(json.dumps(args) + '\n')
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError('%s: adapter exited during %s' % (self.name, cmd))
            msg = json.loads(line)
            if 'event' in msg:
                self.events.append(msg)
            elif msg.get('id') == rid:
                if not msg.get('ok'):
                    raise RuntimeError('%s: %s failed: %s' % (self.name, cmd, msg))
                return rid, msg

    def wait_event(self, rid):
        while True:
            for e in self.events:
                if e['id'] == rid:
                    self.events.remove(e)
                    if not e.get('ok'):
                        raise RuntimeError('%s: event failed: %s' % (self.name, e))
                    return e
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError('%s: adapter exited' % self.name)
            msg = json.loads(line)
            if 'event' in msg:
                self.events.append(msg)

    def finish(self):
        try:
            self.request('shutdown')
        finally:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


class Relay:
    """Accepts one connection and forwards it to `target`, recording both ways."""

    def __init__(self, target):
        self.target = target
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.c2s = bytearray()
        self.s2c = bytearray()
        self.threads = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _pump(self, src, dst, record):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                record += data
                dst.sendall(data)
        except OSError:
            pass
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self):
        client, _ = self.sock.accept()
        host, port = self.target.rsplit(':', 1)
        server = socket.create_connection((host, int(port)))
        for args in ((client, server, self.c2s), (server, client, self.s2c)):
            t = threading.Thread(target=self._pump, args=args, daemon=True)
            t.start()
            self.threads.append(t)


def frames(stream):
    out, pos = [], 0
    while pos + 8 <= len(stream):
        n = struct.unpack_from('<Q', stream, pos)[0]
        if pos + 8 + n > len(stream):
            break
        out.append(bytes(stream[pos + 8:pos + 8 + n]))
        pos += 8 + n
    return out


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def buf(n, seed):
    return {'len': n, 'seed': seed}


MESSAGES = [
    {'metadata': buf(5, 1)},
    {'metadata': buf(0, 2), 'payloads': [{'len': 8, 'seed': 3, 'metadata': buf(2, 4)},
                                          {'len': 0, 'seed': 5}]},
    {'metadata': buf(300, 6), 'tensors': [
        {'len': 16, 'seed': 7, 'metadata': buf(2, 8), 'target_device': None},
        {'len': 0, 'seed': 9, 'target_device': 'cpu:0'},
        {'len': 70000, 'seed': 10, 'metadata': buf(200, 11), 'target_device': 'cpu:0'}]},
    {'metadata': buf(1, 12), 'payloads': [{'len': 1, 'seed': 13}],
     'tensors': [{'len': 1, 'seed': 14, 'target_device': None}] * 3},
]

SCENARIOS = {
    # transports, channels; the bootstrap stays uv when it is the only transport
    'uv-basic': ([('uv', 0)], [('basic', 0, None)]),
    'uv-basic-mpt': ([('uv', 0)], [('basic', 0, None), ('mpt_uv', 10, {'lanes': 2})]),
    'uv-shm-cma-mpt': ([('uv', 0), ('shm', 10)],
                       [('basic', 0, None), ('cma', 20, None), ('mpt_uv', 10, {'lanes': 3})]),
}


def run(adapter, scenario):
    transports, channels = SCENARIOS[scenario]
    ctx = dict(transports=[{'name': n, 'kind': n, 'priority': p} for n, p in transports],
               channels=[dict({'name': n, 'kind': 'mpt' if n.startswith('mpt') else n,
                               'priority': p}, **({'options': o} if o else {}))
                         for n, p, o in channels])
    server = Adapter(adapter, 'server')
    client = Adapter(adapter, 'client')
    try:
        server.request('context', name='server-' + scenario, **ctx)
        client.request('context', name='client-' + scenario, **ctx)
        urls = ['uv://127.0.0.1:0'] + (['shm://'] if any(t == 'shm' for t, _ in transports) else [])
        _, lst = server.request('listen', urls=urls)
        uv_addr = lst['urls'][0][len('uv://'):]
        acc, _ = server.request('accept', listener=lst['listener'])
        relay = Relay(uv_addr)
        _, con = client.request('connect', url='uv://127.0.0.1:%d' % relay.port)
        pipe_c = con['pipe']
        pipe_s = server.wait_event(acc)['pipe']
        for m in MESSAGES:
            w, _ = client.request('write', pipe=pipe_c, message=m)
            rd, _ = server.request('read_descriptor', pipe=pipe_s)
            server.wait_event(rd)
            r, _ = server.request('read', pipe=pipe_s)
            server.wait_event(r)
            client.wait_event(w)
    finally:
        client.finish()
        server.finish()
    for t in relay.threads:
        t.join(timeout=10)
    return bytes(relay.c2s), bytes(relay.s2c)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for target in os.listdir(CORPUS):
        for f in os.listdir(os.path.join(CORPUS, target)):
            if f.startswith('stock-'):
                os.remove(os.path.join(CORPUS, target, f))
    for scenario in SCENARIOS:
        c2s, s2c = run(sys.argv[1], scenario)
        put('uv_frame', 'stock-%s-c2s' % scenario, c2s)
        put('uv_frame', 'stock-%s-s2c' % scenario, s2c)
        cf, sf = frames(c2s), frames(s2c)
        print('%s: %d frames client->server, %d server->client' % (scenario, len(cf), len(sf)))
        for i, body in enumerate(cf):
            name = 'stock-%s-c2s-%02d' % (scenario, i)
            put('nop_value', name, body)
            if i == 0:
                put('packet', name, body)
            elif i == 1:
                put('brochure', name, body)
            elif body[:2] == b'\xb9\x03':
                put('descriptor', name, body)
        for i, body in enumerate(sf):
            name = 'stock-%s-s2c-%02d' % (scenario, i)
            put('nop_value', name, body)
            if i == 0:
                put('brochure_answer', name, body)


if __name__ == '__main__':
    main()
