# Known exceptions of libtensorwire (conformance/iut/tensorwire). Every MUST
# case passes; what is listed here is a SHOULD that the wire itself cannot
# support. None at the moment: a graceful close and a killed peer are told
# apart by the goodbye extension (spec/wire.md 8.2), and a client that leaves
# after the answer is noticed by the end watch (spec/wire.md 5.6.b), one that
# stays silent by the handshake timeout (3.8.e).
#
# Format: <case id or glob>  XFAIL  <reason>  --  <link>
