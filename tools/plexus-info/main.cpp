// plexus-info: which backends this installation can find, what each one can
// do, and why any was rejected.
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/algos/dtype.hpp"
#include "plexus/launch_env.hpp"
#include "plexus/settings/environment.hpp"
#include "plugins/backend_calls.hpp"
#include "plugins/host_services.hpp"
#include "plugins/plugin_loader.hpp"
#include "settings_report.hpp"

namespace {

constexpr const char* kUsage = R"(Usage: plexus-info [--help] [--version] [BACKEND|PATH ...]
       plexus-info --launch
       plexus-info --settings[=markdown]

Lists every Plexus backend plugin (libplexus-<name>.so) found on the search
path, with its file, ABI version, implementation version and capabilities;
a plugin that was found but rejected is listed with the reason. With
arguments, only those backends (names or paths) are examined.

Search path, in order:
  $PLEXUS_PLUGIN_PATH (':'-separated directories)
  the build tree's backend directories (only for a libplexus in its build tree)
  the installed plugin directory (<libdir>/plexus, next to libplexus)

Options:
      --launch   print this process's place in the job as Plexus reads it from
                 the launcher (plexus-run, torchrun, mpirun, srun) and exit:
                 "launch: rank 3 of 5, local rank 1 of 2, node 1 of 3, master
                 n07:24242, host n08, from Slurm" (exit 1 with the reason when
                 the launcher's variables are wrong); connects to nothing
      --settings print every PLEXUS_* setting with its value here, where the
                 value came from (environment or default) and the layer that
                 reads it, then any PLEXUS_* variable that is not a setting
                 (a typo) with the nearest name, and exit
      --settings=markdown
                 print the table of docs/environment.md and exit
  -h, --help     show this help and exit
  -V, --version  show the Plexus version and ABI version and exit

Exit status: 0 when at least one backend loaded, 1 otherwise, 2 on bad usage.
)";

std::string Bits(uint32_t mask, uint32_t first, uint32_t last, const char* (*name)(uint32_t)) {
  std::string out;
  for (uint32_t i = first; i <= last; ++i) {
    if (mask >> i & 1u) out += std::string(out.empty() ? "" : " ") + name(i);
  }
  return out.empty() ? "(none)" : out;
}

const char* MemoryName(uint32_t m) {
  return m == PLEXUS_MEMORY_HOST ? "host" : m == PLEXUS_MEMORY_CUDA ? "cuda" : "?";
}

void PrintCaps(const plexus_capabilities& c) {
  std::printf("  collectives:  %s\n", Bits(c.collectives, 0, plexus::abi::kCollectiveCount - 1,
                                           plexus::algos::CollectiveName)
                                          .c_str());
  std::printf("  memory:       %s\n", Bits(c.memory_types, 1, 2, MemoryName).c_str());
  std::printf("  dtypes:       %s\n",
              Bits(c.dtypes, 1, PLEXUS_DTYPE_MAX_V1, plexus::algos::DtypeName).c_str());
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) {
    std::printf(
        "  reduce %-5s  %s\n", plexus::algos::ReduceOpName(op),
        Bits(c.reduce_dtypes[op], 1, PLEXUS_DTYPE_MAX_V1, plexus::algos::DtypeName).c_str());
  }
  std::string flags;
  if (c.flags & PLEXUS_CAP_IN_PLACE) flags += " in-place";
  if (c.flags & PLEXUS_CAP_STREAM_ORDERED) flags += " stream-ordered";
  if (c.flags & PLEXUS_CAP_ABORT) flags += " abort";
  std::printf("  flags:       %s\n", flags.empty() ? " (none)" : flags.c_str());
  std::printf("  threads:      %s\n", c.thread_level == PLEXUS_THREAD_MULTIPLE     ? "multiple"
                                      : c.thread_level == PLEXUS_THREAD_SERIALIZED ? "serialized"
                                                                                   : "unknown");
}

// Returns true when the plugin loaded and initialised.
// Each plugin is first run in a child process: a plugin that crashes or hangs
// in its entry function or init is reported, not fatal to this tool.
bool Examine(const std::string& path) {
  plexus::Status st = plexus::ProbeInChild(path, std::chrono::seconds(20));
  if (!st.ok()) {
    std::printf("REJECTED %s\n  reason: %s\n\n", path.c_str(), st.message().c_str());
    return false;
  }
  std::unique_ptr<plexus::LoadedLibrary> lib;
  st = plexus::LoadBackendLibrary(path, &lib);
  if (!st.ok()) {
    std::printf("REJECTED %s\n  reason: %s\n\n", path.c_str(), st.message().c_str());
    return false;
  }
  const plexus_backend_v1& t = lib->table();
  const std::string name = plexus::PrintableText(t.name);
  std::printf(
      "%s\n  file:         %s\n  ABI:          %u.%u (table %u bytes)\n"
      "  version:      %s\n",
      name.c_str(), path.c_str(), unsigned(t.abi_major), unsigned(t.abi_minor),
      lib->plugin_struct_size(), plexus::PrintableText(t.version).c_str());
  auto host =
      std::make_unique<plexus::HostServices>(name, "", std::map<std::string, std::string>{});
  std::shared_ptr<plexus::Backend> backend;
  st = plexus::Backend::Open(std::move(lib), std::move(host), &backend);
  if (!st.ok()) {
    std::printf("  UNUSABLE here: %s\n\n", st.message().c_str());
    return false;
  }
  PrintCaps(backend->capabilities());
  std::printf("  groups:       %s\n", backend->HasCommSplit()
                                          ? "native (comm_split)"
                                          : "made by the host with comm_create over the group");
  std::printf("\n");
  return true;
}

int PrintLaunch() {
  plexus::LaunchInfo l;
  const plexus::Status st = plexus::DiscoverLaunch(plexus::ProcessEnv(), &l);
  if (!st.ok()) {
    std::fprintf(stderr, "plexus-info: %s\n", st.message().c_str());
    return 1;
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::string node = "node ? (the launcher does not say)";
  if (l.node_count > 0) {
    node = "node " + std::to_string(l.node_rank) + " of " + std::to_string(l.node_count);
  }
  const std::string master =
      l.master_addr.empty() ? std::string("(none)")
                            : l.master_addr + ":" + std::to_string(l.master_port);
  std::printf("launch: rank %u of %u, local rank %u of %u, %s, master %s, host %s, from %s\n",
              l.rank, l.size, l.local_rank, l.local_size, node.c_str(), master.c_str(), host,
              l.source.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--launch") return PrintLaunch();
    if (a == "--settings") return plexus::info::PrintSettings();
    if (a == "--settings=markdown") return plexus::info::PrintSettingsMarkdown();
    if (a == "-V" || a == "--version") {
      std::printf("plexus-info %s, backend ABI %d.%d\n", PLEXUS_VERSION_STRING, PLEXUS_ABI_MAJOR,
                  PLEXUS_ABI_MINOR);
      return 0;
    }
    if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "plexus-info: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
    wanted.push_back(a);
  }
  std::printf("Plexus %s, backend ABI %d.%d\nsearch path:\n", PLEXUS_VERSION_STRING,
              PLEXUS_ABI_MAJOR, PLEXUS_ABI_MINOR);
  for (const auto& d : plexus::PluginSearchDirs()) {
    std::printf("  %-60s (%s)\n", d.dir.c_str(), d.origin.c_str());
  }
  const char* chosen = plexus::settings::Raw(plexus::settings::Id::kBackend);
  std::printf("PLEXUS_BACKEND: %s\n\n",
              chosen ? chosen : "(unset: first usable of nccl, ucx, mpi, tcp)");

  std::vector<std::string> paths;
  if (wanted.empty()) {
    paths = plexus::DiscoverPluginFiles();
  } else {
    for (const auto& w : wanted) {
      auto c = plexus::CandidatePaths(w);
      bool found = false;
      for (const auto& p : c) {
        if (access(p.c_str(), F_OK) == 0) {
          paths.push_back(p);
          found = true;
          break;
        }
      }
      if (!found)
        std::printf("NOT FOUND %s (looked for %s)\n\n", w.c_str(),
                    c.empty() ? "nothing" : c.front().c_str());
    }
  }
  int usable = 0;
  for (const auto& p : paths) usable += Examine(p) ? 1 : 0;
  std::printf("%d usable backend(s), %zu examined\n", usable, paths.size());
  return usable > 0 ? 0 : 1;
}
