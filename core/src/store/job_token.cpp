#include "job_token.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/backend.h"
#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"

namespace plexus::store {
namespace {

std::atomic<bool> g_warned_mode{false};
std::atomic<bool> g_said_ignored{false};

std::mutex g_automatic_mutex;
std::string g_automatic;  // guarded by g_automatic_mutex

std::string AutomaticToken() {
  std::lock_guard<std::mutex> lock(g_automatic_mutex);
  return g_automatic;
}

std::string Named(const std::string& path) {
  return "PLEXUS_TOKEN_FILE '" + path + "'";
}

Status ReadTokenFile(const std::string& path, std::string* token) {
  // O_NONBLOCK: opening a FIFO by mistake must not hang the rank (it is refused below).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    return Status::InvalidArgument(Named(path) + " cannot be read: " + std::strerror(errno) +
                                   " (it must name a file holding the job secret, readable "
                                   "on every rank)");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Status::InvalidArgument(Named(path) + " cannot be read: fstat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Status::InvalidArgument(Named(path) +
                                   " is not a regular file (it must hold the job secret)");
  }
  if (st.st_size > off_t(kMaxTokenFileBytes)) {
    close(fd);
    return Status::InvalidArgument(Named(path) + " is " + std::to_string(st.st_size) +
                                   " bytes, more than the " + std::to_string(kMaxTokenFileBytes) +
                                   " a job secret file may hold");
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Status::InvalidArgument(Named(path) + " cannot be read: " + std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > kMaxTokenFileBytes) {  // it grew since fstat
      close(fd);
      return Status::InvalidArgument(Named(path) + " holds more than the " +
                                     std::to_string(kMaxTokenFileBytes) +
                                     " bytes a job secret file may hold");
    }
  }
  close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                           text.back() == '\t')) {
    text.pop_back();
  }
  if (text.empty()) {
    return Status::InvalidArgument(
        Named(path) + " is empty: it must hold the job secret (the same on every rank), e.g. " +
        "made by: od -An -N32 -tx1 /dev/urandom | tr -d ' \\n' > FILE; chmod 600 FILE");
  }
  if (text.find('\0') != std::string::npos) {
    return Status::InvalidArgument(Named(path) +
                                   " holds a NUL byte; a job secret is one line of text");
  }
  // Like ssh with a private key, but a warning only: refusing would fail a
  // job over a umask, and the secret is as good as it was.
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0 && !g_warned_mode.exchange(true)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    LogLine(PLEXUS_LOG_WARN, "plexus",
            Named(path) + " is accessible by group or others (mode " + mode +
                "): whoever can read it can join the job; chmod 600 it");
  }
  *token = std::move(text);
  return Status::Ok();
}

}  // namespace

Status TokenFromEnvironment(std::string* token) {
  token->clear();
  const char* direct = plexus::settings::Raw(plexus::settings::Id::kToken);
  const char* file = plexus::settings::Raw(plexus::settings::Id::kTokenFile);
  const bool has_file = file != nullptr && *file != '\0';
  if (direct != nullptr && *direct != '\0') {
    if (has_file && !g_said_ignored.exchange(true)) {
      LogLine(PLEXUS_LOG_DEBUG, "plexus",
              "PLEXUS_TOKEN is set, so PLEXUS_TOKEN_FILE is not read (PLEXUS_TOKEN wins)");
    }
    *token = direct;
    return Status::Ok();
  }
  if (has_file) return ReadTokenFile(file, token);
  *token = AutomaticToken();
  return Status::Ok();
}

void SetAutomaticToken(const std::string& token) {
  std::lock_guard<std::mutex> lock(g_automatic_mutex);
  g_automatic = token;
}

bool RandomHex(size_t bytes, std::string* out, std::string* error) {
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = std::string("getrandom: ") + std::strerror(errno);
      return false;
    }
    got += size_t(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * bytes);
  for (unsigned char b : raw) {
    text.push_back(kHex[b >> 4]);
    text.push_back(kHex[b & 15]);
  }
  *out = std::move(text);
  return true;
}

bool MakeJobToken(std::string* token, std::string* error) {
  return RandomHex(32, token, error);
}

bool ConfigFromEnvironment(const char* key, std::string* value) {
  if (std::strcmp(key, "PLEXUS_TOKEN") != 0) {
    const char* env = settings::RawByName(key);
    if (env == nullptr) return false;
    *value = env;
    return true;
  }
  std::string token;
  if (Status s = TokenFromEnvironment(&token); !s.ok()) {
    LogLine(PLEXUS_LOG_ERROR, "plexus", "the job secret: " + s.message());
    return false;
  }
  if (token.empty()) {
    // PLEXUS_TOKEN="" is reported as set (and empty), as getenv() would.
    const char* env = settings::RawByName(key);
    if (env == nullptr) return false;
  }
  *value = std::move(token);
  return true;
}

int64_t GetConfig(const std::map<std::string, std::string>& overrides, const char* key, char* buf,
                  size_t len) {
  if (!key) return -1;
  std::string value;
  if (auto it = overrides.find(key); it != overrides.end()) {
    value = it->second;
  } else if (!ConfigFromEnvironment(key, &value)) {
    return -1;
  }
  if (buf && len > 0) {
    const size_t n = std::min(len - 1, value.size());
    std::memcpy(buf, value.data(), n);
    buf[n] = '\0';
  }
  return int64_t(value.size());
}

}  // namespace plexus::store
