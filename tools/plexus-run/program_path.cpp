#include "program_path.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

namespace plexus::run {
namespace {

// 0 when file is an executable regular file; otherwise the errno execve would give.
int CheckExecutable(const std::string& file) {
  struct stat st;
  if (::stat(file.c_str(), &st) != 0) return errno;
  if (S_ISDIR(st.st_mode)) return EACCES;  // what execve() says for a directory
  if (::access(file.c_str(), X_OK) != 0) return errno;
  return 0;
}

}  // namespace

int ResolveProgram(const std::string& program, const char* path_env, std::string* resolved) {
  if (program.empty()) return ENOENT;
  if (program.find('/') != std::string::npos) {
    *resolved = program;
    return CheckExecutable(program);
  }
  const std::string_view path =
      (path_env != nullptr && *path_env != '\0') ? path_env : "/bin:/usr/bin";
  // Like execvp(): a later directory may still have it when an earlier one
  // denied access, but when nothing runs, EACCES wins over ENOENT.
  int result = ENOENT;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = std::min(path.find(':', begin), path.size());
    std::string_view dir = path.substr(begin, end - begin);
    if (dir.empty()) dir = ".";  // an empty PATH entry means the current directory
    std::string candidate;
    candidate.reserve(dir.size() + 1 + program.size());
    candidate.append(dir).append(1, '/').append(program);
    int err = CheckExecutable(candidate);
    if (err == 0) {
      *resolved = candidate;
      return 0;
    }
    if (err == EACCES) result = EACCES;
    begin = end + 1;
  }
  return result;
}

}  // namespace plexus::run
