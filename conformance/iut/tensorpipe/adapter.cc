/*
 * adapter.cc - the agent-protocol adapter (spec/agent.md) over stock
 * TensorPipe, i.e. Debian's libtensorpipe (the build PyTorch 1.13 uses).
 *
 * The harness spawns this program and speaks JSON lines over stdin/stdout.
 * Requests are handled one at a time on the main thread; TensorPipe runs its
 * callbacks on its own loop thread, and each callback becomes exactly one
 * event line (output is serialised in common/agent.c). This program adds no
 * behaviour of its own: it must not retry, reorder, filter or deduplicate
 * anything the library does, because the harness judges the library through
 * it. Diagnostics go to stderr; stdout carries protocol lines only.
 *
 * Stock has no public call that tells which transport and channel a pipe
 * negotiated. `info` therefore reads the pipe's private state (PipeImpl,
 * whose definition Debian installs in tensorpipe/core/pipe_impl.h) on the
 * context's loop thread, through a member-pointer obtained by explicit
 * template instantiation (which the language exempts from access checks).
 * It reads, never writes.
 */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <tensorpipe/tensorpipe.h>
#include <tensorpipe/core/context_impl.h>
#include <tensorpipe/core/pipe_impl.h>

#include "agent.h"

namespace tp = tensorpipe;

#ifndef TW_STOCK_VERSION
#define TW_STOCK_VERSION "unknown"
#endif

namespace {

/* ---- reading stock's private pipe state (see the file comment) ----------- */

template <typename Tag, typename Tag::type M>
struct Robber {
	friend typename Tag::type robbed(Tag) { return M; }
};
struct PipeImplOf {
	using type = const std::shared_ptr<tp::PipeImpl> tp::Pipe::*;
	friend type robbed(PipeImplOf);
};
struct ContextOf {
	using type = std::shared_ptr<tp::ContextImpl> tp::PipeImpl::*;
	friend type robbed(ContextOf);
};
struct TransportOf {
	using type = std::string tp::PipeImpl::*;
	friend type robbed(TransportOf);
};
struct ChannelsOf {
	using type = std::unordered_map<std::pair<tp::Device, tp::Device>, std::string>
	        tp::PipeImpl::*;
	friend type robbed(ChannelsOf);
};
template struct Robber<PipeImplOf, &tp::Pipe::impl_>;
template struct Robber<ContextOf, &tp::PipeImpl::context_>;
template struct Robber<TransportOf, &tp::PipeImpl::transport_>;
template struct Robber<ChannelsOf, &tp::PipeImpl::channelForDevicePair_>;

/* PipeImpl::state_ has a private enum type, so it is read as an integer:
 * ESTABLISHED is the sixth enumerator of PipeImpl::State in pipe_impl.h. */
template <typename Tag, auto M>
struct AutoRobber {
	friend auto robbedAuto(Tag) { return M; }
};
struct StateOf {
	friend auto robbedAuto(StateOf);
};
template struct AutoRobber<StateOf, &tp::PipeImpl::state_>;
constexpr int kStockEstablished = 5;

/* ---- adapter state -------------------------------------------------------- */

struct PipeEntry {
	std::shared_ptr<tp::Pipe> pipe;
	bool is_server = false;
	std::mutex mu;                     /* guards descs */
	std::deque<tp::Descriptor> descs;  /* delivered, not yet read */
};

std::mutex g_mu; /* guards the maps and counters; never held while calling stock */
std::map<std::string, std::shared_ptr<PipeEntry>> g_pipes;
std::map<std::string, std::shared_ptr<tp::Listener>> g_listeners;
unsigned long g_next_pipe = 1;
unsigned long g_next_listener = 1;
std::shared_ptr<tp::Context> g_ctx;
size_t g_transports; /* registered (viable) in g_ctx */
bool g_ctx_closed = false;

std::string new_pipe_id(std::shared_ptr<PipeEntry> e)
{
	std::lock_guard<std::mutex> lk(g_mu);
	std::string id = "p" + std::to_string(g_next_pipe++);
	g_pipes[id] = std::move(e);
	return id;
}

std::shared_ptr<PipeEntry> find_pipe(const std::string &id)
{
	std::lock_guard<std::mutex> lk(g_mu);
	auto it = g_pipes.find(id);
	return it == g_pipes.end() ? nullptr : it->second;
}

std::shared_ptr<tp::Listener> find_listener(const std::string &id)
{
	std::lock_guard<std::mutex> lk(g_mu);
	auto it = g_listeners.find(id);
	return it == g_listeners.end() ? nullptr : it->second;
}

/* ---- errors --------------------------------------------------------------- */

struct ErrInfo {
	const char *kind;
	std::string status;
	std::string text;
};

ErrInfo classify(const tp::Error &e)
{
	ErrInfo r{"other", "Error", e.what()};
	if (e.isOfType<tp::PipeClosedError>())
		r = {"closed", "PipeClosedError", r.text};
	else if (e.isOfType<tp::ListenerClosedError>())
		r = {"closed", "ListenerClosedError", r.text};
	else if (e.isOfType<tp::ContextClosedError>())
		r = {"closed", "ContextClosedError", r.text};
	else if (e.isOfType<tp::transport::ConnectionClosedError>())
		r = {"closed", "transport::ConnectionClosedError", r.text};
	else if (e.isOfType<tp::transport::ContextClosedError>() ||
	         e.isOfType<tp::transport::ListenerClosedError>())
		r = {"closed", "transport::ClosedError", r.text};
	else if (e.isOfType<tp::EOFError>())
		r = {"eof", "EOFError", r.text};
	else if (auto se = e.castToType<tp::SystemError>()) {
		int code = se->errorCode();
		r = {code == ECONNRESET || code == EPIPE ? "reset" : "sys", "SystemError", r.text};
	} else if (e.isOfType<tp::transport::uv::UVError>()) {
		/* UVError keeps its libuv code private; its text starts with the name. */
		const char *kind = "sys";
		if (r.text.rfind("EOF", 0) == 0)
			kind = "eof";
		else if (r.text.rfind("ECONNRESET", 0) == 0 || r.text.rfind("EPIPE", 0) == 0)
			kind = "reset";
		r = {kind, "transport::uv::UVError", r.text};
	} else if (e.isOfType<tp::ShortReadError>() || e.isOfType<tp::ShortWriteError>()) {
		r = {"eof", "ShortReadWriteError", r.text};
	} else if (e.isOfType<tp::LogicError>()) {
		r = {"proto", "LogicError", r.text};
	}
	return r;
}

void event_error(const char *name, json_int_t id, const tp::Error &e)
{
	ErrInfo ei = classify(e);
	twc_agent_event_err(name, id, ei.kind, ei.status.c_str(), ei.text.c_str());
}

/* ---- helpers -------------------------------------------------------------- */

std::string str_field(const json_t *req, const char *key)
{
	const json_t *v = json_object_get(req, key);
	return json_is_string(v) ? json_string_value(v) : "";
}

std::string gen_string(const twc_agent_buf &b)
{
	std::string s(b.len, '\0');
	twc_agent_gen_fill(&s[0], s.size(), b.seed);
	return s;
}

json_t *sum_string(const std::string &s)
{
	return twc_agent_sum_json(s.data(), s.size());
}

std::string device_string(const tp::Device &d)
{
	return d.type + ":" + std::to_string(d.index);
}

tp::Device to_tp(const twc_agent_device &d)
{
	return tp::Device{d.type, d.index};
}

bool is_cpu0(const tp::Device &d)
{
	return d.type == tp::kCpuDeviceType && d.index == 0;
}

struct Buffers {
	std::vector<void *> ptrs;
	Buffers() = default;
	Buffers(const Buffers &) = delete;
	Buffers &operator=(const Buffers &) = delete;
	~Buffers()
	{
		for (void *p : ptrs)
			std::free(p);
	}
	void *add(void *p)
	{
		if (p)
			ptrs.push_back(p);
		return p;
	}
};

/* ---- commands ------------------------------------------------------------- */

void cmd_hello(json_int_t id, const json_t *)
{
	twc_agent_respond_ok(id, json_pack("{s:s,s:s,s:s,s:i,s:[sss],s:[ssss]}", "impl", "tensorpipe",
	                                  "version", TW_STOCK_VERSION, "adapter",
	                                  "tw-iut-stock " TW_ADAPTER_VERSION, "protocol",
	                                  TWC_AGENT_PROTOCOL_VERSION, "transports", "uv", "shm",
	                                  "ibv", "channels", "basic", "cma", "xth", "mpt"));
}

std::shared_ptr<tp::transport::Context> make_transport(const std::string &kind)
{
	if (kind == "uv")
		return tp::transport::uv::create();
	if (kind == "shm")
		return tp::transport::shm::create();
	if (kind == "ibv")
		return tp::transport::ibv::create();
	return nullptr;
}

std::shared_ptr<tp::channel::Context> make_channel(const std::string &kind, const json_t *opts,
                                                   std::string &why)
{
	if (kind == "basic")
		return tp::channel::basic::create();
	if (kind == "cma")
		return tp::channel::cma::create();
	if (kind == "xth")
		return tp::channel::xth::create();
	if (kind == "mpt") {
		const json_t *l = json_object_get(opts, "lanes");
		const json_t *a = json_object_get(opts, "address");
		json_int_t lanes = json_is_integer(l) ? json_integer_value(l) : 2;
		std::string addr = json_is_string(a) ? json_string_value(a) : "127.0.0.1";
		if (lanes < 1 || lanes > 64) {
			why = "mpt: options.lanes must be 1..64";
			return nullptr;
		}
		std::vector<std::shared_ptr<tp::transport::Context>> ctxs;
		std::vector<std::shared_ptr<tp::transport::Listener>> lis;
		for (json_int_t i = 0; i < lanes; i++) {
			ctxs.push_back(tp::transport::uv::create());
			lis.push_back(ctxs.back()->listen(addr));
		}
		return tp::channel::mpt::create(std::move(ctxs), std::move(lis));
	}
	why = "unknown channel kind '" + kind + "'";
	return nullptr;
}

void cmd_context(json_int_t id, const json_t *req)
{
	if (g_ctx) {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     "context: this adapter already has a context");
		return;
	}
	twc_agent_context_req r;
	char err[256];
	if (twc_agent_parse_context(req, &r, err, sizeof(err))) {
		twc_agent_respond_err(id, "inval", "bad_request", err);
		return;
	}
	auto ctx = std::make_shared<tp::Context>(tp::ContextOptions().name(r.name));
	json_t *skipped = json_array();
	size_t transports = 0;
	auto fail = [&](const std::string &text) {
		json_decref(skipped);
		twc_agent_context_req_clear(&r);
		ctx->close();
		ctx->join();
		twc_agent_respond_err(id, "unsupported", "unknown_kind", ("context: " + text).c_str());
	};
	for (size_t i = 0; i < r.num_transports; i++) {
		const twc_agent_backend &b = r.transports[i];
		auto tctx = make_transport(b.kind);
		if (!tctx) {
			fail(std::string("unknown transport kind '") + b.kind + "'");
			return;
		}
		if (!tctx->isViable()) {
			json_array_append_new(skipped,
			                      json_pack("{s:s,s:s}", "name", b.name, "reason",
			                                "transport context reports isViable() = false"));
			tctx->close();
			tctx->join();
			continue;
		}
		ctx->registerTransport(b.priority, b.name, tctx);
		transports++;
	}
	for (size_t i = 0; i < r.num_channels; i++) {
		const twc_agent_backend &b = r.channels[i];
		std::string why;
		if (std::string(b.kind).rfind("cuda_", 0) == 0) {
			/* the CUDA channels exist only in a CUDA build of TensorPipe
			 * (PyTorch's); Debian's has none: not viable here, as for an
			 * implementation without a GPU */
			json_array_append_new(skipped,
			                      json_pack("{s:s,s:s}", "name", b.name, "reason",
			                                "this TensorPipe build has no CUDA channels "
			                                "(built without CUDA)"));
			continue;
		}
		auto cctx = make_channel(b.kind, b.options, why);
		if (!cctx) {
			fail(why);
			return;
		}
		if (!cctx->isViable()) {
			json_array_append_new(skipped,
			                      json_pack("{s:s,s:s}", "name", b.name, "reason",
			                                "channel context reports isViable() = false"));
			cctx->close();
			cctx->join();
			continue;
		}
		ctx->registerChannel(b.priority, b.name, cctx);
	}
	bool hs = r.has_handshake_timeout, ot = r.has_operation_timeout;
	const json_t *exts = r.extensions;
	twc_agent_context_req_clear(&r);
	g_ctx = ctx;
	g_transports = transports;
	json_t *resp = json_pack("{s:o}", "skipped", skipped);
	json_t *unhonoured = json_array();
	if (hs)
		json_array_append_new(unhonoured,
		                      json_pack("{s:s,s:s}", "name", "handshake_timeout_ms", "reason",
		                                "stock TensorPipe has no handshake timeout: a server "
		                                "pipe waits for its requested connections until it is "
		                                "closed"));
	if (ot)
		json_array_append_new(unhonoured,
		                      json_pack("{s:s,s:s}", "name", "operation_timeout_ms", "reason",
		                                "stock TensorPipe has no operation deadline: a pending "
		                                "read or write waits until the pipe fails or closes"));
	/* stock never uses an extension, so asking it to leave one off is met */
	const char *ext;
	json_t *on;
	json_object_foreach(const_cast<json_t *>(exts), ext, on) {
		if (json_is_true(on))
			json_array_append_new(unhonoured,
			                      json_pack("{s:s,s:s}", "name", ext, "reason",
			                                "stock TensorPipe implements no extension of "
			                                "spec/wire.md section 8"));
	}
	if (json_array_size(unhonoured) > 0)
		json_object_set_new(resp, "unhonoured", unhonoured);
	else
		json_decref(unhonoured);
	twc_agent_respond_ok(id, resp);
}

bool need_ctx(json_int_t id)
{
	if (!g_ctx || g_ctx_closed) {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     g_ctx ? "the context is closed" : "no context: send 'context' first");
		return false;
	}
	return true;
}

/* A context with no transport can neither listen nor connect
 * (spec/agent.md 6.2). */
bool need_transport(json_int_t id, const char *cmd)
{
	if (g_transports > 0)
		return true;
	twc_agent_respond_err(id, "unsupported", "no_transport",
	                     (std::string(cmd) + ": the context has no transport").c_str());
	return false;
}

void cmd_listen(json_int_t id, const json_t *req)
{
	if (!need_ctx(id) || !need_transport(id, "listen"))
		return;
	const char **us;
	size_t n;
	char err[256];
	if (twc_agent_parse_urls(req, &us, &n, err, sizeof(err))) {
		twc_agent_respond_err(id, "inval", "bad_request", err);
		return;
	}
	std::vector<std::string> urls(us, us + n);
	free(us);
	std::shared_ptr<tp::Listener> l;
	try {
		l = g_ctx->listen(urls);
	} catch (const std::exception &ex) {
		twc_agent_respond_err(id, "sys", "exception", (std::string("listen: ") + ex.what()).c_str());
		return;
	}
	json_t *bound = json_array();
	for (const auto &url : urls) {
		std::string scheme = url.substr(0, url.find("://"));
		json_array_append_new(bound, json_string(l->url(scheme).c_str()));
	}
	std::string lid;
	{
		std::lock_guard<std::mutex> lk(g_mu);
		lid = "l" + std::to_string(g_next_listener++);
		g_listeners[lid] = l;
	}
	twc_agent_respond_ok(id, json_pack("{s:s,s:o}", "listener", lid.c_str(), "urls", bound));
}

void cmd_accept(json_int_t id, const json_t *req)
{
	auto l = find_listener(str_field(req, "listener"));
	if (!l) {
		twc_agent_respond_err(id, "inval", "bad_request", "accept: unknown listener");
		return;
	}
	twc_agent_respond_ok(id, nullptr);
	l->accept([id](const tp::Error &e, std::shared_ptr<tp::Pipe> p) {
		if (e) {
			event_error("accept", id, e);
			return;
		}
		auto entry = std::make_shared<PipeEntry>();
		entry->pipe = std::move(p);
		entry->is_server = true;
		std::string pid = new_pipe_id(entry);
		twc_agent_event_ok("accept", id, json_pack("{s:s}", "pipe", pid.c_str()));
	});
}

void cmd_connect(json_int_t id, const json_t *req)
{
	if (!need_ctx(id) || !need_transport(id, "connect"))
		return;
	std::string url = str_field(req, "url");
	auto entry = std::make_shared<PipeEntry>();
	try {
		entry->pipe = g_ctx->connect(url);
	} catch (const std::exception &ex) {
		twc_agent_respond_err(id, "inval", "exception",
		                     (std::string("connect: ") + ex.what()).c_str());
		return;
	}
	std::string pid = new_pipe_id(entry);
	twc_agent_respond_ok(id, json_pack("{s:s}", "pipe", pid.c_str()));
}

void cmd_write(json_int_t id, const json_t *req)
{
	auto pe = find_pipe(str_field(req, "pipe"));
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "write: unknown pipe");
		return;
	}
	char err[256];
	twc_agent_msg *m = nullptr;
	if (twc_agent_msg_parse(json_object_get(req, "message"), &m, err, sizeof(err)) != 0) {
		twc_agent_respond_err(id, "inval", "bad_request", err);
		return;
	}
	std::unique_ptr<twc_agent_msg, void (*)(twc_agent_msg *)> guard(m, twc_agent_msg_free);
	auto bufs = std::make_shared<Buffers>();
	tp::Message msg;
	bool failed = false;
	msg.metadata = gen_string(m->metadata);
	for (size_t i = 0; i < m->num_payloads; i++) {
		tp::Message::Payload p;
		p.length = m->payloads[i].data.len;
		p.data = bufs->add(twc_agent_buf_make(&m->payloads[i].data, &failed));
		p.metadata = gen_string(m->payloads[i].metadata);
		if (failed)
			break;
		msg.payloads.push_back(std::move(p));
	}
	for (size_t i = 0; !failed && i < m->num_tensors; i++) {
		const twc_agent_tensor &t = m->tensors[i];
		if (!is_cpu0(to_tp(t.source_device))) {
			twc_agent_respond_err(id, "unsupported", "device",
			                     "write: this adapter sends from cpu:0 only");
			return;
		}
		tp::Message::Tensor tt;
		tt.length = t.data.len;
		tt.buffer = tp::CpuBuffer{bufs->add(twc_agent_buf_make(&t.data, &failed))};
		if (t.has_target_device)
			tt.targetDevice = to_tp(t.target_device);
		tt.metadata = gen_string(t.metadata);
		msg.tensors.push_back(std::move(tt));
	}
	if (failed) {
		twc_agent_respond_err(id, "nomem", "malloc", "write: cannot allocate the message's buffers");
		return;
	}
	twc_agent_respond_ok(id, nullptr);
	pe->pipe->write(std::move(msg), [id, bufs](const tp::Error &e) {
		if (e)
			event_error("write", id, e);
		else
			twc_agent_event_ok("write", id, nullptr);
	});
}

json_t *descriptor_json(const tp::Descriptor &d)
{
	json_t *ps = json_array();
	for (const auto &p : d.payloads)
		json_array_append_new(ps, json_pack("{s:I,s:o}", "len", (json_int_t)p.length,
		                                    "metadata", sum_string(p.metadata)));
	json_t *ts = json_array();
	for (const auto &t : d.tensors) {
		json_t *tj = json_pack("{s:I,s:s,s:o}", "len", (json_int_t)t.length, "source_device",
		                       device_string(t.sourceDevice).c_str(), "metadata",
		                       sum_string(t.metadata));
		json_object_set_new(tj, "target_device",
		                    t.targetDevice.has_value()
		                            ? json_string(device_string(*t.targetDevice).c_str())
		                            : json_null());
		json_array_append_new(ts, tj);
	}
	return json_pack("{s:o,s:o,s:o}", "metadata", sum_string(d.metadata), "payloads", ps,
	                 "tensors", ts);
}

void cmd_read_descriptor(json_int_t id, const json_t *req)
{
	auto pe = find_pipe(str_field(req, "pipe"));
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "read_descriptor: unknown pipe");
		return;
	}
	twc_agent_respond_ok(id, nullptr);
	std::weak_ptr<PipeEntry> wpe = pe;
	pe->pipe->readDescriptor([id, wpe](const tp::Error &e, tp::Descriptor d) {
		if (e) {
			event_error("read_descriptor", id, e);
			return;
		}
		json_t *dj = descriptor_json(d);
		if (auto p = wpe.lock()) {
			std::lock_guard<std::mutex> lk(p->mu);
			p->descs.push_back(std::move(d));
		}
		twc_agent_event_ok("read_descriptor", id, json_pack("{s:o}", "descriptor", dj));
	});
}

void cmd_read(json_int_t id, const json_t *req)
{
	auto pe = find_pipe(str_field(req, "pipe"));
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "read: unknown pipe");
		return;
	}
	/* the oldest descriptor not read yet (a copy): it stays so until the
	 * read is handed to the pipe, since a refused one may be asked again
	 * (spec/agent.md 3.2) */
	tp::Descriptor d;
	{
		std::lock_guard<std::mutex> lk(pe->mu);
		if (pe->descs.empty()) {
			twc_agent_respond_err(id, "inval", "bad_request",
			                     "read: no descriptor delivered that was not read yet");
			return;
		}
		d = pe->descs.front();
	}
	const json_t *alloc = json_object_get(req, "allocation");
	const json_t *adev = json_object_get(alloc, "tensors");
	auto bufs = std::make_shared<Buffers>();
	tp::Allocation a;
	std::vector<size_t> plen, tlen;
	std::vector<std::string> tdev;
	for (const auto &p : d.payloads) {
		tp::Allocation::Payload ap;
		ap.data = p.length ? bufs->add(std::malloc(p.length)) : nullptr;
		if (p.length && !ap.data) {
			twc_agent_respond_err(id, "nomem", "malloc", "read: cannot allocate a payload");
			return;
		}
		a.payloads.push_back(ap);
		plen.push_back(p.length);
	}
	for (size_t i = 0; i < d.tensors.size(); i++) {
		const auto &t = d.tensors[i];
		tp::Device dev = t.targetDevice.has_value() ? *t.targetDevice : tp::Device{"cpu", 0};
		const json_t *want = json_object_get(json_array_get(adev, i), "device");
		if (json_is_string(want)) {
			twc_agent_device ad;
			if (twc_agent_device_parse(json_string_value(want), &ad) != 0) {
				twc_agent_respond_err(id, "inval", "bad_request",
				                     "read: allocation.tensors[].device is malformed");
				return;
			}
			dev = to_tp(ad);
		}
		if (!is_cpu0(dev)) {
			twc_agent_respond_err(id, "unsupported", "device",
			                     "read: this adapter allocates on cpu:0 only");
			return;
		}
		tp::Allocation::Tensor at;
		void *ptr = t.length ? bufs->add(std::malloc(t.length)) : nullptr;
		if (t.length && !ptr) {
			twc_agent_respond_err(id, "nomem", "malloc", "read: cannot allocate a tensor");
			return;
		}
		at.buffer = tp::CpuBuffer{ptr};
		a.tensors.push_back(at);
		tlen.push_back(t.length);
		tdev.push_back(device_string(dev));
	}
	std::vector<void *> pptr, tptr;
	for (const auto &ap : a.payloads)
		pptr.push_back(ap.data);
	for (const auto &at : a.tensors)
		tptr.push_back(at.buffer.unwrap<tp::CpuBuffer>().ptr);
	{
		std::lock_guard<std::mutex> lk(pe->mu);
		pe->descs.pop_front();
	}
	twc_agent_respond_ok(id, nullptr);
	pe->pipe->read(std::move(a), [id, bufs, pptr, tptr, plen, tlen, tdev](const tp::Error &e) {
		if (e) {
			event_error("read", id, e);
			return;
		}
		json_t *ps = json_array();
		for (size_t i = 0; i < pptr.size(); i++)
			json_array_append_new(ps, twc_agent_sum_json(pptr[i], plen[i]));
		json_t *ts = json_array();
		for (size_t i = 0; i < tptr.size(); i++) {
			json_t *tj = twc_agent_sum_json(tptr[i], tlen[i]);
			json_object_set_new(tj, "device", json_string(tdev[i].c_str()));
			json_array_append_new(ts, tj);
		}
		twc_agent_event_ok("read", id, json_pack("{s:o,s:o}", "payloads", ps, "tensors", ts));
	});
}

void cmd_info(json_int_t id, const json_t *req)
{
	auto pe = find_pipe(str_field(req, "pipe"));
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "info: unknown pipe");
		return;
	}
	if (!g_ctx || g_ctx_closed) {
		twc_agent_respond_err(id, "closed", "closed", "info: the context is closed");
		return;
	}
	const std::shared_ptr<tp::PipeImpl> &impl = (*pe->pipe).*robbed(PipeImplOf{});
	std::shared_ptr<tp::ContextImpl> cimpl = (*impl).*robbed(ContextOf{});
	struct Result {
		bool established;
		std::string transport, channel;
	};
	auto prom = std::make_shared<std::promise<Result>>();
	auto fut = prom->get_future();
	std::shared_ptr<tp::PipeImpl> keep = impl;
	cimpl->deferToLoop([prom, keep]() {
		Result r;
		r.established = static_cast<int>((*keep).*robbedAuto(StateOf{})) == kStockEstablished;
		r.transport = (*keep).*robbed(TransportOf{});
		const auto &m = (*keep).*robbed(ChannelsOf{});
		auto it = m.find({tp::Device{"cpu", 0}, tp::Device{"cpu", 0}});
		r.channel = it == m.end() ? "" : it->second;
		prom->set_value(r);
	});
	if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
		twc_agent_respond_err(id, "timedout", "loop", "info: the loop did not run the query");
		return;
	}
	Result r = fut.get();
	if (!r.established) {
		twc_agent_respond_err(id, "inval", "not_established", "info: pipe not established");
		return;
	}
	twc_agent_respond_ok(id, json_pack("{s:s,s:s,s:s,s:b,s:[]}", "transport", r.transport.c_str(),
	                                  "channel", r.channel.c_str(), "remote_name",
	                                  pe->pipe->getRemoteName().c_str(), "is_server",
	                                  pe->is_server, "extensions"));
}

void cmd_close(json_int_t id, const json_t *req)
{
	if (json_object_get(req, "pipe")) {
		auto pe = find_pipe(str_field(req, "pipe"));
		if (!pe) {
			twc_agent_respond_err(id, "inval", "bad_request", "close: unknown pipe");
			return;
		}
		pe->pipe->close();
	} else if (json_object_get(req, "listener")) {
		auto l = find_listener(str_field(req, "listener"));
		if (!l) {
			twc_agent_respond_err(id, "inval", "bad_request", "close: unknown listener");
			return;
		}
		l->close();
	} else if (json_is_true(json_object_get(req, "context"))) {
		if (g_ctx && !g_ctx_closed) {
			g_ctx_closed = true;
			g_ctx->close();
		}
	} else {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     "close: name a 'pipe', a 'listener' or 'context': true");
		return;
	}
	twc_agent_respond_ok(id, nullptr);
}

void shutdown_context()
{
	if (g_ctx) {
		g_ctx_closed = true;
		g_ctx->close();
		g_ctx->join();
	}
}

void release_all()
{
	std::map<std::string, std::shared_ptr<PipeEntry>> pipes;
	std::map<std::string, std::shared_ptr<tp::Listener>> listeners;
	{
		std::lock_guard<std::mutex> lk(g_mu);
		pipes.swap(g_pipes);
		listeners.swap(g_listeners);
	}
	pipes.clear();
	listeners.clear();
	g_ctx.reset();
}

} // namespace

int main()
{
	for (;;) {
		json_t *req = twc_agent_read_request();
		if (!req)
			break;
		const json_t *idj = json_object_get(req, "id");
		json_int_t id = json_is_integer(idj) ? json_integer_value(idj) : -1;
		std::string cmd = str_field(req, "cmd");
		if (id < 0) {
			twc_agent_respond_err(-1, "inval", "bad_request",
			                     "request without a non-negative integer 'id'");
		} else if (cmd == "hello") {
			cmd_hello(id, req);
		} else if (cmd == "context") {
			cmd_context(id, req);
		} else if (cmd == "listen") {
			cmd_listen(id, req);
		} else if (cmd == "accept") {
			cmd_accept(id, req);
		} else if (cmd == "connect") {
			cmd_connect(id, req);
		} else if (cmd == "write") {
			cmd_write(id, req);
		} else if (cmd == "read_descriptor") {
			cmd_read_descriptor(id, req);
		} else if (cmd == "read") {
			cmd_read(id, req);
		} else if (cmd == "info") {
			cmd_info(id, req);
		} else if (cmd == "close") {
			cmd_close(id, req);
		} else if (cmd == "fds") {
			twc_agent_cmd_fds(id, req);
		} else if (cmd == "dumpable") {
			twc_agent_cmd_dumpable(id, req);
		} else if (cmd == "forks") {
			twc_agent_cmd_forks(id, req);
		} else if (cmd == "shutdown") {
			shutdown_context();
			twc_agent_respond_ok(id, nullptr);
		} else {
			twc_agent_respond_err(id, "unsupported", "unknown_command",
			                     ("unknown command '" + cmd + "'").c_str());
		}
		json_decref(req);
	}
	shutdown_context();
	release_all();
	return 0;
}
