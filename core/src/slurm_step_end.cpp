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

std::once_flag g_armed;

void Arm(const std::string& why) {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (step == nullptr) step = std::getenv("SLURM_STEPID");
  const char* ntasks = std::getenv("SLURM_NTASKS");
  const char* off = std::getenv("PLEXUS_SLURM_END_STEP");
  if (!IsId(job) || !IsId(step) || !IsId(ntasks) || std::strtoull(ntasks, nullptr, 10) <= 1) {
    return;
  }
  if (off != nullptr && std::strcmp(off, "0") == 0) return;
  std::string grace = "2";
  if (const char* g = std::getenv("PLEXUS_SLURM_END_GRACE"); IsId(g)) grace = g;
  const std::string target = std::string(job) + "." + step;
  const std::string script = "while kill -0 " + std::to_string(getpid()) +
                             " 2>/dev/null; do sleep 0.2; done; sleep " + grace +
                             "; exec scancel --quiet " + target;
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  // Not on the task's output: srun would wait for these descriptors too.
  for (int fd = 0; fd <= 2; ++fd) {
    posix_spawn_file_actions_addopen(&files, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  char sh[] = "/bin/sh", dash_c[] = "-c";
  std::string script_copy = script;
  char* argv[] = {sh, dash_c, script_copy.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &files, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) {
    LogLine(PLEXUS_LOG_WARN, "plexus",
            "cannot start the watcher that ends Slurm step " + target + " after this rank exits (" +
                std::strerror(rc) + "); a frozen rank may keep the step alive: use srun -K");
    return;
  }
  LogLine(PLEXUS_LOG_DEBUG, "plexus",
          "Slurm step " + target + " will be ended " + grace + " s after this rank exits (" + why +
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
