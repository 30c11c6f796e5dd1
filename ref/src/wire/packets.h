/*
 * packets.h - TensorPipe's wire types (spec/wire.md sections 3 and 4) as C
 * structs, with an encoder and a decoder for each.
 *
 * Decoders: tw__wire_decode_<type>(bytes, len, out, consumed_out, detail,
 * detail_len). On success *out owns its memory (free with
 * tw__wire_<type>_free) and *consumed_out is the number of bytes the object
 * used; trailing bytes are the caller's business (stock ignores them). On
 * failure nothing needs freeing, the status is TW_ERR_PROTO (or
 * TW_ERR_NOMEM) and `detail` names the field and the problem, e.g.
 * "Brochure.transportDomainDescriptors[1].value: string length
 * 4611686018427387904 exceeds the 3 bytes left". Every allocation is bounded
 * by a small multiple of `len`.
 *
 * Maps are decoded into arrays in wire order; for duplicate keys only the
 * first entry is kept (stock's emplace keeps the first). Strings are copied
 * and NUL-terminated (they may also contain NULs: use the length).
 *
 * Encoders append to a tw_nop_writer and emit maps in array order, so the
 * caller controls byte-exact output.
 */
#ifndef TW_WIRE_PACKETS_H
#define TW_WIRE_PACKETS_H

#include <stddef.h>
#include <stdint.h>

#include "wire/nop.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_wire_str {
	char *s;   /* NUL-terminated copy */
	size_t n;  /* length without the NUL */
} tw_wire_str;

typedef struct tw_wire_device {
	tw_wire_str type;
	int32_t index;
} tw_wire_device;

/* ---- Packet (hello on every new connection, spec 3.3) ---- */
enum { TW_PACKET_EMPTY = -1, TW_PACKET_SPONTANEOUS = 0, TW_PACKET_REQUESTED = 1 };
typedef struct tw_wire_packet {
	int32_t kind;              /* TW_PACKET_* */
	tw_wire_str context_name;  /* SPONTANEOUS */
	uint64_t registration_id;  /* REQUESTED */
} tw_wire_packet;

/* ---- Brochure (client -> server, spec 3.4) ---- */
typedef struct tw_wire_kv {            /* map<string,string> entry */
	tw_wire_str key;
	tw_wire_str value;
} tw_wire_kv;
typedef struct tw_wire_device_desc {   /* map<Device,string> entry */
	tw_wire_device device;
	tw_wire_str descriptor;
} tw_wire_device_desc;
typedef struct tw_wire_channel_devices {  /* map<string, map<Device,string>> entry */
	tw_wire_str channel;
	size_t num_devices;
	tw_wire_device_desc *devices;
} tw_wire_channel_devices;
typedef struct tw_wire_brochure {
	size_t num_transports;
	tw_wire_kv *transports;               /* name -> domain descriptor */
	size_t num_channels;
	tw_wire_channel_devices *channels;    /* name -> device -> descriptor */
} tw_wire_brochure;

/* ---- BrochureAnswer (server -> client, spec 3.6) ---- */
typedef struct tw_wire_id_entry {      /* map<uint64,uint64> entry */
	uint64_t key;   /* 0 = replacement descriptor connection, 1 = descriptor reply */
	uint64_t id;
} tw_wire_id_entry;
typedef struct tw_wire_channel_ids {   /* map<string, vector<uint64>> entry (Binary!) */
	tw_wire_str channel;
	size_t num_ids;
	uint64_t *ids;
} tw_wire_channel_ids;
typedef struct tw_wire_device_pair {   /* map<pair<Device,Device>, string> entry */
	tw_wire_device server_device;  /* first: the server's (answer writer's) device */
	tw_wire_device client_device;
	tw_wire_str channel;
} tw_wire_device_pair;
typedef struct tw_wire_brochure_answer {
	tw_wire_str transport;
	tw_wire_str address;
	size_t num_transport_ids;
	tw_wire_id_entry *transport_ids;
	tw_wire_str transport_domain_descriptor;
	size_t num_channel_ids;
	tw_wire_channel_ids *channel_ids;
	size_t num_channels;
	tw_wire_channel_devices *channels;
	size_t num_device_pairs;
	tw_wire_device_pair *device_pairs;
} tw_wire_brochure_answer;

/* ---- Descriptor (spec 3.10) ---- */
typedef struct tw_wire_payload_desc {
	uint64_t length;
	tw_wire_str metadata;
} tw_wire_payload_desc;
typedef struct tw_wire_tensor_desc {
	uint64_t length;
	tw_wire_device source_device;
	bool has_target_device;
	tw_wire_device target_device;
	tw_wire_str metadata;
} tw_wire_tensor_desc;
typedef struct tw_wire_descriptor {
	tw_wire_str metadata;
	size_t num_payloads;
	tw_wire_payload_desc *payloads;
	size_t num_tensors;
	tw_wire_tensor_desc *tensors;
} tw_wire_descriptor;

/* ---- DescriptorReply (spec 3.11) ---- */
typedef struct tw_wire_descriptor_reply {
	size_t num_target_devices;
	tw_wire_device *target_devices;
} tw_wire_descriptor_reply;

/* ---- channel packets (spec 4) ---- */
typedef struct tw_wire_lane_advertisement {
	tw_wire_str address;
	uint64_t registration_id;
} tw_wire_lane_advertisement;
enum { TW_MPT_SERVER_HELLO = 0, TW_MPT_CLIENT_HELLO = 1 };
typedef struct tw_wire_mpt_packet {
	int32_t kind;  /* TW_MPT_*, or TW_PACKET_EMPTY */
	size_t num_lanes;
	tw_wire_lane_advertisement *lanes;   /* SERVER_HELLO */
	uint64_t registration_id;            /* CLIENT_HELLO */
} tw_wire_mpt_packet;
typedef struct tw_wire_cma_descriptor {
	uint32_t pid;
	uint64_t ptr;
} tw_wire_cma_descriptor;
typedef struct tw_wire_xth_descriptor {
	uint64_t ptr;
} tw_wire_xth_descriptor;
/* cuda_xth Descriptor (spec 4.6.1): raw handles of the sending process */
typedef struct tw_wire_cuda_xth_descriptor {
	uint64_t start_event;
	uint64_t src_ptr;
	int32_t src_device;
	uint64_t src_stream;
} tw_wire_cuda_xth_descriptor;
/* cuda_ipc device descriptor (spec 4.6.3), carried inside the string */
typedef struct tw_wire_cuda_ipc_device {
	tw_wire_str boot_id;
	int64_t pid;
	tw_wire_str device_uuid; /* lowercase 8-4-4-4-12, no "GPU-" */
} tw_wire_cuda_ipc_device;
/* cuda_ipc Descriptor (spec 4.6.3): a chunk in slot `slot` of the sender's
 * staging area on its device `device`; the area's handles the first time */
typedef struct tw_wire_cuda_ipc_descriptor {
	int32_t device;
	uint64_t slot;
	bool has_outbox;
	tw_wire_str process;    /* outbox: "<pidns>_<pid>" */
	tw_wire_str mem_handle; /* outbox: 64 bytes */
	size_t num_events;
	tw_wire_str *events;    /* outbox: one 64-byte event handle per slot */
} tw_wire_cuda_ipc_descriptor;
/* cuda_basic device descriptor (spec 4.6.2), carried inside the string */
typedef struct tw_wire_cuda_basic_device {
	tw_wire_str device_type;
	tw_wire_str cpu_descriptor;
} tw_wire_cuda_basic_device;

/* cuda_gdr (spec 4.6.4): one end of a queue pair, as stock's
 * NopIbvSetupInformation; the GID's 16 bytes travel as two uint64 read in
 * host order from its two halves (subnet prefix, interface id) */
typedef struct tw_wire_cuda_gdr_qp {
	uint32_t lid;
	uint64_t gid_subnet_prefix, gid_interface_id;
	uint32_t qpn;
	uint32_t mtu; /* enum ibv_mtu, 1..5 */
	uint32_t max_msg_size;
} tw_wire_cuda_gdr_qp;
/* HandshakeSetupInfo: row i is the writer's NIC i, its entry j towards the
 * reader's NIC j (rows of unequal length decode, as libnop reads them; the
 * channel checks the shape) */
typedef struct tw_wire_cuda_gdr_row {
	size_t n;
	tw_wire_cuda_gdr_qp *qps;
} tw_wire_cuda_gdr_row;
typedef struct tw_wire_cuda_gdr_setup {
	size_t rows;
	tw_wire_cuda_gdr_row *row;
} tw_wire_cuda_gdr_setup;
/* HandshakeNumNics{numNics}, Descriptor{originNicIdx} and
 * ReadyToReceive{destinationNicIdx}: each a Structure(1){uint64} */
typedef struct tw_wire_cuda_gdr_index {
	uint64_t value;
} tw_wire_cuda_gdr_index;

/* ---- functions: one encoder, decoder and free per type ---- */
/* tw__wire_decode_T##_within also bounds what the decoded value takes from
 * the heap (tw__wire_heap_cost of each of its allocations) by *budget, and
 * leaves what is left of it there: over it, the decode fails with
 * TW_ERR_PROTO, "decoded, the value takes more than the limit" (spec 5.3.d).
 * The counts are bounded by the input first either way (spec 1.13). */
#define TW_WIRE_DECLARE(T)                                                            \
	void tw__wire_encode_##T(tw_nop_writer *w, const tw_wire_##T *v);               \
	TW_NODISCARD tw_status_t tw__wire_decode_##T(const void *bytes, size_t len,     \
	                                             tw_wire_##T *out, size_t *consumed_out, \
	                                             char *detail, size_t detail_len);  \
	TW_NODISCARD tw_status_t tw__wire_decode_##T##_within(                          \
		const void *bytes, size_t len, size_t *budget, tw_wire_##T *out,          \
		size_t *consumed_out, char *detail, size_t detail_len);                   \
	void tw__wire_##T##_free(tw_wire_##T *v)

TW_WIRE_DECLARE(packet);
TW_WIRE_DECLARE(brochure);
TW_WIRE_DECLARE(brochure_answer);
TW_WIRE_DECLARE(descriptor);
TW_WIRE_DECLARE(descriptor_reply);
TW_WIRE_DECLARE(mpt_packet);
TW_WIRE_DECLARE(cma_descriptor);
TW_WIRE_DECLARE(xth_descriptor);
TW_WIRE_DECLARE(cuda_xth_descriptor);
TW_WIRE_DECLARE(cuda_basic_device);
TW_WIRE_DECLARE(cuda_ipc_device);
TW_WIRE_DECLARE(cuda_ipc_descriptor);
TW_WIRE_DECLARE(cuda_gdr_setup);
TW_WIRE_DECLARE(cuda_gdr_index);

/* What an allocation of n bytes takes from the heap, about: n, the
 * allocator's 8-byte header, 16-byte granules, 32 bytes at least (glibc). */
size_t tw__wire_heap_cost(size_t n);

/* Helpers for building values to encode (copying; TW_ERR_NOMEM on failure). */
TW_NODISCARD tw_status_t tw__wire_str_set(tw_wire_str *dst, const void *s, size_t n);
void tw__wire_str_free(tw_wire_str *s);

#ifdef __cplusplus
}
#endif

#endif /* TW_WIRE_PACKETS_H */
