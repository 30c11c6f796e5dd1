// xth_dual.cc - tw-xth-dual: stock TensorPipe and libtensorwire in one
// process, joined by pipes that select the xth channel (spec/wire.md 4.5),
// in both roles: stock listens and ours connects ("ours-connects"), then
// ours listens and stock connects ("stock-connects"); no argument runs both. Over each pipe, tensors of 0, 1, 4093, 1 MiB and 9 MiB
// (with a payload and metadata) go each way and are compared byte for byte;
// libtensorwire must report xth as the pipe's channel. The conformance case
// interop.xth_one_process runs this program; exit 0 when every check
// passes, 1 with the first failure on stderr.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <tensorpipe/tensorpipe.h>

extern "C" {
#include "tensorwire/tensorwire.h"
}

namespace tp = tensorpipe;

namespace {

const size_t kSizes[] = {0, 1, 4093, size_t(1) << 20, size_t(9) << 20};
const size_t kNum = sizeof(kSizes) / sizeof(kSizes[0]);

[[noreturn]] void die(const std::string &what)
{
	std::fprintf(stderr, "tw-xth-dual: FAIL: %s\n", what.c_str());
	std::exit(1);
}

void check_tw(tw_status_t st, const char *call)
{
	if (st != TW_OK)
		die(std::string(call) + ": " + tw_status_name(st) + ": " + tw_last_error());
}

std::vector<uint8_t> pattern(size_t len, uint32_t seed)
{
	std::vector<uint8_t> v(len);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		v[i] = uint8_t(x >> 16);
	}
	return v;
}

// ---- libtensorwire side: callbacks into promises ---------------------------------------

struct TwWait {
	std::promise<std::string> p; // "" = ok, else the error
};

void tw_done(tw_pipe *, tw_status_t st, const char *detail, void *arg)
{
	auto *w = static_cast<TwWait *>(arg);
	w->p.set_value(st == TW_OK ? "" : std::string(tw_status_name(st)) + ": " + detail);
}

struct TwDesc {
	std::promise<std::string> p;
	std::vector<size_t> lens;
	size_t meta_len = 0;
};

void tw_on_desc(tw_pipe *, tw_status_t st, const char *detail, const tw_message *d, void *arg)
{
	auto *w = static_cast<TwDesc *>(arg);
	if (st != TW_OK) {
		w->p.set_value(std::string(tw_status_name(st)) + ": " + detail);
		return;
	}
	w->meta_len = d->metadata_length;
	for (size_t i = 0; i < d->num_tensors; i++)
		w->lens.push_back(d->tensors[i].length);
	w->p.set_value("");
}

struct TwAccept {
	std::promise<tw_pipe *> p;
};

void tw_on_accept(tw_listener *, tw_status_t st, const char *detail, tw_pipe *pipe, void *arg)
{
	if (st != TW_OK)
		die(std::string("tw accept: ") + detail);
	static_cast<TwAccept *>(arg)->p.set_value(pipe);
}

std::string wait(std::future<std::string> f, const char *what)
{
	if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
		die(std::string(what) + ": no callback within 60 s");
	return f.get();
}

// One message from ours to stock: every size as a tensor, and back.
void ours_to_stock(tw_pipe *tw, std::shared_ptr<tp::Pipe> st, uint32_t seed)
{
	std::vector<std::vector<uint8_t>> data;
	std::vector<tw_tensor> ts(kNum);
	for (size_t i = 0; i < kNum; i++) {
		data.push_back(pattern(kSizes[i], seed + uint32_t(i)));
		ts[i] = tw_tensor{};
		ts[i].data = data[i].data();
		ts[i].length = kSizes[i];
		ts[i].source_device = tw_device_cpu();
		ts[i].has_target_device = true;
		ts[i].target_device = tw_device_cpu();
	}
	tw_message m{};
	m.metadata = "xth-dual";
	m.metadata_length = 8;
	m.num_tensors = kNum;
	m.tensors = ts.data();
	TwWait w;
	check_tw(tw_pipe_write(tw, &m, tw_done, &w), "tw_pipe_write");

	std::promise<tp::Descriptor> dp;
	st->readDescriptor([&](const tp::Error &e, tp::Descriptor d) {
		if (e)
			die("stock readDescriptor: " + e.what());
		dp.set_value(std::move(d));
	});
	tp::Descriptor d = dp.get_future().get();
	if (d.metadata != "xth-dual" || d.tensors.size() != kNum)
		die("stock got a descriptor that is not what ours wrote");
	std::vector<std::vector<uint8_t>> got(kNum);
	tp::Allocation a;
	for (size_t i = 0; i < kNum; i++) {
		if (d.tensors[i].length != kSizes[i])
			die("stock: tensor " + std::to_string(i) + " has the wrong length");
		got[i].resize(kSizes[i]);
		tp::Allocation::Tensor at;
		at.buffer = tp::CpuBuffer{got[i].data()};
		a.tensors.push_back(at);
	}
	std::promise<void> rp;
	st->read(std::move(a), [&](const tp::Error &e) {
		if (e)
			die("stock read: " + e.what());
		rp.set_value();
	});
	rp.get_future().get();
	std::string err = wait(w.p.get_future(), "tw_pipe_write");
	if (!err.empty())
		die("tw_pipe_write callback: " + err);
	for (size_t i = 0; i < kNum; i++)
		if (got[i] != data[i])
			die("ours -> stock: tensor " + std::to_string(i) + " (" +
			    std::to_string(kSizes[i]) + " bytes) differs");
}

void stock_to_ours(std::shared_ptr<tp::Pipe> st, tw_pipe *tw, uint32_t seed)
{
	std::vector<std::vector<uint8_t>> data;
	tp::Message m;
	m.metadata = "xth-dual-back";
	for (size_t i = 0; i < kNum; i++) {
		data.push_back(pattern(kSizes[i], seed + uint32_t(i)));
		tp::Message::Tensor t;
		t.buffer = tp::CpuBuffer{data[i].data()};
		t.length = kSizes[i];
		t.targetDevice = tp::Device{"cpu", 0};
		m.tensors.push_back(t);
	}
	std::promise<void> wp;
	st->write(std::move(m), [&](const tp::Error &e) {
		if (e)
			die("stock write: " + e.what());
		wp.set_value();
	});
	TwDesc dw;
	check_tw(tw_pipe_read_descriptor(tw, tw_on_desc, &dw), "tw_pipe_read_descriptor");
	std::string err = wait(dw.p.get_future(), "tw_pipe_read_descriptor");
	if (!err.empty())
		die("tw_pipe_read_descriptor: " + err);
	if (dw.lens.size() != kNum || dw.meta_len != 13)
		die("ours got a descriptor that is not what stock wrote");
	std::vector<std::vector<uint8_t>> got(kNum);
	std::vector<tw_tensor_allocation> ta(kNum);
	for (size_t i = 0; i < kNum; i++) {
		if (dw.lens[i] != kSizes[i])
			die("ours: tensor " + std::to_string(i) + " has the wrong length");
		got[i].resize(kSizes[i]);
		ta[i].data = got[i].data();
		ta[i].device = tw_device_cpu();
	}
	tw_allocation a{};
	a.num_tensors = kNum;
	a.tensors = ta.data();
	TwWait rw;
	check_tw(tw_pipe_read(tw, &a, tw_done, &rw), "tw_pipe_read");
	err = wait(rw.p.get_future(), "tw_pipe_read");
	if (!err.empty())
		die("tw_pipe_read: " + err);
	wp.get_future().get();
	for (size_t i = 0; i < kNum; i++)
		if (got[i] != data[i])
			die("stock -> ours: tensor " + std::to_string(i) + " (" +
			    std::to_string(kSizes[i]) + " bytes) differs");
}

void expect_xth(tw_pipe *tw, const char *role)
{
	TwWait e;
	check_tw(tw_pipe_on_established(tw, [](tw_pipe *p, tw_status_t st, const char *d, void *arg) {
		         tw_done(p, st, d, arg);
	         }, &e),
	         "tw_pipe_on_established");
	std::string err = wait(e.p.get_future(), "established");
	if (!err.empty())
		die(std::string(role) + ": the pipe failed: " + err);
	tw_pipe_info info;
	check_tw(tw_pipe_get_info(tw, &info), "tw_pipe_get_info");
	std::printf("# %s: libtensorwire reports transport %s, channel %s\n", role, info.transport,
	            info.channel);
	if (std::strcmp(info.channel, "xth") != 0)
		die(std::string(role) + ": channel '" + info.channel + "', expected xth (spec 4.5)");
}

} // namespace

int main(int argc, char **argv)
{
	std::string mode = argc > 1 ? argv[1] : "both";
	if (argc > 2 || (mode != "both" && mode != "ours-connects" && mode != "stock-connects")) {
		std::fprintf(stderr, "usage: tw-xth-dual [ours-connects|stock-connects|both]\n");
		return 2;
	}
	auto sctx = std::make_shared<tp::Context>();
	sctx->registerTransport(0, "uv", tp::transport::uv::create());
	sctx->registerChannel(100, "xth", tp::channel::xth::create());
	sctx->registerChannel(0, "basic", tp::channel::basic::create());

	tw_context *octx;
	check_tw(tw_context_create("ours", &octx), "tw_context_create");
	check_tw(tw_context_register_transport(octx, "uv", nullptr, 0, nullptr), "register uv");
	check_tw(tw_context_register_channel(octx, "xth", nullptr, 100, nullptr), "register xth");
	check_tw(tw_context_register_channel(octx, "basic", nullptr, 0, nullptr), "register basic");

	// 1. stock listens, ours connects
	if (mode != "stock-connects") {
		auto l = sctx->listen({"uv://127.0.0.1:0"});
		std::promise<std::shared_ptr<tp::Pipe>> ap;
		l->accept([&](const tp::Error &e, std::shared_ptr<tp::Pipe> p) {
			if (e)
				die("stock accept: " + e.what());
			ap.set_value(p);
		});
		tw_pipe *tw;
		check_tw(tw_context_connect(octx, l->url("uv").c_str(), &tw), "tw_context_connect");
		auto st = ap.get_future().get();
		expect_xth(tw, "ours connected to stock");
		ours_to_stock(tw, st, 100);
		stock_to_ours(st, tw, 200);
		tw_pipe_destroy(tw);
		st->close();
		l->close();
	}
	// 2. ours listens, stock connects
	if (mode != "ours-connects") {
		const char *urls[] = {"uv://127.0.0.1:0"};
		tw_listener *l;
		check_tw(tw_context_listen(octx, urls, 1, &l), "tw_context_listen");
		char url[128];
		check_tw(tw_listener_url(l, nullptr, url, sizeof(url)), "tw_listener_url");
		TwAccept acc;
		check_tw(tw_listener_accept(l, tw_on_accept, &acc), "tw_listener_accept");
		auto st = sctx->connect(url);
		auto f = acc.p.get_future();
		if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
			die("ours did not accept stock's pipe within 60 s");
		tw_pipe *tw = f.get();
		expect_xth(tw, "stock connected to ours");
		stock_to_ours(st, tw, 300);
		ours_to_stock(tw, st, 400);
		tw_pipe_destroy(tw);
		st->close();
		tw_listener_destroy(l);
	}
	check_tw(tw_context_join(octx), "tw_context_join");
	tw_context_destroy(octx);
	sctx->close();
	sctx->join();
	std::printf("ok - xth between stock and ours in one process (%s), %zu tensors of 0 B to "
	            "9 MiB each way\n",
	            mode.c_str(), kNum);
	return 0;
}
