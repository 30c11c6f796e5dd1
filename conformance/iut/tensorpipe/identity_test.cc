/*
 * identity_test.cc - spec/wire.md 6 (6.a): the descriptors libtensorwire
 * builds for shm, cma and xth (ref/src/platform/identity.h) are byte for
 * byte the ones stock TensorPipe builds in the same process, so that a
 * stock peer on this host selects ours and ours selects it. Stock's come
 * from its own contexts (transport::shm::create()->domainDescriptor(),
 * channel::cma/xth::create()->deviceDescriptors() for cpu:0).
 *
 * Run by CTest as stock.identity where libtensorpipe-dev is installed.
 * Where stock declines a mechanism here (its context is not viable), the
 * test says so and checks the others; it fails if ours declines one stock
 * offers, or offers one stock declines for the reason identity.c mirrors
 * (differing user ids).
 */
#include <cstdio>
#include <cstring>
#include <string>

#include <tensorpipe/channel/cma/factory.h>
#include <tensorpipe/channel/xth/factory.h>
#include <tensorpipe/transport/shm/factory.h>

extern "C" {
#include "platform/identity.h"
}

static int failures;

static void compare(const char *what, bool stock_viable, const std::string &stock,
                    tw_status_t st, const char *ours, const char *detail)
{
	if (!stock_viable) {
		std::printf("# %s: stock does not offer it here; ours: %s\n", what,
		            st == TW_OK ? ours : detail);
		return;
	}
	if (st != TW_OK) {
		std::printf("not ok - %s: stock offers '%s', ours fails: %s\n", what, stock.c_str(),
		            detail);
		failures++;
	} else if (stock != ours) {
		std::printf("not ok - %s: stock '%s', ours '%s'\n", what, stock.c_str(), ours);
		failures++;
	} else {
		std::printf("ok - %s: '%s'\n", what, ours);
	}
}

int main()
{
	char ours[TW_IDENTITY_MAX], detail[512] = "";

	auto shm = tensorpipe::transport::shm::create();
	bool shm_ok = shm && shm->isViable();
	tw_status_t st = tw__identity_shm(ours, sizeof(ours), detail, sizeof(detail));
	compare("shm domain descriptor", shm_ok, shm_ok ? shm->domainDescriptor() : "", st, ours,
	        detail);

	tensorpipe::Device cpu{tensorpipe::kCpuDeviceType, 0};
	auto cma = tensorpipe::channel::cma::create();
	bool cma_ok = cma && cma->isViable();
	st = tw__identity_cma(ours, sizeof(ours), detail, sizeof(detail));
	compare("cma device descriptor (cpu:0)", cma_ok,
	        cma_ok ? cma->deviceDescriptors().at(cpu) : "", st, ours, detail);

	auto xth = tensorpipe::channel::xth::create();
	bool xth_ok = xth && xth->isViable();
	st = tw__identity_xth(ours, sizeof(ours), detail, sizeof(detail));
	compare("xth device descriptor (cpu:0)", xth_ok,
	        xth_ok ? xth->deviceDescriptors().at(cpu) : "", st, ours, detail);

	if (shm)
		shm->join();
	if (cma)
		cma->join();
	if (xth)
		xth->join();
	std::printf("%s - identity: %d mismatch(es)\n", failures ? "not ok" : "ok", failures);
	return failures ? 1 : 0;
}
