// The job's secret: --make-token, --token-file and PLEXUS_TOKEN_FILE, the
// caller's PLEXUS_TOKEN, a fresh one, or under srun a MUNGE credential.
#include "job_secret.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "launcher.hpp"
#include "node_join.hpp"
#include "plexus/settings/environment.hpp"
#include "store/job_token.hpp"
#include "store/munge_secret.hpp"
#include "store/store_protocol.hpp"

namespace plexus::run {
namespace {

// A token file is one line; anything this big is the wrong file.
constexpr size_t kMaxTokenFileBytes = 64 * 1024;

// The job secret in path: the file's contents without trailing whitespace.
bool ReadTokenFile(const std::string& path, const char* what, std::string* token,
                   std::string* error) {
  const std::string name = std::string(what) + " '" + path + "'";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    *error = "cannot read " + name + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  if (!S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > kMaxTokenFileBytes) {
    ::close(fd);
    *error = name + (S_ISREG(st.st_mode) ? " is too large for a job secret" : " is not a file");
    return false;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty() || text.find('\0') != std::string::npos ||
      text.find('\n') != std::string::npos) {
    *error = name + " does not hold a job secret (one line, e.g. made by plexus-run --make-token)";
    return false;
  }
  if ((st.st_mode & 077) != 0) {
    std::fprintf(stderr, "plexus-run: warning: %s may be read by other users (chmod 600 it)\n",
                 name.c_str());
  }
  *token = text;
  return true;
}

// --token-file FILE, or with --nnodes the file PLEXUS_TOKEN_FILE names
// (token_file_var): its secret is the job's.
int SecretFromFile(const Options& opts, const char* token_file_var, JobInfo* job) {
  // Across hosts every node needs the same secret, which is why a file
  // (or PLEXUS_TOKEN) is required there; on one host a fresh one would do,
  // but --token-file is honoured all the same.
  const bool option = !opts.token_file.empty();
  std::string error;
  if (!ReadTokenFile(option ? opts.token_file : token_file_var,
                     option ? "--token-file" : "PLEXUS_TOKEN_FILE", &job->token, &error)) {
    std::fprintf(stderr, "plexus-run: %s\n", error.c_str());
    return kExitUsage;
  }
  ::setenv("PLEXUS_TOKEN", job->token.c_str(), 1);  // for our store server and client
  return kExitOk;
}

// Under srun, as for ranks srun starts (core/src/job_secret.hpp, case 4):
// node 0 makes the secret and its store hands it out in a MUNGE
// credential only this user can open; the other nodes fetch it.
int SecretInMunge(const Options& opts, JobInfo* job, std::string* public_credential) {
  Status st = Status::Ok();
  const std::string binding = store::SlurmStepBinding("plexus-run store " + opts.master_addr + ":" +
                                                      std::to_string(opts.master_port));
  if (opts.node_rank == 0) {
    std::string error;
    if (!store::MakeJobToken(&job->token, &error)) st = Status::System(error);
    if (st.ok()) st = store::MungeEncodeSecret(binding, job->token, public_credential);
  } else {
    std::string credential;
    st = store::FetchPublicCredential(opts.master_addr, uint16_t(opts.master_port), JoinTimeout(),
                                      &credential);
    if (st.ok()) st = store::MungeDecodeSecret(credential, binding, &job->token);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "plexus-run: node %d: the job secret in a MUNGE credential: %s\n",
                 opts.node_rank, st.message().c_str());
    return kExitRankFailed;
  }
  ::setenv("PLEXUS_TOKEN", job->token.c_str(), 1);
  return kExitOk;
}

}  // namespace

int MakeTokenFile(const char* path) {
  std::string token, error;
  if (!store::MakeJobToken(&token, &error)) {
    std::fprintf(stderr, "plexus-run: cannot make a job token: %s\n", error.c_str());
    return kExitRankFailed;
  }
  int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "plexus-run: cannot create '%s': %s%s\n", path, std::strerror(errno),
                 errno == EEXIST ? " (a token file is never overwritten)" : "");
    return kExitRankFailed;
  }
  token += "\n";
  bool ok = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "plexus-run: cannot write '%s': %s\n", path, std::strerror(errno));
    ::unlink(path);
    return kExitRankFailed;
  }
  std::printf(
      "plexus-run: wrote a new job secret to %s (mode 600); copy it to every node and give it "
      "with --token-file %s\n",
      path, path);
  return kExitOk;
}

int SetJobSecret(const Options& opts, JobInfo* job, std::string* public_credential) {
  // A token given by the caller (an outer launcher, a multi-host script) is
  // the job's secret; otherwise every job gets a fresh one.
  const char* given_token = plexus::settings::Raw(plexus::settings::Id::kToken);
  const char* token_file_var = plexus::settings::Raw(plexus::settings::Id::kTokenFile);
  const bool multi = opts.nnodes > 1;
  if (!opts.token_file.empty() || (multi && (given_token == nullptr || *given_token == '\0') &&
                                   token_file_var != nullptr && *token_file_var != '\0')) {
    return SecretFromFile(opts, token_file_var, job);
  } else if (given_token != nullptr && *given_token != '\0') {
    job->token = given_token;
  } else if (multi && opts.from_slurm && store::MungeWanted(nullptr)) {
    return SecretInMunge(opts, job, public_credential);
  } else if (multi) {
    std::fprintf(stderr,
                 "plexus-run: --nnodes %d needs a job secret that every node shares, and it "
                 "never goes on a command line. Make one and copy it to every node, e.g.\n"
                 "  plexus-run --make-token ~/.plexus-token\n"
                 "  scp -p ~/.plexus-token otherhost:   # (or keep it on a shared file system)\n"
                 "then give --token-file ~/.plexus-token to plexus-run on every node (or set "
                 "PLEXUS_TOKEN_FILE).\n",
                 opts.nnodes);
    return kExitUsage;
  } else if (std::string error; !store::MakeJobToken(&job->token, &error)) {
    std::fprintf(stderr, "plexus-run: cannot make a job token: %s\n", error.c_str());
    return kExitRankFailed;
  } else {
    // Also ours: the store server (starts.cpp) takes its secret from this
    // process's environment, like every other Plexus component. No thread
    // exists yet, so setenv() is safe here.
    ::setenv("PLEXUS_TOKEN", job->token.c_str(), 1);
  }
  return kExitOk;
}

}  // namespace plexus::run
