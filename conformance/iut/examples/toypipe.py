"""toypipe - a toy implementation of tensor pipes, in Python, standard library only.

It exists to show that an implementation with no C at all can be gated with
tensorwire's suites (docs/gate.md): toy_adapter.py drives it through the agent
protocol (spec/agent.md). It is NOT TensorPipe's wire protocol: one TCP
connection per pipe, framed its own way, CPU tensors only. What it does keep
is the semantics the semantic suite checks: messages in order, each callback
exactly once, a write reported only once its bytes are in the kernel, reads
that take from the socket only when asked (so a peer that does not read
stalls the writer), what was written before a graceful close delivered, a
graceful close told apart from a death.

Framing, on the one connection of a pipe (all integers little-endian):
  hello:    u64 length, then UTF-8 JSON {"name": <context name>}   (client first)
  message:  u64 length, then UTF-8 JSON header {"metadata": hex,
            "payloads": [{"len", "metadata": hex}],
            "tensors": [{"len", "metadata": hex, "source_device", "target_device"}]},
            then every payload's bytes, then every tensor's bytes
  goodbye:  u64 0 (a graceful close; an end without it is a reset)

Callbacks run on the pipe's and listener's threads.
"""

import json
import socket
import struct
import threading

CLOSED, EOF, RESET, INVAL, UNSUPPORTED, SYS = "closed", "eof", "reset", "inval", "unsupported", "sys"


class ToyError(Exception):
    """An operation's failure: kind is one of the agent protocol's error kinds."""

    def __init__(self, kind, text):
        super().__init__(text)
        self.kind = kind
        self.text = text


def _parse_url(url):
    if not url.startswith("uv://"):
        raise ToyError(UNSUPPORTED, "toypipe: only uv:// URLs: %r" % url)
    host, _, port = url[5:].rpartition(":")
    if not host or not port.isdigit():
        raise ToyError(INVAL, "toypipe: bad URL %r (want uv://HOST:PORT)" % url)
    return host.strip("[]"), int(port)


def _recv_exact(sock, n, into=None):
    """n bytes (into a memoryview when given); None at a clean end before the first byte."""
    buf = into if into is not None else memoryview(bytearray(n))
    got = 0
    while got < n:
        k = sock.recv_into(buf[got:], n - got)
        if k == 0:
            if got == 0:
                return None
            raise ToyError(RESET, "toypipe: the connection ended inside a frame")
        got += k
    return buf


class Context:
    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.closed = False
        self.pipes = []
        self.listeners = []

    def listen(self, url):
        host, port = _parse_url(url)
        l = Listener(self, host, port)
        with self.lock:
            if self.closed:
                l.close()
                raise ToyError(CLOSED, "toypipe: listen: the context is closed")
            self.listeners.append(l)
        return l

    def connect(self, url):
        host, port = _parse_url(url)
        p = Pipe(self, None, is_server=False)
        with self.lock:
            if self.closed:
                raise ToyError(CLOSED, "toypipe: connect: the context is closed")
            self.pipes.append(p)
        t = threading.Thread(target=p._connect, args=(host, port), daemon=True)
        p.threads.append(t)
        t.start()
        return p

    def close(self):
        with self.lock:
            self.closed = True
            pipes, listeners = list(self.pipes), list(self.listeners)
        for l in listeners:
            l.close()
        for p in pipes:
            p.close()

    def join(self):
        """Waits until every thread of the context ended and every callback ran."""
        with self.lock:
            pipes, listeners = list(self.pipes), list(self.listeners)
        for l in listeners:
            l._join()
        for p in pipes:
            p._join()


class Listener:
    def __init__(self, ctx, host, port):
        self.ctx = ctx
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(128)
        self.url = "uv://%s:%d" % (host if ":" not in host else "[%s]" % host, self.sock.getsockname()[1])
        self.lock = threading.Lock()
        self.closed = False
        self.waiting = []   # accept callbacks armed
        self.ready = []     # pipes whose hello arrived, not handed out yet
        self.threads = [threading.Thread(target=self._run, daemon=True)]
        self.threads[0].start()

    def accept(self, cb):
        with self.lock:
            if not self.closed:
                if self.ready:
                    p = self.ready.pop(0)
                else:
                    self.waiting.append(cb)
                    return
        if self.closed:
            cb(ToyError(CLOSED, "toypipe: accept: the listener is closed"), None)
        else:
            cb(None, p)

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                break
            t = threading.Thread(target=self._hello, args=(conn,), daemon=True)
            with self.lock:
                self.threads.append(t)
            t.start()
        with self.lock:
            waiting, self.waiting = self.waiting, []
        for cb in waiting:
            cb(ToyError(CLOSED, "toypipe: accept: the listener is closed"), None)

    def _hello(self, conn):
        try:
            conn.settimeout(10)
            head = _recv_exact(conn, 8)
            n = struct.unpack("<Q", head)[0] if head is not None else 0
            if head is None or n == 0 or n > 4096:
                raise ToyError(EOF, "no hello")
            name = json.loads(bytes(_recv_exact(conn, n)).decode())["name"]
            conn.settimeout(None)
        except Exception:
            conn.close()  # a bad connection never fails the listener
            return
        p = Pipe(self.ctx, conn, is_server=True, remote_name=name)
        with self.ctx.lock:
            self.ctx.pipes.append(p)
        p._start()
        with self.lock:
            closed = self.closed
            cb = self.waiting.pop(0) if self.waiting and not closed else None
            if cb is None and not closed:
                self.ready.append(p)
        if closed:
            p.close()
        elif cb:
            cb(None, p)

    def _join(self):
        while True:
            with self.lock:
                live = [t for t in self.threads if t.is_alive()]
            if not live:
                return
            for t in live:
                t.join()

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            ready, self.ready = self.ready, []
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for p in ready:
            p.close()


class Pipe:
    """One pipe: a writer thread sends queued messages in order; a reader
    thread takes a message's header from the socket only for a pending
    read_descriptor, and its bodies only for a pending read."""

    def __init__(self, ctx, sock, is_server, remote_name=""):
        self.ctx = ctx
        self.sock = sock
        self.is_server = is_server
        self.remote_name = remote_name
        self.cv = threading.Condition()
        self.err = None          # ToyError once the pipe failed or closed
        self.writes = []         # (message, cb) not yet sent
        self.reads = []          # ("desc", cb) or ("read", (alloc, cb))
        self.established = is_server
        self.threads = []

    # -- the application's calls ------------------------------------------------
    def write(self, msg, cb):
        """msg: {"metadata": bytes, "payloads": [(data, metadata)],
        "tensors": [(data, metadata, source_device, target_device)]}; data may
        be a callable giving the bytes in chunks (lazily generated)."""
        self._queue(self.writes, (msg, cb))

    def read_descriptor(self, cb):
        self._queue(self.reads, ("desc", cb))

    def read(self, allocation, cb):
        """allocation: (payload buffers, tensor buffers), writable memoryviews."""
        self._queue(self.reads, ("read", (allocation, cb)))

    def close(self):
        self._fail(ToyError(CLOSED, "toypipe: the pipe was closed locally"), goodbye=True)

    def info(self):
        if not self.established:
            raise ToyError(INVAL, "toypipe: info: the pipe is not established yet")
        return {"transport": "uv", "channel": "basic", "remote_name": self.remote_name,
                "is_server": self.is_server}

    # -- inside ----------------------------------------------------------------
    def _queue(self, q, item):
        with self.cv:
            err = self.err
            if err is None:
                q.append(item)
                self.cv.notify_all()
                return
        cb = item[1] if item[0] != "read" else item[1][1]
        if q is self.writes:
            cb(err)
        elif item[0] == "desc":
            cb(err, None)
        else:
            cb(err)

    def _connect(self, host, port):
        try:
            s = socket.create_connection((host, port), timeout=20)
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = json.dumps({"name": self.ctx.name}).encode()
            s.sendall(struct.pack("<Q", len(hello)) + hello)
        except OSError as e:
            self._fail(ToyError(SYS, "toypipe: connect to %s:%d: %s" % (host, port, e)))
            return
        with self.cv:
            if self.err is not None:
                s.close()
                return
            self.sock = s
            self.established = True
        self._start()

    def _start(self):
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for fn in (self._writer, self._reader):
            t = threading.Thread(target=fn, daemon=True)
            self.threads.append(t)
            t.start()

    def _join(self):
        for t in list(self.threads):
            if t is not threading.current_thread():
                t.join()
        with self.cv:
            sock, self.sock = self.sock, None
        if sock is not None and self.threads:
            sock.close()

    def _fail(self, err, goodbye=False):
        """The first failure (or the local close) wins; every pending callback
        gets it once. A close says goodbye unless a write is half sent."""
        with self.cv:
            if self.err is not None:
                return
            self.err = err
            writes, self.writes = self.writes, []
            reads, self.reads = self.reads, []
            sending = getattr(self, "sending", False)
            self.cv.notify_all()
            sock = self.sock
        if sock is not None:
            try:
                if goodbye and not sending:
                    sock.sendall(struct.pack("<Q", 0))
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for _, cb in writes:
            cb(err)
        for kind, arg in reads:
            if kind == "desc":
                arg(err, None)
            else:
                arg[1](err)

    def _writer(self):
        while True:
            with self.cv:
                while not self.writes and self.err is None:
                    self.cv.wait()
                if self.err is not None:
                    return
                msg, cb = self.writes[0]
                self.sending = True
            try:
                self._send(msg)
            except OSError as e:
                with self.cv:
                    self.sending = False
                self._fail(self.err or ToyError(RESET, "toypipe: write: %s" % e))
                return
            with self.cv:
                self.sending = False
                if self.err is not None or not self.writes or self.writes[0][1] is not cb:
                    return  # failed meanwhile: the failure ran the callback
                self.writes.pop(0)
            cb(None)

    def _send(self, msg):
        head = json.dumps({
            "metadata": msg["metadata"].hex(),
            "payloads": [{"len": _length(d), "metadata": m.hex()} for d, m in msg["payloads"]],
            "tensors": [{"len": _length(d), "metadata": m.hex(), "source_device": s,
                         "target_device": t} for d, m, s, t in msg["tensors"]],
        }).encode()
        self.sock.sendall(struct.pack("<Q", len(head)) + head)
        for data in [d for d, _ in msg["payloads"]] + [t[0] for t in msg["tensors"]]:
            for chunk in (data() if callable(data) else [data]):
                self.sock.sendall(chunk)

    def _reader(self):
        while True:
            with self.cv:
                while not self.reads and self.err is None:
                    self.cv.wait()
                if self.err is not None:
                    return
                kind, arg = self.reads[0]
            try:
                if kind == "desc":
                    head = _recv_exact(self.sock, 8)
                    n = struct.unpack("<Q", head)[0] if head is not None else 0
                    if head is None:
                        raise ToyError(RESET, "toypipe: the peer went away without a goodbye")
                    if n == 0:
                        raise ToyError(EOF, "toypipe: the peer closed the pipe")
                    desc = json.loads(bytes(_recv_exact(self.sock, n)).decode())
                    self.pending_desc = desc
                    result = (None, desc)
                else:
                    (pbufs, tbufs), _ = arg
                    for buf in list(pbufs) + list(tbufs):
                        if len(buf) and _recv_exact(self.sock, len(buf), buf) is None:
                            raise ToyError(RESET, "toypipe: the peer went away inside a message")
                    result = (None,)
            except (OSError, ToyError) as e:
                self._fail(e if isinstance(e, ToyError) else ToyError(RESET, "toypipe: read: %s" % e))
                return
            with self.cv:
                if self.err is not None or not self.reads or self.reads[0][1] is not arg:
                    return
                self.reads.pop(0)
            if kind == "desc":
                arg(*result)
            else:
                arg[1](None)


def _length(data):
    return data.length if callable(data) else len(data)


class Lazy:
    """Bytes made as they are sent: length, and a call that yields chunks."""

    def __init__(self, length, chunks):
        self.length = length
        self.chunks = chunks

    def __call__(self):
        return self.chunks()
