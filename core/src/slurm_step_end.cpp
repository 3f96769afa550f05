#include "slurm_step_end.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "plexus/backend.h"
#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"

extern char** environ;

namespace plexus {
namespace {

// Digits only: the ids go into a shell command line.
bool IsId(const char* v) {
  if (v == nullptr || *v == '\0' || std::strlen(v) > 20) return false;
  for (const char* p = v; *p != '\0'; ++p) {
    if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
  }
  return true;
}

// Made when armed, used at exit: no allocation in the exit handler.
char g_script[160];
std::once_flag g_armed;

// At exit (glibc's on_exit, which is told the status): only a rank that
// exits non-zero ends the step. A rank that caught the error and finished
// well ends nothing.
void AtExit(int status, void*) {
  if (status == 0) return;
  posix_spawn_file_actions_t files;
  if (posix_spawn_file_actions_init(&files) != 0) return;
  // Not on the task's output (srun would wait for these descriptors too),
  // and nothing else of the rank's: its sockets must close with it.
  for (int fd = 0; fd <= 2; ++fd) {
    posix_spawn_file_actions_addopen(&files, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  posix_spawn_file_actions_addclosefrom_np(&files, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  char sh[] = "/bin/sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, g_script, nullptr};
  pid_t pid = 0;
  posix_spawn(&pid, "/bin/sh", &files, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
}

void Arm(const std::string& why) {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (step == nullptr) step = std::getenv("SLURM_STEPID");
  const char* ntasks = std::getenv("SLURM_NTASKS");
  const char* off = plexus::settings::Raw(plexus::settings::Id::kSlurmEndStep);
  if (!IsId(job) || !IsId(step) || !IsId(ntasks) || std::strtoull(ntasks, nullptr, 10) <= 1) {
    return;
  }
  if (off != nullptr && std::strcmp(off, "0") == 0) return;
  std::string grace = "2";
  if (const char* g = plexus::settings::Raw(plexus::settings::Id::kSlurmEndGrace); IsId(g) && std::strlen(g) <= 6) {
    grace = g;
  }
  const std::string target = std::string(job) + "." + step;
  const std::string script = "sleep " + grace + "; exec scancel --quiet " + target;
  static_assert(sizeof g_script > 6 + 6 + 22 + 20 + 1 + 20 + 1);
  std::snprintf(g_script, sizeof g_script, "%s", script.c_str());
  if (on_exit(AtExit, nullptr) != 0) {
    LogLine(PLEXUS_LOG_WARN, "plexus",
            "cannot arrange to end Slurm step " + target +
                " when this rank exits; a frozen rank may keep the step alive: use srun -K");
    return;
  }
  LogLine(PLEXUS_LOG_DEBUG, "plexus",
          "Slurm step " + target + " will be ended " + grace +
              " s after this rank exits non-zero (" + why +
              "); PLEXUS_SLURM_END_STEP=0 turns this off");
}

}  // namespace

void EndSlurmStepAfterExit(const std::string& why) {
  try {
    std::call_once(g_armed, [&] { Arm(why); });
  } catch (...) {
  }
}

}  // namespace plexus
