// The plugin loader against deliberately broken plugins (tests/plugins) and
// the real TCP plugin, all through the real dlopen path.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "plexus/abi/collectives.hpp"
#include "plexus/plexus.hpp"
#include "plugins/backend_calls.hpp"
#include "plugins/plugin_loader.hpp"

namespace {

std::string TestPlugin(const std::string& variant) {
  return std::string(PLEXUS_TEST_PLUGIN_DIR) + "/libplexus-t-" + variant + ".so";
}

plexus::Status Load(const std::string& path, std::unique_ptr<plexus::LoadedLibrary>* lib) {
  return plexus::LoadBackendLibrary(path, lib);
}

}  // namespace

TEST_CASE("a valid C plugin loads, initialises and reports its capabilities") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(TestPlugin("good"), &lib);
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  CHECK(std::string(lib->table().name) == "test");
  auto host =
      std::make_unique<plexus::HostServices>("test", "", std::map<std::string, std::string>{});
  std::shared_ptr<plexus::Backend> b;
  st = plexus::Backend::Open(std::move(lib), std::move(host), &b);
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  CHECK(b->CheckSupported(PLEXUS_COLL_BARRIER, 0, 0, nullptr).ok());
  plexus::Status no =
      b->CheckSupported(PLEXUS_COLL_ALLREDUCE, PLEXUS_DTYPE_FLOAT32, PLEXUS_OP_SUM, nullptr);
  CHECK(no.code() == PLEXUS_ERR_UNSUPPORTED);
  CHECK(no.message().find("backend 'test' does not support allreduce on float32 with sum in "
                          "host memory") != std::string::npos);
  // Backend::Post takes any Call: a code that is no collective of the list
  // (past the capability word's 32 bits too) is an invalid argument, never a
  // shift past the word or a call through a slot that does not exist.
  for (plexus_collective_t code : {plexus::abi::kCollectiveCount, 31u, 40u}) {
    CAPTURE(code);
    plexus::Status bad = b->CheckSupported(code, PLEXUS_DTYPE_FLOAT32, 0, nullptr);
    CHECK(bad.code() == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(bad.message() == "unknown collective code " + std::to_string(code));
    plexus_request* req = nullptr;
    plexus::abi::Call call{};
    call.coll = code;
    CHECK(b->Post(nullptr, call, &req).code() == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(req == nullptr);
  }
}

TEST_CASE("a plugin of a newer ABI major is refused, naming both majors") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(TestPlugin("newmajor"), &lib);
  CHECK(st.code() == PLEXUS_ERR_UNSUPPORTED);
  CHECK(st.message().find("ABI major 2") != std::string::npos);
  CHECK(st.message().find("speaks major 1") != std::string::npos);
  CHECK(lib == nullptr);
}

TEST_CASE("a v1 table that claims another major is refused") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(TestPlugin("wrongmajor"), &lib);
  CHECK(st.code() == PLEXUS_ERR_UNSUPPORTED);
  CHECK(st.message().find("declares ABI major 2") != std::string::npos);
}

TEST_CASE("an older, smaller 1.x table is accepted; its missing slots are unsupported") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(TestPlugin("oldminor"), &lib);
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  CHECK(lib->table().abi_minor == 0);
  CHECK(lib->plugin_struct_size() == offsetof(plexus_backend_v1, allreduce));
  // The plugin's memory past struct_size is garbage; the host copy must be NULL.
  CHECK((lib->table().allreduce == nullptr));
  CHECK((lib->table().barrier == nullptr));
  CHECK((lib->table().recv == nullptr));
  auto host =
      std::make_unique<plexus::HostServices>("oldminor", "", std::map<std::string, std::string>{});
  std::shared_ptr<plexus::Backend> b;
  st = plexus::Backend::Open(std::move(lib), std::move(host), &b);
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  plexus::Status no = b->CheckSupported(PLEXUS_COLL_BARRIER, 0, 0, nullptr);
  CHECK(no.code() == PLEXUS_ERR_UNSUPPORTED);
  CHECK(no.message().find("'oldminor'") != std::string::npos);
}

TEST_CASE("a NULL required slot is rejected, naming the slot") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(TestPlugin("nullslot"), &lib);
  CHECK(st.code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(st.message().find("required slot 'wait' is NULL") != std::string::npos);
}

TEST_CASE("a library without the entry symbol is rejected") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(TestPlugin("noentry"), &lib);
  CHECK(st.code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(st.message().find("no entry symbol plexus_backend_get_v1") != std::string::npos);
}

TEST_CASE("a plugin whose entry refuses the host is rejected with its status") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(TestPlugin("refuses"), &lib);
  CHECK(st.code() == PLEXUS_ERR_UNSUPPORTED);
  CHECK(st.message().find("refused this host") != std::string::npos);
}

TEST_CASE("a non-ELF file and a missing file are rejected with what and where") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("plexus-loader-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto text = dir / "libplexus-text.so";
  std::ofstream(text) << "this is not a shared library\n";
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = Load(text.string(), &lib);
  CHECK(st.code() == PLEXUS_ERR_SYSTEM);
  CHECK(st.message().find("dlopen failed") != std::string::npos);
  CHECK(st.message().find(text.string()) != std::string::npos);  // dlerror names the file

  st = Load((dir / "libplexus-absent.so").string(), &lib);
  CHECK(st.code() == PLEXUS_ERR_SYSTEM);
  CHECK(st.message() == "no such file");

  // Through resolution, the message carries each path with its reason.
  st = plexus::ResolveBackend(text.string(), &lib);
  CHECK(st.message().find("cannot load backend '" + text.string() + "'; tried:\n  " +
                          text.string() + ": dlopen failed") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the real TCP plugin is found by name in the build tree") {
  std::unique_ptr<plexus::LoadedLibrary> lib;
  plexus::Status st = plexus::ResolveBackend("tcp", &lib);
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  CHECK(std::string(lib->table().name) == "tcp");
  CHECK((lib->table().allreduce != nullptr));
}

TEST_CASE("PLEXUS_BACKEND=nosuch fails at once, listing every path tried") {
  setenv("PLEXUS_BACKEND", "nosuch", 1);
  setenv("PLEXUS_PLUGIN_PATH", "/nonexistent/a:/nonexistent/b", 1);
  std::string message;
  int32_t status = 0;
  try {
    plexus::Communicator::from_env();
  } catch (const plexus::Error& e) {
    message = e.what();
    status = e.status();
  }
  unsetenv("PLEXUS_BACKEND");
  unsetenv("PLEXUS_PLUGIN_PATH");
  CHECK(status == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(message.find("cannot load backend 'nosuch'") != std::string::npos);
  CHECK(message.find("/nonexistent/a/libplexus-nosuch.so: no such file") != std::string::npos);
  CHECK(message.find("/nonexistent/b/libplexus-nosuch.so: no such file") != std::string::npos);
  CHECK(message.find("/libplexus-nosuch.so") != std::string::npos);
}
