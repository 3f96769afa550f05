// kit::OpQueue with a transport double (our own seam): posting order, the
// inline path, zero-count operations, a broken and an aborted communicator,
// and the completion protocol under a flood of requests completed on the
// worker and freed at once by the waiter (the use-after-free that the
// ThreadSanitizer run of scripts/tsan.sh reported in tcp, and that hung a
// zero-count reduce in CI: the worker was left inside the freed request's
// pthread_cond_broadcast).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "plexus/kit/op_queue.hpp"

namespace {

using plexus::algos::OpSignature;
using plexus::algos::Status;
using plexus::kit::OpBody;
using plexus::kit::OpQueue;
using plexus::kit::QueuedRequests;

// One rank with no peers: collectives run their bodies; messages complete
// at once. Counts what the queue asks of it.
class SoloTransport : public plexus::kit::QueueTransport {
 public:
  uint32_t rank() const override { return 0; }
  uint32_t size() const override { return 2; }
  Status Exchange(const OpSignature&, std::span<const plexus::algos::SendSpec>,
                  std::span<const plexus::algos::RecvSpec>) override {
    return {};
  }
  Status PostMessage(plexus::kit::Message* m) override {
    m->complete = true;
    return {};
  }
  Status Drive(const std::function<bool()>& done) override {
    return done() ? Status{} : Status{PLEXUS_ERR_INTERNAL, "nothing to drive"};
  }
  void Cancel() override { ++cancels; }
  void Fail(const OpSignature&, const Status&) override { ++fails; }
  void Wake() override {}
  void Abort() override { aborted = true; }
  std::atomic<int> cancels{0}, fails{0};
  std::atomic<bool> aborted{false};
};

plexus_host_v1 Host() {
  plexus_host_v1 h{};
  h.struct_size = sizeof h;
  return h;
}

plexus::kit::OpQueueOptions Options(int64_t timeout_ms = 60000) {
  plexus::kit::OpQueueOptions o;
  o.backend = "test";
  o.rank = 0;
  o.size = 2;
  o.timeout_ms = timeout_ms;
  o.name = "test/0";
  return o;
}

OpSignature Sig(uint64_t count = 1) {
  return {0, PLEXUS_COLL_ALLREDUCE, PLEXUS_DTYPE_FLOAT32, PLEXUS_OP_SUM, count, 0};
}

// Waits for req and frees it; its status.
int32_t Finish(plexus_request* req, int64_t timeout_ms = -1) {
  const int32_t rc = QueuedRequests::Wait(*req, timeout_ms);
  REQUIRE(QueuedRequests::Free(req) == PLEXUS_OK);
  return rc;
}

}  // namespace

TEST_CASE("operations run in posting order, numbered from 0, each completed once") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  std::mutex m;
  std::vector<uint64_t> seen;
  std::vector<plexus_request*> reqs(50);
  for (auto& r : reqs) {
    REQUIRE(q.Post(
                Sig(),
                [&](const plexus::kit::OpProviders&, const OpSignature& s) {
                  std::lock_guard<std::mutex> lock(m);
                  seen.push_back(s.seq);
                  return Status{};
                },
                &r) == PLEXUS_OK);
  }
  for (auto* r : reqs) CHECK(Finish(r) == PLEXUS_OK);
  REQUIRE(seen.size() == reqs.size());
  for (uint64_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == i);
}

TEST_CASE("a full wait runs the next operation on the waiting thread, a short one leaves it") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  std::thread::id ran_on;
  auto body = [&](const plexus::kit::OpProviders&, const OpSignature&) {
    ran_on = std::this_thread::get_id();
    return Status{};
  };
  plexus_request* r = nullptr;
  // The worker may take it first; retry until the race goes the inline way.
  bool inline_seen = false;
  for (int i = 0; i < 200 && !inline_seen; ++i) {
    REQUIRE(q.Post(Sig(), body, &r) == PLEXUS_OK);
    CHECK(Finish(r) == PLEXUS_OK);
    inline_seen = ran_on == std::this_thread::get_id();
  }
  CHECK(inline_seen);
  REQUIRE(q.Post(Sig(), body, &r) == PLEXUS_OK);
  CHECK(Finish(r, 10000) == PLEXUS_OK);  // shorter than the operation's deadline
  CHECK(ran_on != std::this_thread::get_id());
}

TEST_CASE("an empty body completes in its place without running") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  plexus_request* r = nullptr;
  REQUIRE(q.Post(Sig(0), OpBody(), &r) == PLEXUS_OK);
  CHECK(Finish(r) == PLEXUS_OK);
  // It took a number: the next collective is #1.
  uint64_t seq = 99;
  REQUIRE(q.Post(
              Sig(),
              [&](const plexus::kit::OpProviders&, const OpSignature& s) {
                seq = s.seq;
                return Status{};
              },
              &r) == PLEXUS_OK);
  CHECK(Finish(r) == PLEXUS_OK);
  CHECK(seq == 1);
}

TEST_CASE("the first failure breaks the communicator; later posts fail with it") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  plexus_request* r = nullptr;
  REQUIRE(q.Post(
              Sig(),
              [](const plexus::kit::OpProviders&, const OpSignature&) {
                return Status{PLEXUS_ERR_REMOTE, "rank 1 went away"};
              },
              &r) == PLEXUS_OK);
  CHECK(QueuedRequests::Wait(*r, -1) == PLEXUS_ERR_REMOTE);
  char text[256];
  QueuedRequests::Error(*r, text, sizeof text);
  CHECK(std::string(text) == "rank 1 went away");
  REQUIRE(QueuedRequests::Free(r) == PLEXUS_OK);
  CHECK(t.fails == 1);    // the peers were told
  CHECK(t.cancels == 1);  // and nothing of it is left in flight
  bool ran = false;
  REQUIRE(q.Post(
              Sig(),
              [&](const plexus::kit::OpProviders&, const OpSignature&) {
                ran = true;
                return Status{};
              },
              &r) == PLEXUS_OK);
  CHECK(QueuedRequests::Wait(*r, -1) == PLEXUS_ERR_REMOTE);
  QueuedRequests::Error(*r, text, sizeof text);
  CHECK(std::string(text).find("broken by an earlier failure: rank 1 went away") !=
        std::string::npos);
  REQUIRE(QueuedRequests::Free(r) == PLEXUS_OK);
  CHECK(!ran);
}

TEST_CASE("abort completes what is pending with ABORTED and refuses later posts") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  std::atomic<bool> release{false};
  plexus_request* slow = nullptr;
  plexus_request* queued = nullptr;
  REQUIRE(q.Post(
              Sig(),
              [&](const plexus::kit::OpProviders&, const OpSignature&) {
                while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                return Status{PLEXUS_ERR_ABORTED, "interrupted"};
              },
              &slow) == PLEXUS_OK);
  REQUIRE(q.Post(
              Sig(), [](const plexus::kit::OpProviders&, const OpSignature&) { return Status{}; },
              &queued) == PLEXUS_OK);
  CHECK(QueuedRequests::Test(*queued) == PLEXUS_IN_PROGRESS);
  CHECK(QueuedRequests::Free(queued) == PLEXUS_ERR_INVALID_USAGE);  // pending: not freed
  q.Abort();
  CHECK(t.aborted);
  release = true;
  CHECK(Finish(slow, 10000) == PLEXUS_ERR_ABORTED);
  CHECK(Finish(queued, 10000) == PLEXUS_ERR_ABORTED);
  CHECK(t.fails == 0);  // abort is local
  plexus_request* r = nullptr;
  CHECK(q.Post(Sig(), OpBody(), &r) == PLEXUS_ERR_ABORTED);
  CHECK(r == nullptr);
  char text[256];
  q.errors().Copy(text, sizeof text);
  CHECK(std::string(text).find("was aborted; posts after abort fail") != std::string::npos);
}

TEST_CASE("messages complete in posting order and count per peer and direction") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  int data[4] = {};
  std::vector<plexus_request*> reqs(6);
  for (size_t i = 0; i < reqs.size(); ++i) {
    REQUIRE(q.PostMessage(i % 2 == 0, 1, data, 4, PLEXUS_DTYPE_INT32, &reqs[i]) == PLEXUS_OK);
  }
  for (auto* r : reqs) CHECK(Finish(r) == PLEXUS_OK);
}

// The completion protocol: the worker completes, the waiter (woken, or
// seeing the status at once) frees the request and posts the next, which
// the allocator tends to put at the same address. With the notify after the
// unlock this is the race ThreadSanitizer reports (scripts/tsan.sh), and on
// glibc it could leave the worker inside pthread_cond_broadcast for good.
TEST_CASE("requests completed on the worker and freed at once by the waiter") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  auto nothing = [](const plexus::kit::OpProviders&, const OpSignature&) { return Status{}; };
  for (int i = 0; i < 20000; ++i) {
    plexus_request* r = nullptr;
    REQUIRE(q.Post(Sig(), nothing, &r) == PLEXUS_OK);
    // Shorter than the operation's deadline: never inline, always the worker.
    REQUIRE(QueuedRequests::Wait(*r, 30000) == PLEXUS_OK);
    REQUIRE(QueuedRequests::Free(r) == PLEXUS_OK);
  }
}

// --- request_notify (ABI 1.5) ----------------------------------------------

namespace {

// What a notify function saw: how often it ran, with which status, where.
struct Seen {
  std::atomic<int> calls{0};
  std::atomic<int32_t> status{PLEXUS_IN_PROGRESS};
  std::thread::id thread;
};

void Record(void* arg, int32_t status) {
  auto* s = static_cast<Seen*>(arg);
  s->thread = std::this_thread::get_id();
  s->status = status;
  ++s->calls;
}

bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 10000 && !cond(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return cond();
}

}  // namespace

TEST_CASE("request_notify: called once, with the status, on the completing thread") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  std::atomic<bool> release{false};
  plexus_request* r = nullptr;
  REQUIRE(q.Post(
              Sig(),
              [&](const plexus::kit::OpProviders&, const OpSignature&) {
                while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                return Status{PLEXUS_ERR_REMOTE, "rank 1 said no"};
              },
              &r) == PLEXUS_OK);
  Seen seen;
  REQUIRE(QueuedRequests::Notify(*r, Record, &seen) == PLEXUS_OK);
  CHECK(QueuedRequests::Notify(*r, Record, &seen) == PLEXUS_ERR_INVALID_USAGE);  // once
  CHECK(seen.calls == 0);
  release = true;
  REQUIRE(Eventually([&] { return seen.calls == 1; }));
  CHECK(seen.status == PLEXUS_ERR_REMOTE);
  CHECK(seen.thread != std::this_thread::get_id());  // the worker's
  CHECK(QueuedRequests::Test(*r) == PLEXUS_ERR_REMOTE);
  CHECK(Finish(r) == PLEXUS_ERR_REMOTE);
  CHECK(seen.calls == 1);
}

TEST_CASE("request_notify on a completed request runs at once, here") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options());
  plexus_request* r = nullptr;
  REQUIRE(q.Post(Sig(), OpBody(), &r) == PLEXUS_OK);
  REQUIRE(QueuedRequests::Wait(*r, -1) == PLEXUS_OK);
  Seen seen;
  CHECK(QueuedRequests::Notify(*r, nullptr, &seen) == PLEXUS_ERR_INVALID_ARGUMENT);
  REQUIRE(QueuedRequests::Notify(*r, Record, &seen) == PLEXUS_OK);
  CHECK(seen.calls == 1);
  CHECK(seen.status == PLEXUS_OK);
  CHECK(seen.thread == std::this_thread::get_id());
  CHECK(QueuedRequests::Free(r) == PLEXUS_OK);
}

// A user's callback on the worker that posts and waits (a DDP comm hook's
// next allreduce): with nobody else to run the queue, the worker runs it
// inside the wait, large operations and operations queued before too.
// Without that it waits for itself until the operation's deadline.
struct Chain {
  OpQueue* q = nullptr;
  plexus_request* earlier = nullptr;  // posted by another thread, queued first
  std::atomic<int32_t> waited{PLEXUS_IN_PROGRESS};
  std::atomic<bool> done{false};
};

void PostAndWait(void* arg, int32_t) {
  auto* c = static_cast<Chain*>(arg);
  plexus_request* r = nullptr;
  const uint64_t large = uint64_t(1) << 24;  // past inline_max_bytes
  if (c->q->Post(
          Sig(large), [](const plexus::kit::OpProviders&, const OpSignature&) { return Status{}; },
          &r) == PLEXUS_OK) {
    c->waited = QueuedRequests::Wait(*r, -1);
    QueuedRequests::Free(r);
  }
  c->done = true;
}

TEST_CASE("request_notify: the worker may post and wait inside it") {
  const plexus_host_v1 host = Host();
  SoloTransport t;
  OpQueue q(host, t, Options(20000));
  std::atomic<bool> release{false};
  plexus_request* first = nullptr;
  REQUIRE(q.Post(
              Sig(uint64_t(1) << 24),
              [&](const plexus::kit::OpProviders&, const OpSignature&) {
                while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                return Status{};
              },
              &first) == PLEXUS_OK);
  Chain chain;
  chain.q = &q;
  REQUIRE(QueuedRequests::Notify(*first, PostAndWait, &chain) == PLEXUS_OK);
  // Queued behind the first, before the callback's own post.
  REQUIRE(q.Post(
              Sig(uint64_t(1) << 24),
              [](const plexus::kit::OpProviders&, const OpSignature&) { return Status{}; },
              &chain.earlier) == PLEXUS_OK);
  const auto start = std::chrono::steady_clock::now();
  release = true;
  REQUIRE(Eventually([&] { return chain.done.load(); }));
  CHECK(chain.waited == PLEXUS_OK);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(Finish(first) == PLEXUS_OK);
  CHECK(Finish(chain.earlier) == PLEXUS_OK);
}
