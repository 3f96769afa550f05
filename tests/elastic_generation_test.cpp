// What the ranks read of plexus-run --elastic's generations: a store that
// fails is reported, not taken for "nothing said yet" (shrink() waited out
// its timeout and then blamed the launcher for saying nothing).
#include <doctest/doctest.h>

#include <string>

#include "elastic_generation.hpp"
#include "plexus/rendezvous_store.hpp"

namespace {

using plexus::Bytes;
using plexus::Status;
using plexus::detail::Generation;

// An in-process store whose next `failures` reads fail as a lost
// connection would.
class FlakyStore : public plexus::RendezvousStore {
 public:
  int failures = 0;
  Status Set(const std::string& k, const Bytes& v, std::chrono::milliseconds t) override {
    return inner_->Set(k, v, t);
  }
  Status Get(const std::string& k, Bytes* v, std::chrono::milliseconds t) override {
    if (failures > 0) {
      --failures;
      return Status::Remote("lost the connection to the server and could not reconnect");
    }
    return inner_->Get(k, v, t);
  }
  Status Add(const std::string& k, int64_t d, int64_t* n, std::chrono::milliseconds t) override {
    return inner_->Add(k, d, n, t);
  }
  Status Wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
    return inner_->Wait(k, t);
  }
  void Say(const std::string& generation) {
    REQUIRE(Set(plexus::detail::LatestGenerationKey(), Bytes(generation.begin(), generation.end()),
                std::chrono::seconds(1))
                .ok());
  }

 private:
  std::unique_ptr<plexus::RendezvousStore> inner_ = plexus::MakeInProcessStore();
};

}  // namespace

TEST_CASE("the latest generation: none yet, said, or a store that fails") {
  FlakyStore store;
  Generation g{7, {1}};
  CHECK(plexus::detail::ReadLatestGeneration(store, &g).ok());
  CHECK(g.number == 0);
  store.Say("3 0 1");
  CHECK(plexus::detail::ReadLatestGeneration(store, &g).ok());
  CHECK(g.number == 3);
  CHECK(g.ranks == std::vector<uint32_t>{0, 1});
  store.failures = 1;
  const Status st = plexus::detail::ReadLatestGeneration(store, &g);
  CHECK(st.code() == PLEXUS_ERR_REMOTE);
  CHECK(st.message().find("latest generation") != std::string::npos);
  CHECK(st.message().find("lost the connection") != std::string::npos);
  CHECK(g.number == 3);  // left alone
}

TEST_CASE("waiting for a rank to leave: the store's failure is named when nothing came") {
  FlakyStore store;
  store.failures = 1000;
  uint64_t after = 1;
  Generation said;
  const Status st =
      plexus::detail::WaitForLeaving(store, {0, 1, 2}, &after, std::chrono::milliseconds(100), &said);
  CHECK(st.code() == PLEXUS_ERR_TIMEOUT);
  CHECK(st.message().find("plexus-run said within 100 ms of no rank that left") !=
        std::string::npos);
  CHECK(st.message().find("the store's last answer") != std::string::npos);
  CHECK(st.message().find("lost the connection") != std::string::npos);
}

TEST_CASE("waiting for a rank to leave: reads that fail for a while, then the launcher's word") {
  FlakyStore store;
  store.Say("2 0 1 2 3");  // only lets rank 3 in: not a leaving
  store.failures = 3;
  uint64_t after = 1;
  Generation said;
  Status st =
      plexus::detail::WaitForLeaving(store, {0, 1, 2}, &after, std::chrono::milliseconds(300), &said);
  CHECK(st.code() == PLEXUS_ERR_TIMEOUT);
  CHECK(after == 2);
  CHECK(st.message().find("the store's last answer") != std::string::npos);
  store.Say("3 0 1 3");
  store.failures = 2;
  st = plexus::detail::WaitForLeaving(store, {0, 1, 2}, &after, std::chrono::seconds(5), &said);
  REQUIRE(st.ok());
  CHECK(said.number == 3);
  CHECK(!said.Has(2));
}
