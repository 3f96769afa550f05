#include "local_rendezvous.hpp"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <thread>

#include "plexus/launch_env.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/settings/environment.hpp"
#include "store/job_token.hpp"
#include "store/private_dir.hpp"

namespace plexus::conformance {
namespace {

std::unique_ptr<TcpStoreServer> g_server;  // rank 0: lives as long as the process
std::string g_file;

std::string JobId() {
  for (const char* v : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    if (const char* id = std::getenv(v); id && *id) return id;
  }
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (job && *job) return std::string(job) + "." + (step ? step : "0");
  return {};
}

void Export(uint16_t port, const std::string& token) {
  setenv("PLEXUS_MASTER_ADDR", "127.0.0.1", 1);
  setenv("PLEXUS_MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("PLEXUS_STORE_HOSTED", "1", 1);
  setenv("PLEXUS_TOKEN", token.c_str(), 1);
}

}  // namespace

bool PrepareLocalRendezvous(int64_t timeout_ms, std::string* error) {
  LaunchInfo l;
  if (!DiscoverLaunch(ProcessEnv(), &l).ok() || HasRendezvous(l) || l.size <= 1) return true;
  const std::string id = JobId();
  if (l.local_size != l.size || id.empty()) {
    *error = NoRendezvousMessage(l) +
             (id.empty() ? " (and the launcher gives no job id to meet through a local file)"
                         : " (the ranks are on several hosts)");
    return false;
  }
  // In the private directory of automatic job secrets (store/private_dir.hpp):
  // another user can neither read the secret nor plant a file of their own.
  g_file = store::PrivateFileName("conformance-" + id);
  if (l.rank == 0) {
    std::string token, why;
    if (const char* t = plexus::settings::Raw(plexus::settings::Id::kToken); t && *t) {
      token = t;
    } else if (!store::MakeJobToken(&token, &why)) {
      *error = "cannot make a job secret: " + why;
      return false;
    }
    setenv("PLEXUS_TOKEN", token.c_str(), 1);  // the server reads it at start
    Status st = TcpStoreServer::Start("127.0.0.1", 0, &g_server);
    if (!st.ok()) {
      *error = "rank 0 could not start a rendezvous store: " + st.message();
      return false;
    }
    st = store::Replace(g_file, std::to_string(g_server->port()) + " " + token + "\n");
    if (!st.ok()) {
      *error = "rank 0 could not publish the rendezvous point: " + st.message();
      return false;
    }
    Export(g_server->port(), token);
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::string text;
    bool missing = false;
    Status st = store::ReadPrivate(g_file, &text, &missing);
    if (st.ok()) {
      std::istringstream in(text);
      long port = 0;
      std::string token;
      if (in >> port >> token && port > 0 && port < 65536 && !token.empty()) {
        Export(uint16_t(port), token);
        return true;
      }
    } else if (!missing) {
      *error = "cannot read rank 0's rendezvous point: " + st.message();
      return false;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      *error = "rank 0 did not publish a rendezvous point in " + store::PrivateDirPath() + "/" +
               g_file + " within " + std::to_string(timeout_ms / 1000) + " s";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void RemoveLocalRendezvousFile() {
  if (g_server && !g_file.empty()) store::RemovePrivate(g_file);
}

}  // namespace plexus::conformance
