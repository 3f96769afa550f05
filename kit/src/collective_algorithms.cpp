#include "plexus/kit/collective_algorithms.hpp"

#include <vector>

#include "plexus/abi/collectives.hpp"
#include "plexus/algos/collectives.hpp"

namespace plexus::kit {
namespace {

// The list's algorithm for call's collective (algos::Algorithm<code>). A
// collective of counts only rebuilds its call from the signature, so that
// the closure holds the two buffers alone (see AlgosBody); one with arrays
// holds a copy of them, which are the caller's only during the post.
OpBody ListBody(const Call& call, uint32_t size) {
  OpBody body = [](const OpProviders&, const algos::OpSignature& s) {
    return algos::Status{PLEXUS_ERR_INTERNAL,
                         std::string("no algorithm for ") + abi::CollectiveName(s.coll)};
  };
  abi::ForEachCollective([&](auto c) {
    constexpr plexus_collective_t kCode = decltype(c)::kCode;
    using Run = algos::Algorithm<kCode>;
    if constexpr (!abi::TraitsOf(kCode).sequenced) {
      return;  // send and recv are messages (PostAlgos)
    } else if (call.coll != kCode) {
      return;
    } else if constexpr (abi::TraitsOf(kCode).layout == abi::Layout::kCount) {
      body = [send = call.sendbuf, recv = call.recvbuf](const OpProviders& t,
                                                        const algos::OpSignature& s) {
        return Run::Run(t, s,
                        Call{.coll = s.coll,
                             .sendbuf = send,
                             .recvbuf = recv,
                             .count = s.count,
                             .dtype = s.dtype,
                             .op = s.op,
                             .root = s.root});
      };
    } else {
      body = [owned = abi::OwnedCall::Of(call, size)](const OpProviders& t,
                                                      const algos::OpSignature& s) {
        return Run::Run(t, s, owned.call);
      };
    }
  });
  return body;
}

algos::AllreduceFn AllreduceOf(AllreduceAlgo allreduce, OneHostShm* shm) {
  switch (allreduce) {
    case AllreduceAlgo::kOneHostShm:
      return [shm](algos::PeerTransport&, const algos::OpSignature& s, const void* send,
                   void* recv) { return shm->Allreduce(s, send, recv); };
    case AllreduceAlgo::kPairExchange:
      return algos::PairExchangeAllreduce;
    case AllreduceAlgo::kRecursiveDoubling:
      return algos::RecursiveDoublingAllreduce;
    case AllreduceAlgo::kRing:
      break;
  }
  return algos::RingAllreduce;
}

}  // namespace

OpBody AlgosBody(const Call& call, uint32_t size, AllreduceAlgo allreduce) {
  const void* send = call.sendbuf;
  void* recv = call.recvbuf;
  using T = const OpProviders;  // converts to the transport the algorithms take
  using S = algos::OpSignature;
  switch (call.coll) {
    case PLEXUS_COLL_ALLREDUCE:
      // One lambda per algorithm, each holding the two buffers only: a third
      // capture (the function to run) would not fit std::function's in-place
      // storage (16 bytes fit) and would cost an allocation per post.
      switch (allreduce) {
        case AllreduceAlgo::kOneHostShm:
          return
              [send, recv](T& p, const S& s) { return p.one_host_shm->Allreduce(s, send, recv); };
        case AllreduceAlgo::kPairExchange:
          return [send, recv](T& t, const S& s) {
            return algos::PairExchangeAllreduce(t, s, send, recv);
          };
        case AllreduceAlgo::kRecursiveDoubling:
          return [send, recv](T& t, const S& s) {
            return algos::RecursiveDoublingAllreduce(t, s, send, recv);
          };
        case AllreduceAlgo::kRing:
          break;
      }
      return [send, recv](T& t, const S& s) { return algos::RingAllreduce(t, s, send, recv); };
    case PLEXUS_COLL_ALLGATHER:
      if (allreduce == AllreduceAlgo::kOneHostShm) {
        return [send, recv](T& p, const S& s) { return p.one_host_shm->Allgather(s, send, recv); };
      }
      break;
    case PLEXUS_COLL_REDUCE_SCATTER:
      if (allreduce == AllreduceAlgo::kOneHostShm) {
        return
            [send, recv](T& p, const S& s) { return p.one_host_shm->ReduceScatter(s, send, recv); };
      }
      break;
    case PLEXUS_COLL_ALLREDUCE_COALESCED: {
      std::vector<const void*> sends(call.sendbufs, call.sendbufs + call.nbuffers);
      std::vector<void*> recvs(call.recvbufs, call.recvbufs + call.nbuffers);
      std::vector<uint64_t> counts(call.counts, call.counts + call.nbuffers);
      return [sends = std::move(sends), recvs = std::move(recvs), counts = std::move(counts),
              allreduce](T& p, const S& s) {
        return algos::PackedAllreduceCoalesced(p, s, sends, recvs, counts,
                                               AllreduceOf(allreduce, p.one_host_shm));
      };
    }
    default:
      break;
  }
  return ListBody(call, size);
}

int32_t PostAlgos(OpQueue& queue, const Call& call, AllreduceAlgo allreduce,
                  plexus_request** req_out) {
  if (call.coll == PLEXUS_COLL_SEND) {
    return queue.PostMessage(true, call.root, const_cast<void*>(call.sendbuf), call.count,
                             call.dtype, req_out);
  }
  if (call.coll == PLEXUS_COLL_RECV) {
    return queue.PostMessage(false, call.root, call.recvbuf, call.count, call.dtype, req_out);
  }
  // The signature every frame carries must be the same on every rank. A
  // v-collective whose arrays are alike on every rank (allgatherv: its
  // count is this rank's sendcount, which differs between ranks) carries
  // the sum of its counts and a hash of them in root (which it has no use
  // for), so that ranks whose arrays differ mismatch at once. alltoallv has
  // no count the same everywhere (its call's count is 0), so its frames
  // carry 0; the algorithm checks every block's size frame by frame. (So an
  // alltoallv of any size may run on a waiting caller's thread, as small
  // operations do: it uses no scratch memory, which is why large ones stay
  // on the worker; see OpQueueOptions::inline_max_bytes.)
  algos::OpSignature sig{0, call.coll, call.dtype, call.op, call.count, call.root};
  const abi::Traits traits = abi::TraitsOf(call.coll);
  const bool v_collective = traits.layout == abi::Layout::kPerRankCounts;
  if (traits.counts_alike) {
    const uint64_t* counts = traits.recv_per_rank ? call.recvcounts : call.sendcounts;
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over the counts
    sig.count = 0;
    for (uint32_t j = 0; j < queue.size(); ++j) {
      sig.count += counts[j];
      hash = (hash ^ counts[j]) * 1099511628211ull;
    }
    sig.root = uint32_t(hash ^ (hash >> 32)) & 0x7FFFFFFFu;
  }
  // A collective of count 0 may complete without the peers when every rank
  // knows that no rank sends or receives anything: count is the same on
  // every rank (for allreduce_coalesced the sum of the counts, which every
  // rank posts alike). Not the v-collectives: a rank that moves nothing
  // itself may still have to agree with the others that it moves nothing,
  // and one whose counts disagree must fail rather than skip.
  const bool empty = call.count == 0 && call.coll != PLEXUS_COLL_BARRIER && !v_collective;
  // On one host, allreduce (and its packed coalesced form), reduce_scatter
  // and allgather through shared memory when the backend attached it: every
  // rank decides alike.
  if (queue.one_host_shm() &&
      (OneHostShm::Runs(call.coll) || call.coll == PLEXUS_COLL_ALLREDUCE_COALESCED)) {
    allreduce = AllreduceAlgo::kOneHostShm;
  }
  return queue.Post(sig, empty ? OpBody() : AlgosBody(call, queue.size(), allreduce), req_out);
}

}  // namespace plexus::kit
