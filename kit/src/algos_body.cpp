#include "plexus/kit/algos_body.hpp"

#include "plexus/algos/collectives.hpp"

namespace plexus::kit {

OpBody AlgosBody(const Call& call, AllreduceAlgo allreduce) {
  const void* send = call.sendbuf;
  void* recv = call.recvbuf;
  using T = algos::PeerTransport;
  using S = algos::OpSignature;
  switch (call.coll) {
    case PLEXUS_COLL_ALLREDUCE:
      switch (allreduce) {
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
    case PLEXUS_COLL_BROADCAST:
      return [recv](T& t, const S& s) { return algos::BinomialBroadcast(t, s, recv); };
    case PLEXUS_COLL_REDUCE:
      return [send, recv](T& t, const S& s) { return algos::BinomialReduce(t, s, send, recv); };
    case PLEXUS_COLL_ALLGATHER:
      return [send, recv](T& t, const S& s) { return algos::RingAllgather(t, s, send, recv); };
    case PLEXUS_COLL_REDUCE_SCATTER:
      return [send, recv](T& t, const S& s) { return algos::RingReduceScatter(t, s, send, recv); };
    case PLEXUS_COLL_ALLTOALL:
      return [send, recv](T& t, const S& s) { return algos::PairwiseAlltoall(t, s, send, recv); };
    default:  // barrier
      return [](T& t, const S& s) { return algos::DisseminationBarrier(t, s); };
  }
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
  const algos::OpSignature sig{0, call.coll, call.dtype, call.op, call.count, call.root};
  const bool empty = call.count == 0 && call.coll != PLEXUS_COLL_BARRIER;
  return queue.Post(sig, empty ? OpBody() : AlgosBody(call, allreduce), req_out);
}

}  // namespace plexus::kit
