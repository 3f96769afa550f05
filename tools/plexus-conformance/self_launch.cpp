#include "self_launch.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "plexus/launch_env.hpp"
#include "plexus/settings/environment.hpp"
#include "restarts.hpp"

namespace plexus::conformance {
namespace {

// Set in the ranks' environment so that a plexus-run that, for whatever
// reason, sets no rank variables cannot make us re-launch forever.
constexpr const char* kGuardVariable = settings::Name(settings::Id::kConformanceLaunched);

std::string SelfExecutable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : path.string();
}

bool IsExecutable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0 && !std::filesystem::is_directory(path);
}

// plexus-run next to this program (installed side by side in bin/), or in
// the sibling tools directory of a build tree, else the first on PATH.
std::string FindPlexusRun(const std::string& self) {
  std::vector<std::string> candidates;
  if (!self.empty()) {
    const std::filesystem::path dir = std::filesystem::path(self).parent_path();
    candidates.push_back((dir / "plexus-run").string());
    candidates.push_back((dir.parent_path() / "plexus-run" / "plexus-run").string());
  }
  if (const char* path = std::getenv("PATH")) {
    std::string entries = path;
    size_t start = 0;
    while (start <= entries.size()) {
      size_t end = entries.find(':', start);
      if (end == std::string::npos) end = entries.size();
      const std::string dir = entries.substr(start, end - start);
      candidates.push_back((dir.empty() ? std::string(".") : dir) + "/plexus-run");
      start = end + 1;
    }
  }
  for (const std::string& c : candidates) {
    if (IsExecutable(c)) return c;
  }
  return {};
}

}  // namespace

bool NeedsLauncher() {
  // What DiscoverLaunch reports for an empty environment is what "no
  // launcher" looks like; comparing with it keeps one definition of it.
  LaunchInfo none, here;
  (void)DiscoverLaunch([](const char*) { return std::optional<std::string>(); }, &none);
  const Status st = DiscoverLaunch(ProcessEnv(), &here);
  if (!st.ok()) {
    std::fprintf(stderr, "plexus-conformance: launch environment: %s\n", st.message().c_str());
    std::exit(2);
  }
  if (here.source != none.source) return false;
  if (plexus::settings::Raw(plexus::settings::Id::kConformanceLaunched)) {
    std::fprintf(stderr,
                 "plexus-conformance: started by plexus-run, yet no rank variables are set "
                 "(PLEXUS_RANK, ...); giving up instead of starting plexus-run again\n");
    std::exit(2);
  }
  return true;
}

int RelaunchUnderPlexusRun(const Options& options) {
  const std::string self = SelfExecutable();
  if (self.empty()) {
    std::fprintf(stderr, "plexus-conformance: cannot read /proc/self/exe to start the ranks\n");
    return 2;
  }
  const std::string run = FindPlexusRun(self);
  if (run.empty()) {
    std::fprintf(stderr,
                 "plexus-conformance: no launcher variables are set and plexus-run was found "
                 "neither next to %s nor on PATH; start the ranks yourself (plexus-run -n N, "
                 "mpirun, torchrun) or put plexus-run on PATH\n",
                 self.c_str());
    return 2;
  }
  // --no-prefix: rank 0 writes the report; "[0] " on every line would only
  // get in the way of reading (and grepping) it.
  std::vector<std::string> args = {run, "-n", std::to_string(options.nproc), "--no-prefix", self};
  args.insert(args.end(), options.argv.begin() + 1, options.argv.end());
  setenv(kGuardVariable, "1", 1);
  return RunWithRestarts(options, args);
}

}  // namespace plexus::conformance
