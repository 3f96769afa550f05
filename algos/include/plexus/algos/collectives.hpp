// Collective algorithms over a PeerTransport. Each function runs the whole
// collective on the calling thread, BLOCKING until it completes or fails; the
// caller's buffers are borrowed for the call. Arguments are assumed valid
// (the backend checks them before posting). Every rank must call the same
// function with the same signature.
#pragma once

#include <cstdint>

#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"

namespace plexus::algos {

// Ring reduce-scatter followed by ring allgather. sendbuf may equal recvbuf.
Status RingAllreduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                     void* recvbuf);

// Binomial tree rooted at sig.root.
Status BinomialBroadcast(PeerTransport& t, const OpSignature& sig, void* buf);

// Ring allgather; sendbuf may equal recvbuf + rank * count * elem_size.
Status RingAllgather(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                     void* recvbuf);

// Dissemination barrier: ceil(log2 size) rounds of empty frames.
Status DisseminationBarrier(PeerTransport& t, const OpSignature& sig);

}  // namespace plexus::algos
