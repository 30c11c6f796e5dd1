// Stock TensorPipe (Debian's libtensorpipe, unmodified) with its ibv
// transport on simverbs: a listener and a client pipe in one process exchange
// messages whose payloads and tensors are checked byte for byte. The ibv
// transport dlopen()s libibverbs.so.1, which simverbs-run points at simverbs.
// Exit 0 = all messages intact; 77 = SKIP (the transport refused to load).
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

int main() {
  auto ctx = std::make_shared<tp::Context>();
  auto ibv = tp::transport::ibv::create();
  if (!ibv->isViable()) {
    std::printf("SKIP: TensorPipe's ibv transport is not viable (no device?)\n");
    return 77;
  }
  ctx->registerTransport(0, "ibv", ibv);
  ctx->registerChannel(0, "basic", tp::channel::basic::create());
  auto listener = ctx->listen({"ibv://127.0.0.1"});
  std::promise<std::shared_ptr<tp::Pipe>> accepted;
  listener->accept([&](const tp::Error& err, std::shared_ptr<tp::Pipe> pipe) {
    if (err) std::printf("accept: %s\n", err.what().c_str());
    accepted.set_value(err ? nullptr : pipe);
  });
  std::string url = listener->url("ibv");
  std::printf("listening on %s\n", url.c_str());
  auto client = ctx->connect(url);
  auto server = accepted.get_future().get();
  if (!server) return 1;

  const size_t sizes[] = {1, 100, 4096, 65536, 1 << 20, 8 << 20};
  int passed = 0, failed = 0;
  unsigned seed = 1;
  for (size_t n : sizes) {
    auto payload = pattern(n / 2 + 1, static_cast<uint8_t>(seed++));
    auto tensor = pattern(n, static_cast<uint8_t>(seed++));
    tp::Message msg;
    msg.metadata = "message of " + std::to_string(n);
    msg.payloads.push_back({payload.data(), payload.size(), "p"});
    tp::Message::Tensor t;
    t.buffer = tp::CpuBuffer{tensor.data()};
    t.length = tensor.size();
    msg.tensors.push_back(t);
    std::promise<std::string> wrote;
    client->write(std::move(msg), [&](const tp::Error& err) {
      wrote.set_value(err ? err.what() : "");
    });
    std::vector<uint8_t> rp, rt;
    std::promise<std::string> read;
    std::string meta;
    server->readDescriptor([&](const tp::Error& err, tp::Descriptor d) {
      if (err) { read.set_value(err.what()); return; }
      meta = d.metadata;
      rp.resize(d.payloads.at(0).length);
      rt.resize(d.tensors.at(0).length);
      tp::Allocation a;
      a.payloads.resize(1);
      a.payloads[0].data = rp.data();
      a.tensors.resize(1);
      a.tensors[0].buffer = tp::CpuBuffer{rt.data()};
      server->read(std::move(a), [&](const tp::Error& e2) {
        read.set_value(e2 ? e2.what() : "");
      });
    });
    std::string we = wrote.get_future().get(), re = read.get_future().get();
    bool ok = we.empty() && re.empty() && rp == payload && rt == tensor &&
              meta == "message of " + std::to_string(n);
    std::printf("%s - %zu-byte tensor%s%s%s%s\n", ok ? "ok" : "not ok", n,
                we.empty() ? "" : " write error: ", we.c_str(),
                re.empty() ? "" : " read error: ", re.c_str());
    (ok ? passed : failed)++;
  }
  client->close();
  server->close();
  listener->close();
  ctx->join();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
