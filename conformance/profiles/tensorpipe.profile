# Known exceptions of stock TensorPipe: Debian libtensorpipe0
# 0.0~git20220513.bb1473a-3, the build PyTorch 1.13 uses, driven through
# conformance/iut/tensorpipe. TensorPipe is archived upstream, so none of
# these will be fixed there; each is observed, not assumed (see
# docs/stock-bad-input.md for the raw observations and how to reproduce them).
#
# Format: <case id or glob>  XFAIL  <reason>  --  <link>

wire.close_before_hello       XFAIL  the listener dies when a connection closes before its hello; no further pipe is accepted (a port scan or health check is enough)  --  docs/stock-bad-input.md, wire.md 5.4 (5.4.a)
wire.bad_type_byte            XFAIL  aborts the whole process: uncaught "Unexpected Encoding Type" on the loop thread  --  docs/stock-bad-input.md, wire.md 5.2 (5.2.b, 5.2.c)
wire.bad_variant_index        XFAIL  aborts the whole process: uncaught "Unexpected Variant Type"  --  docs/stock-bad-input.md, wire.md 5.2 (5.2.b, 5.2.c)
wire.truncated_hello          XFAIL  aborts the whole process: uncaught "Read Limit Reached"  --  docs/stock-bad-input.md, wire.md 5.2 (5.2.b, 5.2.c)
wire.huge_length_prefix       XFAIL  aborts the whole process: allocates the announced 2^62 bytes (std::bad_alloc; under ASan the sanitizer's allocator refuses first)  --  docs/stock-bad-input.md, wire.md 5.3 (5.3.a), 2.2 (2.2.b)
wire.huge_descriptor_length   XFAIL  aborts the whole process: allocates the 2^62 bytes a Descriptor frame announces (std::bad_alloc; under ASan the sanitizer's allocator refuses first)  --  docs/stock-bad-input.md, wire.md 5.3 (5.3.a), 2.2 (2.2.b)
wire.no_common_transport      XFAIL  aborts the whole process: "Could not find a viable transport" is thrown, not reported to the pipe  --  docs/stock-bad-input.md, wire.md 3.5 (3.5.b)
wire.truncated_descriptor     XFAIL  aborts the whole process: uncaught "Read Limit Reached" while decoding a Descriptor  --  docs/stock-bad-input.md, wire.md 5.2 (5.2.a)
wire.payload_length_mismatch  XFAIL  aborts the whole process: debug assertion "Expected readLength_ == givenLength_" left enabled in Debian's build  --  docs/stock-bad-input.md, wire.md 5.5 (5.5.a)
wire.tensor_length_mismatch   XFAIL  aborts the whole process: the same assertion on the basic channel's connection  --  docs/stock-bad-input.md, wire.md 4.2 (4.2.a)
semantic.close_vs_kill_distinct  XFAIL  a closed and a killed peer both end the pending read with EOF: the wire has no goodbye, so both look like a TCP FIN  --  wire.md 5.6
wire.close_after_answer_noticed  XFAIL  a client that leaves after the BrochureAnswer leaves the server pipe pending forever: stock reads only while a read is pending and has no handshake timeout  --  wire.md 5.6 (5.6.b), 3.8 (3.8.e)
# Battery runs on stock's other backends (--combo; CTest conformance.combos
# runs uv+mpt, uv+cma, shm+basic and shm+cma; ci/main.sh also ibv+basic on
# simverbs):
semantic.delivered_after_close@shm+*  XFAIL  on shm, what a writer wrote before a graceful close is lost if the reader had not read it yet: after a 3 s pause the reader got 1 of 600 acknowledged messages, then read_descriptor failed with eof (transport/shm/connection_impl.cc:259) although the rest had reached its inbox ring (600 KiB in a 2 MiB ring)  --  wire.md 5.6 (5.6.c), docs/stock-tensorpipe-findings.md F22
semantic.close_with_pending@shm+*  XFAIL  timing-dependent, seen under CPU load (3 of 6 loaded runs): closing with operations pending, the shm server process is killed by SIGPIPE (its bootstrap socket is written after the peer closed it, without MSG_NOSIGNAL: F20 on shm), or its pending accept fails with 'reset' instead of 'closed'  --  agent.md 6.10, docs/stock-tensorpipe-findings.md F20
semantic.descriptor_then_close@uv+mpt  XFAIL  timing-dependent, seen once in CI (conformance.combos, 2026-11-26; not reproduced alone): the stock client is killed by SIGPIPE when the server closes while stock still writes on one of the mpt lanes (F20 on mpt)  --  agent.md 6.10, docs/stock-tensorpipe-findings.md F20
semantic.delivered_after_close@ibv+*  XFAIL  on ibv (simverbs), the same as on shm: 1 of 600 acknowledged messages reaches the reader that paused 3 s, then read_descriptor fails with eof (transport/ibv/connection_impl.cc:302)  --  wire.md 5.6 (5.6.c), docs/stock-tensorpipe-findings.md F22
semantic.packet_limit@shm+*     XFAIL  aborts the whole process: a message whose Descriptor is over the 2 MiB ring packet (3 MiB of metadata) throws "len_ > outbox.getSize()" in writeNopObject (common/ringbuffer_read_write_ops.h:288), uncaught, instead of failing that write  --  wire.md 2.5 (2.5.a), 2.3.3
# Hostile ibv set-up records (wire/ibv_setup.c), on simverbs:
wire.ibv_qpn_zero             XFAIL  no check of the set-up record: a QP number of 0 is accepted and the connection stays open (it moves its queue pair towards QP 0)  --  wire.md 2.4.1 (2.4.1.b), docs/stock-tensorpipe-findings.md F35
wire.ibv_qpn_wide             XFAIL  no check of the set-up record: a QP number wider than 24 bits is accepted and the connection stays open  --  wire.md 2.4.1 (2.4.1.b), docs/stock-tensorpipe-findings.md F35
wire.ibv_bad_mtu              XFAIL  no check of the set-up record: an MTU enum of 9 is accepted and the connection stays open  --  wire.md 2.4.1 (2.4.1.b), docs/stock-tensorpipe-findings.md F35
wire.ibv_trailing_bytes       XFAIL  the listener dies: the error of the hostile connection (eof, transport/ibv/connection_impl.cc:302) is given to the next pending accept, as on uv (wire.close_before_hello)  --  wire.md 2.4.1 (2.4.1.c), 3.3 (3.3.f), docs/stock-tensorpipe-findings.md F35
wire.ibv_short_record         XFAIL  the listener dies: the hostile connection's 'Broken pipe' (transport/ibv/connection_impl.cc:243) is given to the next pending accept  --  wire.md 2.4.1 (2.4.1.a), 3.3 (3.3.f), docs/stock-tensorpipe-findings.md F35
wire.ibv_fuzz_record_*        XFAIL  the listener dies after any fuzzed set-up record: its connection's end (eof, transport/ibv/connection_impl.cc:302, or 'Broken pipe', :243) is given to the next pending accept (12 of 12 seeds, no other signature)  --  wire.md 2.4.1, 3.3 (3.3.f), docs/stock-tensorpipe-findings.md F35
wire.ibv_silent_close         XFAIL  the listener dies: a connection closed before its set-up record fails the next pending accept with 'Broken pipe' (transport/ibv/connection_impl.cc:243): a port scan is enough  --  wire.md 3.3 (3.3.f), docs/stock-tensorpipe-findings.md F35
# The rdma suite (issue 12 item 6), on simverbs device configurations:
rdma.first_port_down          XFAIL  takes the first device, port 1, whatever its state: with that port down its queue pair goes nowhere and the pipe ends with eof (transport/ibv/connection_impl.cc:302); a tensorwire server waits for a hello that never comes  --  wire.md 2.4.5, docs/stock-tensorpipe-findings.md F32 (T19)
rdma.gid_link_local_first     XFAIL  takes GID index 0, a link-local RoCE v1 entry here, which routes nowhere: the pipe ends with eof (transport/ibv/connection_impl.cc:302)  --  wire.md 2.4.5, docs/stock-tensorpipe-findings.md F32 (T24)
rdma.no_srq                   XFAIL  aborts the whole process: ibv_create_srq's EOPNOTSUPP is thrown as std::system_error (common/ibv.h:172) when the context is created  --  wire.md 2.4.3, docs/stock-tensorpipe-findings.md F33 (T30)
rdma.small_queues             XFAIL  aborts the whole process: its fixed queue sizes (2048 sends, 3072 completions) exceed the device's max_qp_wr/max_cqe, and the EINVAL is thrown (common/ibv.h:151)  --  wire.md 2.4.3 (2.4.3.d), docs/stock-tensorpipe-findings.md F33
rdma.small_max_msg            XFAIL  RDMA writes of up to 2 MiB on a port whose max_msg_sz is 64 KiB: the write completes in error and the pipe ends (stock to stock: no verdict at all within the case's bound)  --  wire.md 2.4.3 (2.4.3.d), docs/stock-tensorpipe-findings.md F34 (H2)
semantic.packet_limit@ibv+*     XFAIL  aborts the whole process on ibv (simverbs) the same way: "len_ > outbox.getSize()" (common/ringbuffer_read_write_ops.h:288)  --  wire.md 2.5 (2.5.a), 2.3.3
semantic.silent_peer_deadline    XFAIL  no operation deadline: a read_descriptor on a pipe whose peer is stopped (SIGSTOP) stays pending until the pipe is closed (the adapter reports operation_timeout_ms as unhonoured); stock has no liveness bound either (spec 5.8.a-b)  --  wire.md 5.8 (5.8.c)
wire.registration_timeout        XFAIL  no handshake timeout: a server pipe whose client never opens its requested connections waits until it is closed, holding its registration ids and sockets (the adapter reports handshake_timeout_ms as unhonoured)  --  wire.md 3.8 (3.8.e) Stock deviates
wire.client_unknown_transport  XFAIL  aborts the whole client process: std::invalid_argument "unsupported transport zz" thrown from getTransport  --  wire.md 3.7 (3.7.a), 5.7
wire.client_bad_channels       XFAIL  aborts the whole client process: "Inconsistent channel selection" is an assertion, not a pipe error  --  wire.md 3.7 (3.7.d), 5.7
wire.client_truncated_answer   XFAIL  aborts the whole client process: uncaught "Read Limit Reached" while decoding the BrochureAnswer  --  wire.md 5.2 (5.2.a)
wire.client_write_waits_for_requested  XFAIL  its write reports success as soon as the Descriptor and payload are on the bootstrap connection, while the requested connections are still connecting: a writer that closes on that callback takes them down unsent, and the server never establishes the pipe (the message is lost)  --  wire.md 5.6 (5.6.e)

# Found by the black-box wire fuzzer (conformance/wirefuzz, tensorwire issue 5):
# one line per failure class F1..F21 of docs/stock-tensorpipe-findings.md, each
# covering that class's reproducers in conformance/wirefuzz/findings/ (cases
# wire.fuzz_<class>_<role>_<n>). Observed under the ASan adapter and the
# release one alike, except where the line says otherwise.
wire.fuzz_nop_encoding_*            XFAIL  aborts the whole process: a prefix byte of the wrong type in any packet ("Unexpected Encoding Type") is thrown on the loop thread and nothing catches it  --  docs/stock-tensorpipe-findings.md F1, wire.md 5.2 (5.2.a-c)
wire.fuzz_nop_variant_*             XFAIL  aborts the whole process: a Packet variant index out of range ("Unexpected Variant Type")  --  docs/stock-tensorpipe-findings.md F2, wire.md 5.2 (5.2.b, 5.2.c)
wire.fuzz_nop_member_count_*        XFAIL  aborts the whole process: a structure with the wrong member count ("Invalid Member Count")  --  docs/stock-tensorpipe-findings.md F3, wire.md 5.2 (5.2.a-c)
wire.fuzz_nop_read_limit_*          XFAIL  aborts the whole process: a count or length that runs past the frame ("Read Limit Reached")  --  docs/stock-tensorpipe-findings.md F4, wire.md 5.2 (5.2.a-c)
wire.fuzz_nop_container_length_*    XFAIL  aborts the whole process: a Binary vector<uint64> whose length is not a multiple of 8 ("Invalid Container Length")  --  docs/stock-tensorpipe-findings.md F5, wire.md 1.6 (1.6.c), 5.2
wire.fuzz_truncated_read_*          XFAIL  SIGSEGV: a value that ends before its prefix byte or fixed-width integer makes the reader dereference a null pointer (a read past the frame)  --  docs/stock-tensorpipe-findings.md F6, wire.md 1.12 (1.12.b), 5.2 (5.2.e)
wire.fuzz_frame_alloc_*             XFAIL  aborts the whole process: allocates whatever a uv length prefix says (std::bad_alloc; ASan's allocator refuses first)  --  docs/stock-tensorpipe-findings.md F7, wire.md 5.3 (5.3.a), 2.2 (2.2.b)
wire.fuzz_listener_dies_*           XFAIL  the listener closes for good when an accepted connection ends before its first frame, a requested connection included  --  docs/stock-tensorpipe-findings.md F8, wire.md 5.4 (5.4.a), 3.3 (3.3.f)
wire.fuzz_no_viable_transport_*     XFAIL  aborts the whole process: "Could not find a viable transport" is thrown, not reported to the pipe  --  docs/stock-tensorpipe-findings.md F9, wire.md 3.5 (3.5.b)
wire.fuzz_no_channel_for_tensor_*   XFAIL  aborts the whole process: a tensor for a device pair that no selected channel serves ("Could not find suitable channel")  --  docs/stock-tensorpipe-findings.md F10, wire.md 3.5 (3.5.c), 5.2 (5.2.b)
wire.fuzz_length_mismatch_*         XFAIL  aborts the whole process: a payload or tensor frame longer or shorter than announced (debug assertion left enabled)  --  docs/stock-tensorpipe-findings.md F11, wire.md 5.5 (5.5.a)
wire.fuzz_reply_short_*             XFAIL  SIGSEGV: a DescriptorReply with fewer devices than tensors that lack one is indexed past its end  --  docs/stock-tensorpipe-findings.md F12, wire.md 3.11 (3.11.c), 5.5 (5.5.b)
wire.fuzz_reply_unknown_device_*    XFAIL  aborts the whole process: a DescriptorReply naming a device no channel serves  --  docs/stock-tensorpipe-findings.md F13, wire.md 3.11 (3.11.c), 5.5 (5.5.b)
wire.fuzz_answer_unknown_transport_*  XFAIL  aborts the whole client process: "unsupported transport" from getTransport  --  docs/stock-tensorpipe-findings.md F14, wire.md 3.7 (3.7.a)
wire.fuzz_answer_domain_descriptor_*  XFAIL  aborts the whole client process: a transportDomainDescriptor it does not accept is an assertion  --  docs/stock-tensorpipe-findings.md F15, wire.md 3.7 (3.7.a)
wire.fuzz_answer_no_reply_id_*      XFAIL  aborts the whole client process: an answer without key 1 in transportRegistrationIds is an assertion  --  docs/stock-tensorpipe-findings.md F16, wire.md 3.6 (3.6.b), 5.2
wire.fuzz_answer_bad_address_*      XFAIL  aborts the whole client process: an address it cannot parse (std::invalid_argument from createInetSockAddr)  --  docs/stock-tensorpipe-findings.md F17, wire.md 5.2 (5.2.a, 5.2.b)
wire.fuzz_answer_channel_ids_*      XFAIL  aborts the whole client process: no registration ids for a selected channel (std::out_of_range from unordered_map::at)  --  docs/stock-tensorpipe-findings.md F18, wire.md 3.7 (3.7.d)
wire.fuzz_answer_channel_selection_*  XFAIL  aborts the whole client process: an inconsistent channel selection is an assertion  --  docs/stock-tensorpipe-findings.md F19, wire.md 3.7 (3.7.d)
wire.fuzz_sigpipe_*                 XFAIL  killed by SIGPIPE: writes to a connection the peer has closed without MSG_NOSIGNAL; timing-dependent (the release adapter survived the server-role reproducer once)  --  docs/stock-tensorpipe-findings.md F20, wire.md 5.6 (5.6.a), 5.2 (5.2.b)
wire.fuzz_pending_*                 XFAIL  (SHOULD) a server pipe waiting for a registered connection never notices that the others closed; its operations stay pending  --  docs/stock-tensorpipe-findings.md F21, wire.md 5.6 (5.6.b), 3.8 (3.8.e)

# The contain suite (same-host mechanisms across sandboxes, tensorwire issue 11
# item 4), run as root on one host:
contain.cma_refused_before_use  XFAIL  cma is selected on matching descriptors alone; the peer cannot copy from a process that turned non-dumpable (no CAP_SYS_PTRACE), so the first tensor fails the pipe with "process_vm_readv: Operation not permitted" (channel/cma/context_impl.cc:60) where a working path (basic) existed  --  wire.md 6 (6.b), 8.3; field failure T01
contain.memfd_enosys_small_shm  XFAIL  aborts the whole process when its shm context is created: with memfd_create missing (ENOSYS) it falls back to /dev/shm, and a 1 MiB /dev/shm makes the reactor's 4 MiB ring fail (fallocate ENOSPC), thrown as an uncaught std::runtime_error (transport/shm/reactor.cc:49) instead of declaring shm not viable  --  wire.md 6 (6.b); field failures T04, T07

# The shm bootstrap from a hostile raw client (conformance/suites/wire/shm_bootstrap.c):
wire.shm_bytes_only      XFAIL  aborts the whole listening process: an exchange without descriptors throws "Expected cmsg(0) != nullptr" (common/socket.h:167), uncaught  --  docs/stock-tensorpipe-findings.md F24, wire.md 2.3.1 (2.3.1.b)
wire.shm_two_fds         XFAIL  aborts the whole listening process: an exchange with 2 descriptors throws "Expected cmsg->cmsg_len(24) == (32)" (common/socket.h:170), uncaught  --  docs/stock-tensorpipe-findings.md F24, wire.md 2.3.1 (2.3.1.b)
wire.shm_tiny_segments   XFAIL  aborts the whole listening process: 16-byte segments throw "Shared memory file has unexpected size" (common/shm_segment.h:122), uncaught  --  docs/stock-tensorpipe-findings.md F24, wire.md 2.3.2 (2.3.2.a)
wire.shm_lying_capacity  XFAIL  aborts the whole listening process: a header announcing a 1 TiB ring over a smaller data segment throws "Data segment of unexpected size" (common/shm_ringbuffer.h:78), uncaught  --  docs/stock-tensorpipe-findings.md F24, wire.md 2.3.2 (2.3.2.a)
wire.shm_five_fds        XFAIL  keeps a connection whose exchange carried 5 descriptors open (MSG_CTRUNC not checked)  --  docs/stock-tensorpipe-findings.md F25, wire.md 2.3.1 (2.3.1.b)
wire.shm_nine_bytes      XFAIL  a bad exchange from a stranger fails the application's pending accept with eof (transport/shm/connection_impl.cc:259); the next well-formed client is not accepted  --  docs/stock-tensorpipe-findings.md F26, wire.md 3.3 (3.3.f)
wire.shm_silent_close    XFAIL  the listening process is killed by SIGPIPE when a client connects to its shm listener and closes at once (its exchange is written without MSG_NOSIGNAL)  --  docs/stock-tensorpipe-findings.md F27, F20

# mpt lane listeners from a hostile raw client (conformance/suites/wire/mpt_lanes.c):
wire.mpt_lane_garbage        XFAIL  aborts the whole process: a frame that is no packet as a lane's first frame throws "Unexpected Encoding Type" from the lane's read callback (transport/connection_impl_boilerplate.h:249), uncaught  --  docs/stock-tensorpipe-findings.md F28, wire.md 4.3 (4.3.b)
wire.mpt_lane_server_hello   XFAIL  aborts the whole process: a ServerHello as a lane's first frame trips "Expected nopPacketIn.index() == index_of<ClientHello>" (channel/mpt/context_impl.cc:193)  --  docs/stock-tensorpipe-findings.md F29, wire.md 4.3 (4.3.b)
wire.mpt_lane_silent_close   XFAIL  a connection to a lane listener that closes without a frame makes the next mpt pipe fail: its read gets "channel closed" (channel/channel_impl_boilerplate.h:147)  --  docs/stock-tensorpipe-findings.md F30, wire.md 4.3 (4.3.b)
# fuzzed ClientHellos on a lane (wire.mpt_lane_fuzz_N; seeds 2, 3 and 6 pass):
wire.mpt_lane_fuzz_0         XFAIL  SIGSEGV (a read of address 0): a lane's first frame cut to 3 bytes (b8 01 b9) is decoded past its end (EncodingIO<unsigned long>::Read in NopHolder<Variant<ServerHello, ClientHello>>::read)  --  docs/stock-tensorpipe-findings.md F37, wire.md 1.12, 4.3 (4.3.b)
wire.mpt_lane_fuzz_5         XFAIL  SIGSEGV (a read of address 0): an empty frame as a lane's first frame  --  docs/stock-tensorpipe-findings.md F37, wire.md 1.12, 4.3 (4.3.b)
wire.mpt_lane_fuzz_10        XFAIL  SIGSEGV (a read of address 0): a one-byte frame (b8) as a lane's first frame  --  docs/stock-tensorpipe-findings.md F37, wire.md 1.12, 4.3 (4.3.b)
wire.mpt_lane_fuzz_4         XFAIL  aborts the whole process: a first frame that is no Packet (b0 01 ...) throws from the lane's read callback, uncaught, as F28  --  docs/stock-tensorpipe-findings.md F28, wire.md 4.3 (4.3.b)
wire.mpt_lane_fuzz_7         XFAIL  aborts the whole process: a ClientHello whose member is a binary (bc) throws from the lane's read callback, uncaught, as F28  --  docs/stock-tensorpipe-findings.md F28, wire.md 4.3 (4.3.b)
wire.mpt_lane_fuzz_1         XFAIL  a lane connection whose first frame's prefix promises more bytes than come before the end makes the next mpt pipe fail ('channel closed', channel/channel_impl_boilerplate.h:147), as F30  --  docs/stock-tensorpipe-findings.md F30, wire.md 4.3 (4.3.b)
wire.mpt_lane_fuzz_8         XFAIL  the same as wire.mpt_lane_fuzz_1 (another cut frame): the next mpt pipe fails with 'channel closed'  --  docs/stock-tensorpipe-findings.md F30, wire.md 4.3 (4.3.b)
wire.mpt_lane_fuzz_9         XFAIL  the same as wire.mpt_lane_fuzz_1: the next mpt pipe fails with 'channel closed'  --  docs/stock-tensorpipe-findings.md F30, wire.md 4.3 (4.3.b)
wire.mpt_lane_fuzz_11        XFAIL  the same as wire.mpt_lane_fuzz_1: the next mpt pipe fails with 'channel closed'  --  docs/stock-tensorpipe-findings.md F30, wire.md 4.3 (4.3.b)
semantic.listener_out_of_fds     XFAIL  timing-dependent (2 of 9 runs here): the stock server conforms (the refused client's connection is reset at once, the pipe it has keeps working, it accepts again once descriptors are free), but a stock client whose connection is reset while it still writes is killed by SIGPIPE (F20). (Until 2026-11-27 this line blamed a UBSan "invalid vptr" report in the stock server: that was the sanitizer, whose vptr check opens a pipe and misreports sound code when no descriptor is free; the stock adapter is now built without that one check.)  --  wire.md 5.8 (5.8.d), docs/stock-tensorpipe-findings.md F20
semantic.connect_storm_prompt    XFAIL  timing-dependent (1 of 42 idle storms against a stock server here, more likely under load): stock listens with a backlog of 128 (transport/uv/uv.h kBacklog), so 200 clients at once can overflow its accept queue (12-130 overflows in 6 of 22 storms whose counts were recorded) and a client then waits for a SYN retransmission: all 200 accepted after 1033 ms instead of 29-72 ms. No pipe was lost in any storm (semantic.connect_storm passes)  --  wire.md 5.8 (5.8.f)
