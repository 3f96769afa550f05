// plexus-run: the local launcher. `plexus-run -n N prog args...` starts N
// copies of prog on this host with the rank variables set (rank_environment),
// hosts the rendezvous store they meet at, prefixes their output with the rank
// and stops the job when one rank fails (launcher).
//
// Across hosts (--nnodes N --node-rank K), one plexus-run runs on each host;
// node 0's hosts the store, and the launchers learn of each other's failures
// through it (node_group).
//
// This file holds main() and the order of things: command line (options),
// job secret (job_secret), addresses (network_address), then the starts of
// the ranks (starts: store, node group (node_join), environments, job).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "job_secret.hpp"
#include "launcher.hpp"
#include "network_address.hpp"
#include "options.hpp"
#include "rank_environment.hpp"
#include "starts.hpp"
#include "usage.hpp"

namespace plexus::run {
namespace {

// Makes sure descriptors 0, 1 and 2 are open (on /dev/null if need be), so a
// pipe the launcher creates can never become a rank's stdout by accident.
void EnsureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (opened >= 0 && opened != fd) {
        ::dup2(opened, fd);
        ::close(opened);
      }
    }
  }
}

int Main(int argc, char** argv) {
  EnsureStandardFds();
  Options opts = ParseArgs(argc, argv);

  JobInfo job;
  job.world_size = opts.nnodes * opts.nproc;
  job.local_world_size = opts.nproc;
  job.node_rank = opts.node_rank;
  job.master_addr = opts.master_addr;
  job.store_hosted = opts.host_store;
  std::string public_credential;  // node 0 under srun with MUNGE: what its store hands out
  if (const int code = SetJobSecret(opts, &job, &public_credential); code != kExitOk) return code;

  // After the token, whose absence is the first thing to fix on every node.
  if (opts.nnodes > 1 && !opts.local_nodes) {
    std::string error = CheckReachableByOtherNodes(opts);
    if (!error.empty()) UsageError(error);
  }

  return RunStarts(opts, std::move(job), public_credential);
}

}  // namespace
}  // namespace plexus::run

int main(int argc, char** argv) {
  return plexus::run::Main(argc, argv);
}
