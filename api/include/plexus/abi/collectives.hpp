// The list of collectives (collectives.def) as C++: each collective's
// traits, name and table slot, and the two directions between a slot's C
// arguments and a Call, written once for every collective:
//
//   Invoke(table, comm, call, req_out)   a Call into the plugin's slot (the host)
//   Entry<Poster, code>()                a slot's C function that makes a Call
//                                        and hands it to Poster::Post (the kit)
//
// Header-only; no allocation, no exception.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "plexus/abi/call.hpp"
#include "plexus/backend.h"

namespace plexus::abi {

// How a collective's buffers may share memory (the ABI's in-place forms).
enum class InPlace {
  kNone,       // one buffer, or none
  kEqual,      // sendbuf == recvbuf (allreduce; reduce on the root; allreduce_coalesced per buffer)
  kRecvBlock,  // sendbuf == recvbuf + rank * count (allgather; gather on the root)
  kSendBlock,  // recvbuf == sendbuf + rank * count (reduce_scatter; scatter on the root)
  kDisjoint,   // no overlap at all (alltoall)
};

// What Call::root means.
enum class Root { kNone, kRoot, kPeer };

// How the buffers are described.
enum class Layout {
  kCount,          // count elements (per rank where *_per_rank)
  kPerRankCounts,  // count and displacement arrays, one entry per rank (the v-collectives)
  kBufferList,     // nbuffers buffers and counts (allreduce_coalesced; count is their sum)
};

// The ABI's rules for one collective's arguments, and how the host treats it.
struct Traits {
  bool reduces = false;  // takes an op (checked, and checked against reduce_dtypes)
  Root root = Root::kNone;
  bool needs_send = false;         // sendbuf may not be NULL when count > 0
  bool needs_recv = false;         // recvbuf may not be NULL when count > 0
  bool send_on_root_only = false;  // ... on the root only (scatter)
  bool recv_on_root_only = false;  // ... on the root only (reduce, gather)
  bool send_per_rank = false;      // sendbuf holds size blocks of count (kPerRankCounts:
                                   // of sendcounts at sdispls)
  bool recv_per_rank = false;      // recvbuf holds size blocks of count (kPerRankCounts:
                                   // of recvcounts at rdispls)
  InPlace in_place = InPlace::kNone;
  Layout layout = Layout::kCount;
  bool counts_alike = false;  // kPerRankCounts: the arrays are the same on every rank
                              // (allgatherv, reduce_scatterv); count is this rank's block
  bool typed = true;       // takes a dtype (not barrier)
  bool sequenced = true;   // part of the communicator's sequence of collectives:
                           // numbered, compared across ranks (PLEXUS_DEBUG=detail),
                           // recorded (not send, recv)
  bool two_level = false;  // the host may run it in two levels across hosts
};

// The traits of coll; a default Traits for a code that is no collective.
constexpr Traits TraitsOf(plexus_collective_t coll) {
  switch (coll) {
#define PLEXUS_ABI_COLLECTIVE(slot, code, minor, traits, ...) \
  case code:                                                  \
    return traits;
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
  }
  return Traits{};
}

// "allreduce", ...; "unknown" for a code that is no collective.
constexpr const char* CollectiveName(plexus_collective_t coll) {
  switch (coll) {
#define PLEXUS_ABI_COLLECTIVE(slot, code, ...) \
  case code:                                   \
    return #slot;
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
  }
  return "unknown";
}

// The ABI minor that added coll (0 for an unknown code).
constexpr uint32_t MinorOf(plexus_collective_t coll) {
  switch (coll) {
#define PLEXUS_ABI_COLLECTIVE(slot, code, minor, ...) \
  case code:                                          \
    return minor;
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
  }
  return 0;
}

// One collective of the list, as ForEachCollective hands it out.
template <auto Slot, plexus_collective_t Code, uint32_t Minor, size_t SlotEnd, auto... Args>
struct Collective {
  static constexpr plexus_collective_t kCode = Code;
  static constexpr uint32_t kMinor = Minor;
  // Where the slot ends in plexus_backend_v1: a table whose struct_size is
  // smaller lacks it.
  static constexpr size_t kSlotEnd = SlotEnd;

  static auto SlotOf(const plexus_backend_v1& t) { return t.*Slot; }

  // Whether the slot takes member m of Call.
  template <class M>
  static constexpr bool Takes([[maybe_unused]] M Call::*m) {
    return (IsMember<Args>(m) || ...);
  }

  // The plugin's slot, called with call's members (the host).
  [[gnu::always_inline]] static int32_t Invoke(const plexus_backend_v1& t, plexus_comm* comm,
                                               const Call& call, plexus_request** req_out) {
    return (t.*Slot)(comm, call.*Args..., req_out);
  }

  // Sets t's slot to Entry<Poster>().
  template <class Poster>
  static void Install(plexus_backend_v1& t) {
    t.*Slot = Entry<Poster>();
  }

  // A C function of the slot's type that makes a Call of its arguments and
  // returns Poster::Post(comm, call, req_out) (the kit's glue).
  template <class Poster>
  static constexpr auto Entry() {
    using SlotType = std::remove_reference_t<decltype(std::declval<plexus_backend_v1&>().*Slot)>;
    return EntryOf<Poster>(static_cast<SlotType>(nullptr));
  }

 private:
  template <auto A, class M>
  static constexpr bool IsMember([[maybe_unused]] M Call::*m) {
    if constexpr (std::is_same_v<decltype(A), M Call::*>) {
      return A == m;
    } else {
      return false;
    }
  }
  template <class Poster, class... A>
  static constexpr auto EntryOf(int32_t (*)(plexus_comm*, A...)) {
    return +[](plexus_comm* comm, A... a) -> int32_t {
      Call call;
      call.coll = Code;
      auto args = std::forward_as_tuple(a...);
      Assign(call, args, std::make_index_sequence<sizeof...(Args)>{});
      if constexpr (TraitsOf(Code).layout == Layout::kBufferList) {
        // count is the sum (CheckCall checks it against the counts), the
        // fused size that stall reports and signatures show.
        if (call.counts != nullptr) {
          for (uint32_t i = 0; i < call.nbuffers; ++i) call.count += call.counts[i];
        }
      }
      return Poster::Post(comm, call, std::get<sizeof...(A) - 1>(args));
    };
  }
  template <class Tuple, size_t... I>
  static void Assign([[maybe_unused]] Call& call, [[maybe_unused]] const Tuple& args,
                     std::index_sequence<I...>) {
    [[maybe_unused]] static constexpr auto kMembers = std::make_tuple(Args...);
    ((call.*std::get<I>(kMembers) = std::get<I>(args)), ...);
  }
};

// The Collective type of a line of collectives.def.
#define PLEXUS_ABI_COLLECTIVE_TYPE(slot, code, minor, ...) \
  Collective<&plexus_backend_v1::slot, code, minor,        \
             offsetof(plexus_backend_v1, slot) + sizeof(void*) __VA_OPT__(, ) __VA_ARGS__>

// Calls f(Collective<...>{}) for every collective of the list, in its order.
template <class F>
constexpr void ForEachCollective(F&& f) {
#define PLEXUS_ABI_COLLECTIVE(slot, code, minor, traits, ...) \
  f(PLEXUS_ABI_COLLECTIVE_TYPE(slot, code, minor __VA_OPT__(, ) __VA_ARGS__){});
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
}

// Whether coll's slot takes member m of Call (sendbuf, recvcounts, ...):
// which buffers and arrays a call of coll has.
template <class M>
constexpr bool TakesArgument(plexus_collective_t coll, M Call::*m) {
  bool takes = false;
  ForEachCollective([&](auto c) {
    if (decltype(c)::kCode == coll) takes = decltype(c)::Takes(m);
  });
  return takes;
}

// The number of collectives in the list (the codes are 0 .. kCollectiveCount - 1).
inline constexpr plexus_collective_t kCollectiveCount = [] {
  plexus_collective_t n = 0;
#define PLEXUS_ABI_COLLECTIVE(slot, code, ...) ++n;
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
  return n;
}();

// Whether coll is a collective of the list in the communicator's sequence
// (not send or recv, nor a code past the list's, as transports use for
// their own exchanges).
constexpr bool IsSequenced(plexus_collective_t coll) {
  return coll < kCollectiveCount && TraitsOf(coll).sequenced;
}

// Bit (1u << code) of every collective in the list: a backend whose every
// post goes through the kit's PostAlgos has them all.
inline constexpr uint32_t kAllCollectives = (1u << kCollectiveCount) - 1;

// The slot of coll in t as a plain pointer (NULL when unset or unknown).
// The caller checks that t is long enough (SlotEnd) for a newer slot.
inline const void* SlotOf(const plexus_backend_v1& t, plexus_collective_t coll) {
  switch (coll) {
#define PLEXUS_ABI_COLLECTIVE(slot, code, ...) \
  case code:                                   \
    return reinterpret_cast<const void*>(t.slot);
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
  }
  return nullptr;
}

// Where coll's slot ends in plexus_backend_v1 (0 for an unknown code).
constexpr size_t SlotEnd(plexus_collective_t coll) {
  switch (coll) {
#define PLEXUS_ABI_COLLECTIVE(slot, code, ...) \
  case code:                                   \
    return offsetof(plexus_backend_v1, slot) + sizeof(void*);
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
  }
  return 0;
}

// Posts call through the plugin's slot for call.coll: the slot's status,
// or INVALID_ARGUMENT for a code that is no collective. The caller has
// checked that the slot is set. (A switch: every post goes through here.)
inline int32_t Invoke(const plexus_backend_v1& t, plexus_comm* comm, const Call& call,
                      plexus_request** req_out) {
  switch (call.coll) {
#define PLEXUS_ABI_COLLECTIVE(slot, code, minor, traits, ...)                                \
  case code:                                                                                 \
    return PLEXUS_ABI_COLLECTIVE_TYPE(slot, code, minor __VA_OPT__(, ) __VA_ARGS__)::Invoke( \
        t, comm, call, req_out);
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE
  }
  return PLEXUS_ERR_INVALID_ARGUMENT;
}

}  // namespace plexus::abi
