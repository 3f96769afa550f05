#include "local_rendezvous.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "plexus/launch_env.hpp"
#include "plexus/rendezvous_store.hpp"

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

// Keeps the id usable in a file name.
std::string Sanitise(const std::string& id) {
  std::string out;
  for (char c : id)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  return out;
}

bool RandomToken(std::string* token) {
  unsigned char bytes[32];
  std::FILE* f = std::fopen("/dev/urandom", "rb");
  if (!f) return false;
  const bool ok = std::fread(bytes, 1, sizeof bytes, f) == sizeof bytes;
  std::fclose(f);
  if (!ok) return false;
  static const char kHex[] = "0123456789abcdef";
  token->clear();
  for (unsigned char b : bytes) {
    *token += kHex[b >> 4];
    *token += kHex[b & 15];
  }
  return true;
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
  const char* tmp = std::getenv("TMPDIR");
  g_file = std::string(tmp && *tmp ? tmp : "/tmp") + "/plexus-conformance-" +
           std::to_string(getuid()) + "-" + Sanitise(id);
  if (l.rank == 0) {
    std::string token;
    if (const char* t = std::getenv("PLEXUS_TOKEN"); t && *t) {
      token = t;
    } else if (!RandomToken(&token)) {
      *error = "cannot read /dev/urandom for a job secret";
      return false;
    }
    setenv("PLEXUS_TOKEN", token.c_str(), 1);  // the server reads it at start
    Status st = TcpStoreServer::Start("127.0.0.1", 0, &g_server);
    if (!st.ok()) {
      *error = "rank 0 could not start a rendezvous store: " + st.message();
      return false;
    }
    const std::string part = g_file + ".part";
    unlink(part.c_str());
    const int fd = open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const std::string text = std::to_string(g_server->port()) + " " + token + "\n";
    if (fd < 0 || write(fd, text.data(), text.size()) != ssize_t(text.size()) || close(fd) != 0 ||
        rename(part.c_str(), g_file.c_str()) != 0) {
      *error = "cannot write " + g_file;
      return false;
    }
    Export(g_server->port(), token);
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    struct stat st {};
    // Only a file of ours that nobody else can read or write is trusted.
    if (stat(g_file.c_str(), &st) == 0 && st.st_uid == getuid() && (st.st_mode & 077) == 0) {
      std::ifstream in(g_file);
      long port = 0;
      std::string token;
      if (in >> port >> token && port > 0 && port < 65536 && !token.empty()) {
        Export(uint16_t(port), token);
        return true;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      *error = "rank 0 did not publish a rendezvous point in " + g_file + " within " +
               std::to_string(timeout_ms / 1000) + " s";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void RemoveLocalRendezvousFile() {
  if (g_server && !g_file.empty()) unlink(g_file.c_str());
}

}  // namespace plexus::conformance
