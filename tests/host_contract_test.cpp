// The host against plugins that each break one promise of the ABI
// (tests/plugins/faulty_backend.c): found by a vendor's first plugin, each
// one used to give a wrong result, a crash or a useless message. Every case
// fails without its fix in core/ (most in core/src/plugins/).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "plexus/plexus.hpp"
#include "plugins/backend_calls.hpp"
#include "plugins/plugin_loader.hpp"

namespace {

std::string Faulty(const std::string& variant) {
  return std::string(PLEXUS_TEST_PLUGIN_DIR) + "/libplexus-f-" + variant + ".so";
}

plexus::Communicator Open(const std::string& variant,
                          std::map<std::string, std::string> config = {}) {
  plexus::CommunicatorOptions o;
  o.backend = Faulty(variant);
  o.config = std::move(config);
  return plexus::Communicator::from_env(o);
}

// The status and message of what fn throws (0, "" when nothing).
template <typename Fn>
std::pair<int32_t, std::string> Thrown(Fn&& fn) {
  try {
    fn();
  } catch (const plexus::Error& e) {
    return {e.status(), e.what()};
  }
  return {0, ""};
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("wait(0) answered with PLEXUS_IN_PROGRESS never completes the request early") {
  auto comm = Open("wait0inprogress");
  float value = 0.0f;
  plexus::Work work =
      comm.allreduce(&value, &value, 1, plexus::DType::Float32, plexus::ReduceOp::Sum);
  auto [code, text] = Thrown([&] { work.wait(std::chrono::milliseconds(0)); });
  CHECK(code == PLEXUS_ERR_TIMEOUT);  // still pending: a timeout, not a failure
  CHECK(Has(text, "still pending"));
  CHECK(!work.test());  // and the request is still there
  work.wait();
  CHECK(value == 2.0f);  // the finished result, not the unfinished buffer
}

TEST_CASE("a table whose struct_size is absurd is refused") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = plexus::LoadBackendLibrary(Faulty("hugetable"), &lib);
  CHECK(st.code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(Has(st.message(), "table claims to be 4294967295 bytes"));
}

TEST_CASE("an entry function that returns OK without a table is a backend bug") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = plexus::LoadBackendLibrary(Faulty("notable"), &lib);
  CHECK(st.code() == PLEXUS_ERR_INTERNAL);
  CHECK(Has(st.message(), "returned PLEXUS_OK but no table (a backend bug)"));
}

TEST_CASE("init returning OK with a NULL context is a backend bug") {
  auto [code, text] = Thrown([] { Open("nullctx"); });
  CHECK(code == PLEXUS_ERR_INTERNAL);
  CHECK(Has(text, "init returned PLEXUS_OK but no context"));
}

TEST_CASE("a post returning OK with a NULL request is a backend bug, not success") {
  auto comm = Open("nullrequest");
  float value = 1.0f;
  auto [code, text] = Thrown(
      [&] { comm.allreduce(&value, &value, 1, plexus::DType::Float32, plexus::ReduceOp::Sum); });
  CHECK(code == PLEXUS_ERR_INTERNAL);
  CHECK(Has(text, "allreduce on faulty: the backend returned PLEXUS_OK but no request"));
}

TEST_CASE("a backend error without a message says so") {
  auto comm = Open("silenterror");
  float value = 1.0f;
  auto [code, text] = Thrown(
      [&] { comm.allreduce(&value, &value, 1, plexus::DType::Float32, plexus::ReduceOp::Sum); });
  CHECK(code == PLEXUS_ERR_SYSTEM);
  CHECK(Has(text, "allreduce on faulty: SYSTEM (the backend gave no message)"));
}

TEST_CASE("claiming a collective whose slot is NULL is a backend bug") {
  auto [code, text] = Thrown([] { Open("claimsnullslot"); });
  CHECK(code == PLEXUS_ERR_INTERNAL);
  CHECK(Has(text, "claims allreduce in its capabilities but its slot is NULL"));
}

TEST_CASE("control characters in a plugin's name and version are escaped") {
  auto comm = Open("controlname");
  CHECK(comm.backend_name() == "evil\\x1b[2J\\x0aname");
  CHECK(comm.backend_version() == "1.0\\x0d\\x07");
}

TEST_CASE("each communicator's configuration reaches the backend") {
  // Three communicators, three values: each comm_create must see its own.
  for (const char* value : {"first", "second", "third"}) {
    auto comm = Open("configecho", {{"PLEXUS_T_ECHO", value}});
    float x = 1.0f;
    auto [code, text] =
        Thrown([&] { comm.allreduce(&x, &x, 1, plexus::DType::Float32, plexus::ReduceOp::Sum); });
    CHECK(code == PLEXUS_ERR_INVALID_USAGE);
    CHECK_MESSAGE(Has(text, std::string("echo:") + value), text);
  }
}

TEST_CASE("a plugin that crashes in its entry function or init is named, not fatal") {
  plexus::Status st = plexus::ProbeInChild(Faulty("crashentry"), std::chrono::seconds(20));
  CHECK(st.code() == PLEXUS_ERR_INTERNAL);
  CHECK_MESSAGE(Has(st.message(), "crashed with SIGSEGV"), st.message());
  CHECK(Has(st.message(), "in its entry function"));
  CHECK(Has(st.message(), "libplexus-f-crashentry.so"));
  st = plexus::ProbeInChild(Faulty("crashinit"), std::chrono::seconds(20));
  CHECK_MESSAGE(Has(st.message(), "crashed with SIGSEGV"), st.message());
  CHECK(Has(st.message(), "in its init"));
  CHECK(plexus::ProbeInChild(Faulty("controlname"), std::chrono::seconds(20)).ok());
}

TEST_CASE("automatic selection skips a plugin that crashes and takes the next") {
  // A broken vendor build installed as libplexus-ucx.so, first on the path.
  const auto dir =
      std::filesystem::temp_directory_path() / ("plexus-crash-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(Faulty("crashinit"), dir / "libplexus-ucx.so");
  setenv("PLEXUS_PLUGIN_PATH", dir.c_str(), 1);
  unsetenv("PLEXUS_BACKEND");
  auto comm = plexus::Communicator::from_env();
  // The next candidate: another backend, or a real ucx plugin further down
  // the search path (the build tree's), never the crashing one.
  CHECK(comm.backend_name() != "faulty");
  CHECK_MESSAGE(comm.backend_path().find(dir.string()) == std::string::npos, comm.backend_path());
  unsetenv("PLEXUS_PLUGIN_PATH");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a plugin that hangs in init is given up on: probed with a deadline, then skipped") {
  plexus::Status st = plexus::ProbeInChild(Faulty("hanginit"), std::chrono::milliseconds(1000));
  CHECK(st.code() == PLEXUS_ERR_TIMEOUT);
  CHECK_MESSAGE(Has(st.message(), "hung in its init (no answer within 1000 ms"), st.message());
  // Automatic selection probes with the job's timeout (here 2 s) and moves on.
  const auto dir =
      std::filesystem::temp_directory_path() / ("plexus-hang-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(Faulty("hanginit"), dir / "libplexus-ucx.so");
  setenv("PLEXUS_PLUGIN_PATH", dir.c_str(), 1);
  unsetenv("PLEXUS_BACKEND");
  plexus::CommunicatorOptions o;
  o.timeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  auto comm = plexus::Communicator::from_env(o);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(comm.backend_name() != "faulty");
  CHECK_MESSAGE(comm.backend_path().find(dir.string()) == std::string::npos, comm.backend_path());
  CHECK(took < std::chrono::seconds(15));
  unsetenv("PLEXUS_PLUGIN_PATH");
  std::filesystem::remove_all(dir);
}
