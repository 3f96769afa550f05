// Finds backend libraries and loads them through dlopen, negotiating the ABI.
//
// Resolution of a backend spec (PLEXUS_BACKEND): a spec containing '/' is a
// path and is the only candidate; a name N becomes libplexus-N.so, looked for
// in every directory of PLEXUS_PLUGIN_PATH (":"-separated), then (for a
// libplexus running from its build tree) the build tree's backend
// directories, then the installed plugin directory. The first that
// loads wins; when none does, the error lists every path tried with the
// reason (dlerror(), missing file, refused ABI, bad table).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "plexus/backend.h"
#include "plexus/status.hpp"

namespace plexus {

// A dlopen()ed backend library whose v1 table passed validation. The table is
// copied into a zero-filled plexus_backend_v1: slots the plugin's (smaller,
// older) struct did not have read as NULL, i.e. unsupported. Closing the
// library is the destructor's job.
class LoadedLibrary {
 public:
  ~LoadedLibrary();
  LoadedLibrary(const LoadedLibrary&) = delete;
  LoadedLibrary& operator=(const LoadedLibrary&) = delete;

  const std::string& path() const { return path_; }
  const plexus_backend_v1& table() const { return table_; }
  uint32_t plugin_struct_size() const { return plugin_struct_size_; }

 private:
  friend Status LoadBackendLibrary(const std::string&, std::unique_ptr<LoadedLibrary>*);
  LoadedLibrary() = default;
  void* handle_ = nullptr;
  std::string path_;
  plexus_backend_v1 table_{};
  uint32_t plugin_struct_size_ = 0;
};

// Loads one file and validates it. Errors say which check failed.
Status LoadBackendLibrary(const std::string& path, std::unique_ptr<LoadedLibrary>* out);

// Directories searched for a backend name, in order, each with where it came from.
struct SearchDir {
  std::string dir;
  std::string origin;  // "PLEXUS_PLUGIN_PATH", "installed", "build tree"
};
std::vector<SearchDir> PluginSearchDirs();

// Candidate paths for a spec (a name or a path), in resolution order.
std::vector<std::string> CandidatePaths(const std::string& spec);

// Loads the first candidate of spec that validates. On failure the message
// lists each path tried and why it was rejected.
Status ResolveBackend(const std::string& spec, std::unique_ptr<LoadedLibrary>* out);

// Every libplexus-*.so file in the search directories (first occurrence of
// each file name wins), for plexus-info and automatic selection.
std::vector<std::string> DiscoverPluginFiles();

// Backend names tried, in order, when PLEXUS_BACKEND is unset.
inline const std::vector<std::string> kAutoBackendOrder = {"nccl", "ucx", "mpi", "tcp"};

// What a rank other than 0 makes of the backend rank 0 chose (read from the
// store, where PLEXUS_BACKEND is unset): the name when it is one of
// kAutoBackendOrder; anything else (a path, a name no rank would choose) is
// INVALID_USAGE naming it, and nothing is loaded. Defined in communicator.cpp.
Status AutoBackendChoice(const std::vector<uint8_t>& chosen, std::string* name);

}  // namespace plexus
