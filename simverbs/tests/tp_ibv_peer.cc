// Stock TensorPipe (Debian's libtensorpipe, unmodified) with its ibv
// transport on simverbs. The ibv transport dlopen()s libibverbs.so.1, which
// simverbs-run points at simverbs.
//   sv_tp_ibv_peer                   listener and client pipe in one process
//   sv_tp_ibv_peer serve ADDR PORT   echo every message back (one pipe)
//   sv_tp_ibv_peer connect ADDR PORT send messages, check the echoes
// Payloads, tensors and metadata are checked byte for byte. Exit 0 = all
// intact; 77 = SKIP (the transport is not viable).
#include <tensorpipe/tensorpipe.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace tp = tensorpipe;

static std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 9));
  return v;
}

static const size_t kSizes[] = {1, 100, 4096, 65536, 1 << 20, 8 << 20};

struct Received {
  std::string error, metadata;
  std::vector<uint8_t> payload, tensor;
};

// Reads one message from a pipe into fresh buffers.
static Received receive(const std::shared_ptr<tp::Pipe>& pipe) {
  Received r;
  std::promise<void> done;
  pipe->readDescriptor([&](const tp::Error& err, tp::Descriptor d) {
    if (err) {
      r.error = err.what();
      done.set_value();
      return;
    }
    r.metadata = d.metadata;
    r.payload.resize(d.payloads.at(0).length);
    r.tensor.resize(d.tensors.at(0).length);
    tp::Allocation a;
    a.payloads.resize(1);
    a.payloads[0].data = r.payload.data();
    a.tensors.resize(1);
    a.tensors[0].buffer = tp::CpuBuffer{r.tensor.data()};
    pipe->read(std::move(a), [&](const tp::Error& e2) {
      if (e2) r.error = e2.what();
      done.set_value();
    });
  });
  done.get_future().get();
  return r;
}

// Starts a write; the future completes with its error text ("" = fine). A
// write may only complete once the peer reads it.
static std::future<std::string> send(const std::shared_ptr<tp::Pipe>& pipe,
                                     const std::string& meta, std::vector<uint8_t>& payload,
                                     std::vector<uint8_t>& tensor) {
  tp::Message msg;
  msg.metadata = meta;
  msg.payloads.push_back({payload.data(), payload.size(), "p"});
  tp::Message::Tensor t;
  t.buffer = tp::CpuBuffer{tensor.data()};
  t.length = tensor.size();
  msg.tensors.push_back(t);
  auto wrote = std::make_shared<std::promise<std::string>>();
  auto fut = wrote->get_future();
  pipe->write(std::move(msg),
              [wrote](const tp::Error& err) { wrote->set_value(err ? err.what() : ""); });
  return fut;
}

static std::shared_ptr<tp::Pipe> accept_one(const std::shared_ptr<tp::Listener>& listener) {
  std::promise<std::shared_ptr<tp::Pipe>> accepted;
  listener->accept([&](const tp::Error& err, std::shared_ptr<tp::Pipe> pipe) {
    if (err) std::printf("accept: %s\n", err.what().c_str());
    accepted.set_value(err ? nullptr : pipe);
  });
  return accepted.get_future().get();
}

// Sends every size over 'out' and checks what comes back on 'in'.
static int exchange(const std::shared_ptr<tp::Pipe>& out, const std::shared_ptr<tp::Pipe>& in,
                    const char* what) {
  int passed = 0, failed = 0;
  unsigned seed = 1;
  for (size_t n : kSizes) {
    auto payload = pattern(n / 2 + 1, static_cast<uint8_t>(seed++));
    auto tensor = pattern(n, static_cast<uint8_t>(seed++));
    auto p2 = payload, t2 = tensor;
    std::string meta = "message of " + std::to_string(n);
    auto writing = send(out, meta, p2, t2);
    Received r = receive(in);
    std::string we = writing.get();
    bool ok = we.empty() && r.error.empty() && r.payload == payload && r.tensor == tensor &&
              r.metadata == meta;
    std::printf("%s - %zu-byte tensor %s%s%s%s%s\n", ok ? "ok" : "not ok", n, what,
                we.empty() ? "" : " write error: ", we.c_str(),
                r.error.empty() ? "" : " read error: ", r.error.c_str());
    (ok ? passed : failed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

static int serve(const std::shared_ptr<tp::Context>& ctx, const std::string& url) {
  auto listener = ctx->listen({url});
  std::printf("listening on %s\n", listener->url("ibv").c_str());
  std::fflush(stdout);
  auto pipe = accept_one(listener);
  if (!pipe) return 1;
  int echoed = 0;
  for (;;) {
    Received r = receive(pipe);
    if (!r.error.empty()) break;  // the client closed its pipe
    std::string e = send(pipe, r.metadata, r.payload, r.tensor).get();
    if (!e.empty()) {
      std::printf("write: %s\n", e.c_str());
      return 1;
    }
    echoed++;
  }
  std::printf("echoed %d messages\n", echoed);
  pipe->close();
  listener->close();
  ctx->join();
  int want = static_cast<int>(sizeof(kSizes) / sizeof(kSizes[0]));
  return echoed == want ? 0 : 1;
}

int main(int argc, char** argv) {
  auto ctx = std::make_shared<tp::Context>();
  auto ibv = tp::transport::ibv::create();
  if (!ibv->isViable()) {
    std::printf("SKIP: TensorPipe's ibv transport is not viable (no device?)\n");
    return 77;
  }
  ctx->registerTransport(0, "ibv", ibv);
  ctx->registerChannel(0, "basic", tp::channel::basic::create());
  if (argc == 4) {
    std::string url = std::string("ibv://") + argv[2] + ":" + argv[3];
    if (std::string(argv[1]) == "serve") return serve(ctx, url);
    if (std::string(argv[1]) == "connect") {
      auto pipe = ctx->connect(url);
      int rc = exchange(pipe, pipe, "echoed by the server");
      pipe->close();
      ctx->join();
      return rc;
    }
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: sv_tp_ibv_peer [serve|connect ADDR PORT]\n");
    return 2;
  }
  auto listener = ctx->listen({"ibv://127.0.0.1"});
  std::string url = listener->url("ibv");
  std::printf("listening on %s\n", url.c_str());
  auto client = ctx->connect(url);
  auto server = accept_one(listener);
  if (!server) return 1;
  int rc = exchange(client, server, "client to server");
  client->close();
  server->close();
  listener->close();
  ctx->join();
  return rc;
}
