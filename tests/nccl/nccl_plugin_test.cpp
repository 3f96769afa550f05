// The NCCL backend where this runs: always its loading, its table and
// capabilities, and the host's view of it; without a GPU (CI) its refusal to
// create a communicator, at once and saying "no CUDA device", and automatic
// selection passing over it. The collectives themselves need a GPU:
// tests/gpu/run.sh.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"
#include "plugins/backend_calls.hpp"
#include "plugins/plugin_loader.hpp"

namespace {

const std::string kPlugin = PLEXUS_NCCL_PLUGIN;

// A host for driving the table directly: logs kept, one-rank out-of-band.
struct TestHost {
  std::vector<std::string> lines;
  plexus_host_v1 table{};
  TestHost() {
    table.struct_size = sizeof table;
    table.abi_major = PLEXUS_ABI_MAJOR;
    table.abi_minor = PLEXUS_ABI_MINOR;
    table.ctx = this;
    table.log = [](void* ctx, int32_t, const char* m) {
      static_cast<TestHost*>(ctx)->lines.push_back(m);
    };
    table.oob_allgather = [](void*, plexus_oob*, const void* in, void* out, uint64_t n,
                             int64_t) -> int32_t {
      std::memcpy(out, in, n);  // one rank
      return PLEXUS_OK;
    };
    table.oob_broadcast = [](void*, plexus_oob*, void*, uint64_t, uint32_t, int64_t) -> int32_t {
      return PLEXUS_OK;
    };
    table.local_address = "";
  }
  std::string All() const {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

constexpr uint32_t kInt16Bits = (1u << PLEXUS_DTYPE_INT16) | (1u << PLEXUS_DTYPE_UINT16);

}  // namespace

TEST_CASE("the plugin loads through the real dlopen path and names the NCCL it runs with") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = plexus::LoadBackendLibrary(kPlugin, &lib);
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  const plexus_backend_v1& t = lib->table();
  CHECK(std::string(t.name) == "nccl");
  const std::string version = t.version;
  INFO("version: " << version);
  CHECK(version.find("NCCL 2.") != std::string::npos);
  CHECK(version.find("CUDA runtime ") != std::string::npos);
  CHECK(version.find("CUDA driver ") != std::string::npos);
  const bool slots = t.allreduce && t.alltoall && t.barrier && t.send && t.request_error;
  CHECK(slots);
  // ABI 1.2: the collectives built from NCCL's calls, and ncclCommSplit.
  CHECK(t.abi_minor >= 2);
  const bool slots_1_2 =
      t.gather && t.scatter && t.allgatherv && t.alltoallv && t.allreduce_coalesced;
  CHECK(slots_1_2);
  const bool split = t.comm_split != nullptr;  // (nccl.h >= 2.18 here)
  CHECK(split);
}

TEST_CASE(
    "capabilities: CUDA memory only, stream-ordered; comm_create without a GPU fails at once") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  REQUIRE(plexus::LoadBackendLibrary(kPlugin, &lib).ok());
  const plexus_backend_v1& t = lib->table();
  TestHost host;
  plexus_backend_ctx* ctx = nullptr;
  REQUIRE(t.init(&host.table, &ctx) == PLEXUS_OK);
  REQUIRE(ctx != nullptr);
  plexus_capabilities caps{};
  caps.struct_size = sizeof caps;
  REQUIRE(t.get_capabilities(ctx, &caps) == PLEXUS_OK);
  CHECK(caps.collectives == (1u << PLEXUS_COLL_COUNT_V1_2) - 1);  // every collective of 1.2
  CHECK((caps.memory_types & (1u << PLEXUS_MEMORY_HOST)) == 0);   // never host memory
  CHECK((caps.flags & PLEXUS_CAP_STREAM_ORDERED) != 0);
  CHECK((caps.flags & PLEXUS_CAP_IN_PLACE) != 0);
  CHECK((caps.flags & PLEXUS_CAP_ABORT) != 0);
  CHECK(caps.dtypes == 0x1ffeu);
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) {
    CHECK((caps.reduce_dtypes[op] & kInt16Bits) == 0);  // NCCL has no 16-bit integers
    CHECK((caps.reduce_dtypes[op] & (1u << PLEXUS_DTYPE_BFLOAT16)) != 0);
    CHECK((caps.reduce_dtypes[op] & (1u << PLEXUS_DTYPE_FLOAT16)) != 0);
  }
  INFO("log:\n" << host.All());

  plexus_comm_config_v1 config{};
  config.struct_size = sizeof config;
  config.rank = 0;
  config.size = 1;
  config.local_rank = 0;
  config.local_size = 1;
  config.device = -1;
  config.timeout_ms = 30000;
  config.name = "nccl-test/0";
  plexus_comm* comm = nullptr;
  char reason[1024] = "";
  const auto start = std::chrono::steady_clock::now();
  const int32_t rc = t.comm_create(ctx, &config, &comm, reason, sizeof reason);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  if (caps.memory_types == 0) {
    // No GPU in this process: the same answer from init's log and comm_create.
    CHECK(host.All().find("no CUDA device") != std::string::npos);
    CHECK(rc == PLEXUS_ERR_UNSUPPORTED);
    CHECK(comm == nullptr);
    CHECK_MESSAGE(std::string(reason).find("no CUDA device") != std::string::npos, reason);
    CHECK_MESSAGE(ms < 2000, "comm_create took " << ms << " ms");  // not the 30 s timeout
  } else {
    // A GPU: a one-rank communicator comes up (the collectives: tests/gpu).
    CHECK(caps.memory_types == (1u << PLEXUS_MEMORY_CUDA));
    REQUIRE_MESSAGE(rc == PLEXUS_OK, reason);
    plexus_request* req = nullptr;
    // Host memory is refused with UNSUPPORTED, saying so.
    int host_buf = 0;
    plexus_placement host_place{sizeof(plexus_placement), PLEXUS_MEMORY_HOST, -1, 0, nullptr};
    CHECK(t.allreduce(comm, &host_buf, &host_buf, 1, PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, &host_place,
                      &req) == PLEXUS_ERR_UNSUPPORTED);
    char err[512];
    t.comm_last_error(comm, err, sizeof err);
    CHECK(std::string(err).find("host memory") != std::string::npos);
    plexus_placement lie{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, -1, 0, nullptr};
    CHECK(t.allreduce(comm, &host_buf, &host_buf, 1, PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, &lie,
                      &req) == PLEXUS_ERR_UNSUPPORTED);
    t.comm_last_error(comm, err, sizeof err);
    CHECK(std::string(err).find("is host memory") != std::string::npos);
    REQUIRE(t.barrier(comm, &req) == PLEXUS_OK);
    CHECK(t.wait(req, -1) == PLEXUS_OK);
    CHECK(t.request_free(req) == PLEXUS_OK);
    // comm_split of the one rank: a child of its own (the host's one-rank
    // out-of-band channel suffices), and none without a color.
    plexus_comm_config_v1 child_config = config;
    child_config.name = "nccl-test/0/split";
    plexus_comm* child = nullptr;
    REQUIRE_MESSAGE(
        t.comm_split(comm, 7, 0, &child_config, &child, reason, sizeof reason) == PLEXUS_OK,
        reason);
    REQUIRE(child != nullptr);
    REQUIRE(t.barrier(child, &req) == PLEXUS_OK);
    CHECK(t.wait(req, -1) == PLEXUS_OK);
    CHECK(t.request_free(req) == PLEXUS_OK);
    t.comm_destroy(child);
    child = reinterpret_cast<plexus_comm*>(&child_config);  // must be overwritten
    CHECK(t.comm_split(comm, PLEXUS_SPLIT_NO_COLOR, 0, nullptr, &child, reason, sizeof reason) ==
          PLEXUS_OK);
    CHECK(child == nullptr);
    REQUIRE(t.barrier(comm, &req) == PLEXUS_OK);  // the parent goes on
    CHECK(t.wait(req, -1) == PLEXUS_OK);
    CHECK(t.request_free(req) == PLEXUS_OK);
    t.comm_destroy(comm);
  }
  t.finalize(ctx);
}

TEST_CASE(
    "the host: unusable here without a GPU, with the reason; automatic selection passes over it") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  REQUIRE(plexus::LoadBackendLibrary(kPlugin, &lib).ok());
  auto host =
      std::make_unique<plexus::HostServices>("nccl", "", std::map<std::string, std::string>{});
  std::shared_ptr<plexus::Backend> b;
  plexus::Status st = plexus::Backend::Open(std::move(lib), std::move(host), &b);
  if (st.ok()) {
    MESSAGE("a CUDA device is visible: the no-GPU checks do not apply");
    CHECK(b->capabilities().memory_types == (1u << PLEXUS_MEMORY_CUDA));
    return;
  }
  CHECK(st.code() == PLEXUS_ERR_UNSUPPORTED);
  CHECK_MESSAGE(st.message().find("no CUDA device") != std::string::npos, st.message());
  CHECK(st.message().find("unusable in this process") != std::string::npos);

  // PLEXUS_BACKEND=nccl: a hard error at once, naming the reason.
  setenv("PLEXUS_BACKEND", "nccl", 1);
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    plexus::Communicator::from_env();
  } catch (const plexus::Error& e) {
    message = e.what();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  CHECK_MESSAGE(message.find("no CUDA device") != std::string::npos, message);
  CHECK(ms < 5000);

  // PLEXUS_BACKEND unset: another backend is chosen.
  unsetenv("PLEXUS_BACKEND");
  plexus::Communicator comm = plexus::Communicator::from_env();
  CHECK(comm.backend_name() != "nccl");
  MESSAGE("automatic selection chose '" << comm.backend_name() << "'");
}
