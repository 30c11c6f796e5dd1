#!/usr/bin/env python3
"""seed_corpus.py - (re)writes the vector-derived seeds of fuzz/corpus/ from
spec/vectors/*.hex (format: spec/vectors/README.md).

Usage: python3 fuzz/tools/seed_corpus.py   (from anywhere; needs only python3)

Each vector becomes fuzz/corpus/<target>/v-<vector name>: packet vectors go
to their packet's target without their frame header, every packet and value
vector also to nop_value, framed vectors to uv_frame / ring_frame with their
header. Two whole bootstrap streams (spec/wire.md 3.9) are added to the frame
targets. Seeds that do not start with "v-" (found by fuzzing) are left alone.
"""
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(ROOT, 'spec', 'vectors')
CORPUS = os.path.join(ROOT, 'fuzz', 'corpus')
PACKETS = {'packet', 'brochure', 'brochure-answer', 'descriptor', 'descriptor-reply',
           'mpt-packet', 'cma-descriptor', 'xth-descriptor'}


def parse(path):
    keys, hexs = {}, []
    with open(path) as f:
        for line in f:
            line = line.rstrip('\n')
            if line.startswith('# ') and ':' in line:
                k, v = line[2:].split(':', 1)
                if ' ' not in k:
                    keys[k] = v.strip()
            elif not line.startswith('#'):
                hexs.append(line)
    return keys, bytes.fromhex(' '.join(hexs))


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'v-' + name), 'wb') as f:
        f.write(data)


def main():
    bodies = {}
    for fn in sorted(os.listdir(VECTORS)):
        if not fn.endswith('.hex'):
            continue
        name = fn[:-4]
        keys, data = parse(os.path.join(VECTORS, fn))
        frame, typ = keys.get('frame'), keys['type']
        hdr = {'uv': 8, 'ring': 4}.get(frame, 0)
        if frame:
            put(frame + '_frame', name, data)
        body = data[hdr:]
        if typ in PACKETS:
            put(typ.replace('-', '_'), name, body)
        if typ != 'frame':
            put('nop_value', name, body)
        bodies[name] = body
    # a whole bootstrap connection, client to server and back, in one stream
    order = ['hello-cli', 'brochure-uv-basic', 'brochure-answer-uv-basic', 'descriptor-hello']
    for frame, fmt in (('uv', '<Q'), ('ring', '<I')):
        stream = b''.join(struct.pack(fmt, len(bodies[n])) + bodies[n] for n in order)
        stream += struct.pack(fmt, 8) + b'PAYLOAD!'
        put(frame + '_frame', 'handshake-uv-basic', stream)


if __name__ == '__main__':
    main()
