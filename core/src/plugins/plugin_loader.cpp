#include "plugin_loader.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "backend_calls.hpp"
#include "plexus/settings/environment.hpp"
#include "plexus/status.hpp"

#ifndef PLEXUS_INSTALLED_PLUGIN_DIR
#define PLEXUS_INSTALLED_PLUGIN_DIR ""
#endif
#ifndef PLEXUS_BUILD_PLUGIN_DIRS
#define PLEXUS_BUILD_PLUGIN_DIRS ""
#endif
#ifndef PLEXUS_BUILD_LIB_DIR
#define PLEXUS_BUILD_LIB_DIR ""
#endif

namespace plexus {
namespace {

// Newest major this host knows. Entry names of majors up to kProbeMajors are
// looked up only to tell the user that a plugin is too new.
constexpr int kHostMajor = PLEXUS_ABI_MAJOR;
constexpr int kProbeMajors = 9;

// Slots every v1 backend must fill, with their names for messages.
struct RequiredSlot {
  const char* name;
  size_t offset;
};
#define PLEXUS_SLOT(f)                 \
  RequiredSlot {                       \
#f, offsetof(plexus_backend_v1, f) \
  }
constexpr RequiredSlot kRequired[] = {PLEXUS_SLOT(init),
                                      PLEXUS_SLOT(finalize),
                                      PLEXUS_SLOT(get_capabilities),
                                      PLEXUS_SLOT(comm_create),
                                      PLEXUS_SLOT(comm_destroy),
                                      PLEXUS_SLOT(comm_abort),
                                      PLEXUS_SLOT(comm_last_error),
                                      PLEXUS_SLOT(test),
                                      PLEXUS_SLOT(wait),
                                      PLEXUS_SLOT(request_free)};
#undef PLEXUS_SLOT
// The smallest table a 1.0 plugin may have: everything through request_free.
constexpr size_t kMinTableSize = offsetof(plexus_backend_v1, request_free) + sizeof(void*);
// Tables grow by one pointer per new slot; a table claiming more than this is
// corrupt (an uninitialised struct_size), not a plugin from the future.
constexpr size_t kMaxPlausibleTableSize = 64 * 1024;

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// The directory this libplexus was loaded from (resolved), or "".
std::string SelfDirectory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&PluginSearchDirs), &info) || !info.dli_fname) return {};
  std::error_code ec;
  const auto path = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string() : path.parent_path().string();
}

bool SameDirectory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return !a.empty() && !b.empty() && std::filesystem::equivalent(a, b, ec);
}

}  // namespace

LoadedLibrary::~LoadedLibrary() {
  if (handle_) dlclose(handle_);
}

Status LoadBackendLibrary(const std::string& path, std::unique_ptr<LoadedLibrary>* out) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return Status::System("no such file");
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument("not a regular file");

  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return Status::System(std::string("dlopen failed: ") + (err ? err : "unknown error"));
  }
  std::unique_ptr<LoadedLibrary> lib(new LoadedLibrary);
  lib->handle_ = handle;  // closed by ~LoadedLibrary on every early return
  lib->path_ = path;

  auto entry = reinterpret_cast<plexus_backend_get_v1_fn>(dlsym(handle, PLEXUS_BACKEND_ENTRY_V1));
  if (!entry) {
    for (int major = kProbeMajors; major > kHostMajor; --major) {
      const std::string name = "plexus_backend_get_v" + std::to_string(major);
      if (dlsym(handle, name.c_str())) {
        return Status::Unsupported("plugin implements only ABI major " + std::to_string(major) +
                                   " (exports " + name + "); this host speaks major " +
                                   std::to_string(kHostMajor) + " — upgrade Plexus");
      }
    }
    return Status::InvalidArgument(std::string("no entry symbol ") + PLEXUS_BACKEND_ENTRY_V1 +
                                   " (not a Plexus backend, or built without exporting it)");
  }
  const plexus_backend_v1* table = nullptr;
  const int32_t rc = entry(PLEXUS_ABI_MINOR, &table);
  if (rc == PLEXUS_OK && !table) {
    return Status::Internal(std::string("entry function ") + PLEXUS_BACKEND_ENTRY_V1 +
                            " returned PLEXUS_OK but no table (a backend bug)");
  }
  if (rc != PLEXUS_OK) {
    return Status(rc < 0 ? rc : PLEXUS_ERR_INTERNAL,
                  std::string("entry function refused this host (ABI ") +
                      std::to_string(PLEXUS_ABI_MAJOR) + "." + std::to_string(PLEXUS_ABI_MINOR) +
                      "): " + StatusName(rc));
  }
  if (table->abi_major != PLEXUS_ABI_MAJOR) {
    return Status::Unsupported("table declares ABI major " + std::to_string(table->abi_major) +
                               " through the v1 entry; this host speaks major " +
                               std::to_string(kHostMajor));
  }
  if (table->struct_size < kMinTableSize) {
    return Status::InvalidArgument("table is " + std::to_string(table->struct_size) +
                                   " bytes, smaller than the " + std::to_string(kMinTableSize) +
                                   " bytes every 1.x table has");
  }
  if (table->struct_size > kMaxPlausibleTableSize) {
    return Status::InvalidArgument("table claims to be " + std::to_string(table->struct_size) +
                                   " bytes; no 1.x table is near " +
                                   std::to_string(kMaxPlausibleTableSize) +
                                   " (struct_size not set to sizeof(plexus_backend_v1)?)");
  }
  // Copy what the plugin has; what it lacks stays zero = unsupported.
  std::memcpy(&lib->table_, table, std::min<size_t>(table->struct_size, sizeof lib->table_));
  lib->plugin_struct_size_ = table->struct_size;
  // A slot is read only if the plugin's minor has it, whatever struct_size
  // says (a 1.1 table padded to a larger size holds no 1.2 slots).
  if (lib->table_.abi_minor < 2) {
    const size_t from = offsetof(plexus_backend_v1, gather);
    std::memset(reinterpret_cast<char*>(&lib->table_) + from, 0, sizeof lib->table_ - from);
  }
  if (lib->table_.abi_minor < 1) lib->table_.request_error = nullptr;
  if (!lib->table_.name || !lib->table_.version) {
    return Status::InvalidArgument("table has a NULL name or version");
  }
  for (const RequiredSlot& slot : kRequired) {
    void* fn = nullptr;
    std::memcpy(&fn, reinterpret_cast<const char*>(&lib->table_) + slot.offset, sizeof fn);
    if (!fn) {
      return Status::InvalidArgument(std::string("required slot '") + slot.name +
                                     "' is NULL in backend '" + PrintableText(lib->table_.name) +
                                     "'");
    }
  }
  *out = std::move(lib);
  return Status::Ok();
}

std::vector<SearchDir> PluginSearchDirs() {
  std::vector<SearchDir> dirs;
  if (const char* env = plexus::settings::Raw(plexus::settings::Id::kPluginPath)) {
    for (auto& d : Split(env, ':')) dirs.push_back({d, "PLEXUS_PLUGIN_PATH"});
  }
  // A libplexus running from its build directory also searches the build
  // tree's backends; an installed one never does (the build tree may be gone,
  // or hold other versions) and finds its plugins next to itself, in
  // <libdir>/plexus, wherever the installed tree was put.
  const std::string self = SelfDirectory();
  if (SameDirectory(self, PLEXUS_BUILD_LIB_DIR)) {
    // The build tree's own plugins first: an older install under the same
    // prefix must not shadow the backends built beside this libplexus.
    for (auto& d : Split(PLEXUS_BUILD_PLUGIN_DIRS, ':')) dirs.push_back({d, "build tree"});
    if (*PLEXUS_INSTALLED_PLUGIN_DIR) dirs.push_back({PLEXUS_INSTALLED_PLUGIN_DIR, "installed"});
  } else if (!self.empty()) {
    dirs.push_back({self + "/plexus", "installed"});
  } else if (*PLEXUS_INSTALLED_PLUGIN_DIR) {
    dirs.push_back({PLEXUS_INSTALLED_PLUGIN_DIR, "installed"});
  }
  return dirs;
}

std::vector<std::string> CandidatePaths(const std::string& spec) {
  if (spec.find('/') != std::string::npos) return {spec};
  std::vector<std::string> paths;
  for (const SearchDir& d : PluginSearchDirs()) {
    paths.push_back(d.dir + "/libplexus-" + spec + ".so");
  }
  return paths;
}

Status ResolveBackend(const std::string& spec, std::unique_ptr<LoadedLibrary>* out) {
  if (spec.empty()) return Status::InvalidArgument("empty backend name");
  std::string tried;
  for (const std::string& path : CandidatePaths(spec)) {
    Status st = LoadBackendLibrary(path, out);
    if (st.ok()) return st;
    tried += "\n  " + path + ": " + st.message();
  }
  if (tried.empty()) tried = "\n  (no directories to search: set PLEXUS_PLUGIN_PATH)";
  return Status::InvalidArgument("cannot load backend '" + spec + "'; tried:" + tried);
}

std::vector<std::string> DiscoverPluginFiles() {
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const SearchDir& d : PluginSearchDirs()) {
    std::error_code ec;
    std::vector<std::string> here;
    for (const auto& entry : std::filesystem::directory_iterator(d.dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("libplexus-", 0) == 0 && name.size() > 13 &&
          name.compare(name.size() - 3, 3, ".so") == 0) {
        here.push_back(name);
      }
    }
    std::sort(here.begin(), here.end());
    for (const auto& name : here) {
      if (seen.insert(name).second) files.push_back(d.dir + "/" + name);
    }
  }
  return files;
}

}  // namespace plexus
