/*
 * tp.cc - ping-pong driver for stock TensorPipe (Debian libtensorpipe0), the
 * peer our library is compared with. Systems: uv-basic, shm-basic, shm-cma,
 * uv-mpt (2 uv lanes), ibv-basic (on simverbs or a real device). One tensor per message (CPU memory, on the channel).
 *
 * Fully callback-chained, as a TensorPipe user writes it: the client's read
 * callback takes t1, checks the bytes and, once the write callback has fired
 * too, starts the next round (fill, t0, write); the server re-arms
 * readDescriptor from its read callback and writes the received buffer back.
 * No hop through the main thread per round; main only waits for the end.
 * This driver must not use anything but TensorPipe's public API.
 */
#include "twb.h"

#include <tensorpipe/tensorpipe.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace tp = tensorpipe;

namespace {

struct Config {
  std::string transport;  // "uv", "shm" or "ibv"
  std::string channel;    // "basic", "cma" or "mpt"
  int lanes = 2;          // mpt only
  bool target = false;    // "-td": every tensor names its target device (cpu:0)
};

Config parseSystem(const char* system) {
  std::string s(system);
  Config c;
  // "-td": the sender names each tensor's target device, so the receiver
  // sends no DescriptorReply and the tensor leaves with its Descriptor
  if (s.size() > 3 && s.compare(s.size() - 3, 3, "-td") == 0) {
    c.target = true;
    s.resize(s.size() - 3);
  }
  auto dash = s.find('-');
  if (dash == std::string::npos)
    twb_die(2, "unknown --system '%s' (uv-basic, shm-basic, shm-cma, uv-mpt, ibv-basic)",
            system);
  c.transport = s.substr(0, dash);
  c.channel = s.substr(dash + 1);
  if ((c.transport != "uv" && c.transport != "shm" && c.transport != "ibv") ||
      (c.channel != "basic" && c.channel != "cma" && c.channel != "mpt"))
    twb_die(2, "unknown --system '%s' (uv-basic, shm-basic, shm-cma, uv-mpt, ibv-basic)",
            system);
  return c;
}

std::shared_ptr<tp::Context> makeContext(const Config& c, const twb_args& a) {
  auto ctx = std::make_shared<tp::Context>(tp::ContextOptions().name(
      a.role == TWB_ROLE_SERVER ? "twb-server" : "twb-client"));
  if (c.transport == "uv") {
    ctx->registerTransport(0, "uv", tp::transport::uv::create());
  } else if (c.transport == "ibv") {
    auto ibv = tp::transport::ibv::create();
    if (!ibv->isViable())
      twb_die(TWB_EXIT_UNSUPPORTED, "TensorPipe ibv transport is not viable here (no verbs "
              "device: run under simverbs-run)");
    ctx->registerTransport(0, "ibv", ibv);
  } else {
    auto shm = tp::transport::shm::create();
    if (!shm->isViable())
      twb_die(TWB_EXIT_UNSUPPORTED, "TensorPipe shm transport is not viable here");
    ctx->registerTransport(0, "shm", shm);
  }
  if (c.channel == "basic") {
    ctx->registerChannel(0, "basic", tp::channel::basic::create());
  } else if (c.channel == "cma") {
    auto cma = tp::channel::cma::create();
    if (!cma->isViable())
      twb_die(TWB_EXIT_UNSUPPORTED, "TensorPipe cma channel is not viable here "
              "(process_vm_readv not allowed?)");
    ctx->registerChannel(0, "cma", cma);
  } else {
    std::vector<std::shared_ptr<tp::transport::Context>> lanes;
    std::vector<std::shared_ptr<tp::transport::Listener>> listeners;
    for (int i = 0; i < c.lanes; i++) {
      auto t = tp::transport::uv::create();
      listeners.push_back(t->listen(a.bind_ip));
      lanes.push_back(std::move(t));
    }
    ctx->registerChannel(0, "mpt", tp::channel::mpt::create(std::move(lanes), std::move(listeners)));
  }
  return ctx;
}

// Where the main thread waits for the callback chain to finish.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;

  void finish(const std::string& err) {
    std::lock_guard<std::mutex> lock(mu);
    if (done)
      return;
    done = true;
    error = err;
    cv.notify_all();
  }
  std::string wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return error;
  }
};

// ---- server ---------------------------------------------------------------

struct Server {
  const twb_args* a = nullptr;
  bool target = false;  // Config::target
  std::shared_ptr<tp::Pipe> pipe;
  unsigned char* buf = nullptr;  // reused policy
  uint64_t total = 0;
  uint64_t received = 0;
  std::atomic<uint64_t> written{0};
  Done done;

  void armDescriptor() {
    pipe->readDescriptor([this](const tp::Error& err, tp::Descriptor desc) {
      if (err) {
        // The client hangs up after the last reply: that ends the run.
        if (received == total)
          done.finish("");
        else
          done.finish("server readDescriptor: " + err.what());
        return;
      }
      if (received == total) {
        done.finish("server: a message beyond the schedule arrived");
        return;
      }
      if (desc.tensors.size() != 1) {
        done.finish("server: expected 1 tensor, got " + std::to_string(desc.tensors.size()));
        return;
      }
      size_t len = desc.tensors[0].length;
      unsigned char* b = buf ? buf : static_cast<unsigned char*>(twb_alloc_fresh(len));
      tp::Allocation alloc;
      alloc.tensors.resize(1);
      alloc.tensors[0].buffer = tp::CpuBuffer{b};
      pipe->read(std::move(alloc), [this, b, len](const tp::Error& rerr) {
        if (rerr) {
          done.finish("server read: " + rerr.what());
          return;
        }
        received++;
        twb_fault_apply(b, len);
        tp::Message m;
        m.tensors.resize(1);
        m.tensors[0].buffer = tp::CpuBuffer{b};
        m.tensors[0].length = len;
        if (target)
          m.tensors[0].targetDevice = tp::Device{tp::kCpuDeviceType, 0};
        pipe->write(std::move(m), [this, b](const tp::Error& werr) {
          if (b != buf)
            free(b);
          if (werr) {
            done.finish("server write: " + werr.what());
            return;
          }
          written++;
        });
        armDescriptor();
      });
    });
  }
};

int runServer(const twb_args& a, const Config& c) {
  Server s;
  s.a = &a;
  s.target = c.target;
  s.total = twb_schedule_total(&a.sched);
  if (a.policy == TWB_POLICY_REUSED)
    s.buf = static_cast<unsigned char*>(twb_alloc_prefaulted(twb_schedule_max(&a.sched)));
  auto ctx = makeContext(c, a);
  std::string url = c.transport == "shm"
                        ? "shm://twb-tp-" + std::to_string(getpid())
                        : c.transport + "://" + std::string(a.bind_ip) + ":0";
  auto listener = ctx->listen({url});
  listener->accept([&](const tp::Error& err, std::shared_ptr<tp::Pipe> pipe) {
    if (err) {
      s.done.finish("server accept: " + err.what());
      return;
    }
    s.pipe = std::move(pipe);
    s.armDescriptor();
  });
  twb_ready(listener->url(c.transport).c_str());
  std::string err = s.done.wait();
  ctx->close();
  ctx->join();
  free(s.buf);
  if (!err.empty())
    twb_die(1, "%s", err.c_str());
  return 0;
}

// ---- client ---------------------------------------------------------------

struct Client {
  bool target = false;  // Config::target
  const twb_args* a = nullptr;
  std::shared_ptr<tp::Pipe> pipe;
  twb_results res;
  twb_cursor cur{0, 0};
  unsigned char* sbuf = nullptr;
  unsigned char* rbuf = nullptr;  // reused policy
  uint64_t t0 = 0;
  std::atomic<int> pending{0};  // write and read callbacks of this round
  Done done;

  void startRound() {
    const twb_schedule* s = &a->sched;
    if (!twb_cursor_valid(&cur, s)) {
      done.finish("");
      return;
    }
    uint64_t len = s->sizes[cur.idx];
    twb_fill(sbuf, len, twb_seed(cur.idx, cur.iter));
    pending = 2;
    pipe->readDescriptor([this](const tp::Error& err, tp::Descriptor desc) {
      if (err) {
        done.finish("client readDescriptor: " + err.what());
        return;
      }
      size_t len = desc.tensors.size() == 1 ? desc.tensors[0].length : 0;
      unsigned char* r = rbuf ? rbuf : static_cast<unsigned char*>(twb_alloc_fresh(len));
      tp::Allocation alloc;
      alloc.tensors.resize(desc.tensors.size());
      for (auto& t : alloc.tensors)
        t.buffer = tp::CpuBuffer{r};
      pipe->read(std::move(alloc), [this, r, len](const tp::Error& rerr) {
        uint64_t t1 = twb_now_ns();
        if (rerr) {
          done.finish("client read: " + rerr.what());
          return;
        }
        twb_record(&res, &cur, t0, t1, r, len);
        if (r != rbuf)
          free(r);
        partDone();
      });
    });
    tp::Message m;
    m.tensors.resize(1);
    m.tensors[0].buffer = tp::CpuBuffer{sbuf};
    m.tensors[0].length = len;
    if (target)
      m.tensors[0].targetDevice = tp::Device{tp::kCpuDeviceType, 0};
    t0 = twb_now_ns();
    pipe->write(std::move(m), [this](const tp::Error& err) {
      if (err) {
        done.finish("client write: " + err.what());
        return;
      }
      partDone();
    });
  }

  void partDone() {
    if (--pending == 0) {
      twb_cursor_next(&cur, &a->sched);
      startRound();
    }
  }
};

int runClient(const twb_args& a, const Config& c) {
  Client cl;
  cl.a = &a;
  cl.target = c.target;
  uint64_t max = twb_schedule_max(&a.sched);
  cl.sbuf = static_cast<unsigned char*>(twb_alloc_prefaulted(max));
  if (a.policy == TWB_POLICY_REUSED)
    cl.rbuf = static_cast<unsigned char*>(twb_alloc_prefaulted(max));
  twb_results_init(&cl.res, &a.sched);
  auto ctx = makeContext(c, a);
  cl.pipe = ctx->connect(a.addr);
  cl.startRound();
  std::string err = cl.done.wait();
  cl.pipe->close();
  ctx->close();
  ctx->join();
  if (!err.empty())
    twb_die(1, "%s", err.c_str());
  std::string info = "stock TensorPipe " + c.transport + "+" + c.channel +
                     ", one CPU tensor per message" +
                     (c.target ? " naming its target device (no DescriptorReply)" : "") +
                     ", callback-chained; t1 in the client's read callback";
  twb_results_write(&cl.res, &a, info.c_str());
  twb_results_free(&cl.res);
  free(cl.sbuf);
  free(cl.rbuf);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  twb_args a;
  twb_args_parse(argc, argv, &a);
  Config c = parseSystem(a.system);
  if (a.role == TWB_ROLE_SERVER)
    return runServer(a, c);
  return runClient(a, c);
}
