// stock_churn.cc - tw-stock-churn: field failure T09 for stock TensorPipe,
// the counterpart of ref.contain.nonviable_churn: 1000 contexts, each
// registering shm and cma where neither is viable (run under tw-sandbox:
// process_vm_readv refused, memfd_create missing, a 64 KiB /dev/shm), plus
// uv and basic; closed and joined, or destroyed without join. Exit 0 when
// every backend reported not viable and none hung or threw. A hang is the
// CTest timeout's to catch.
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>

#include <tensorpipe/tensorpipe.h>

namespace tp = tensorpipe;

int main()
{
	try {
		for (int i = 0; i < 1000; i++) {
			auto ctx = std::make_shared<tp::Context>();
			auto shm = tp::transport::shm::create();
			auto cma = tp::channel::cma::create();
			if (shm->isViable() || cma->isViable()) {
				std::fprintf(stderr, "tw-stock-churn: FAIL: iteration %d: shm viable %d, cma "
				                     "viable %d under the sandbox\n",
				             i, shm->isViable(), cma->isViable());
				return 1;
			}
			// as PyTorch does: a backend that is not viable is not registered,
			// only closed (or, every other time, dropped without a join)
			if (i % 2) {
				shm->close();
				shm->join();
				cma->close();
				cma->join();
			}
			shm.reset();
			cma.reset();
			ctx->registerTransport(0, "uv", tp::transport::uv::create());
			ctx->registerChannel(0, "basic", tp::channel::basic::create());
			if (i % 2) {
				ctx->close();
				ctx->join();
			}
		}
	} catch (const std::exception &e) {
		std::fprintf(stderr, "tw-stock-churn: FAIL: %s\n", e.what());
		return 1;
	}
	std::printf("ok - 1000 stock contexts with shm and cma not viable, half joined\n");
	return 0;
}
