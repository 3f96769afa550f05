#include "private_dir.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "job_token.hpp"
#include "plexus/settings/environment.hpp"

namespace plexus::store {
namespace {

std::string Errno(int err) {
  return std::strerror(err);
}

std::string OwnerName(uid_t uid) {
  std::string name = "uid " + std::to_string(uid);
  char buf[1024];
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    name += " (" + std::string(found->pw_name) + ")";
  }
  return name;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 200) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Opens (creating it if need be) the private directory; *fd on success.
Status OpenDir(int* fd) {
  const std::string path = PrivateDirPath();
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::System("cannot create " + path + ": " + Errno(errno));
  }
  const int dir = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    const int err = errno;
    return Status::System("cannot open " + path + ": " + Errno(err) +
                          (err == ELOOP || err == ENOTDIR
                               ? " (it is not a directory; someone put something else there: "
                                 "remove it)"
                               : ""));
  }
  struct stat st {};
  if (fstat(dir, &st) != 0) {
    const int err = errno;
    close(dir);
    return Status::System("cannot stat " + path + ": " + Errno(err));
  }
  if (st.st_uid != geteuid()) {
    close(dir);
    return Status::InvalidUsage(path + " belongs to " + OwnerName(st.st_uid) + ", not to this " +
                                "user (" + OwnerName(geteuid()) +
                                "): refusing to keep job secrets where another user put them; "
                                "remove it, or give the job a secret (PLEXUS_TOKEN_FILE)");
  }
  if ((st.st_mode & 077) != 0) {
    close(dir);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return Status::InvalidUsage(path + " has mode " + mode +
                                ": other users may look into it, so it cannot hold job "
                                "secrets; chmod 700 it (or remove it)");
  }
  *fd = dir;
  return Status::Ok();
}

// Reads an open file that must be ours and private.
Status ReadOpen(int fd, const std::string& shown, std::string* contents) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::System("cannot stat " + shown + ": " + Errno(errno));
  if (!S_ISREG(st.st_mode)) return Status::InvalidUsage(shown + " is not a regular file");
  if (st.st_uid != geteuid()) {
    return Status::InvalidUsage(shown + " belongs to " + OwnerName(st.st_uid) +
                                ", not to this user");
  }
  if ((st.st_mode & 077) != 0) {
    return Status::InvalidUsage(shown + " may be read by other users; remove it");
  }
  if (st.st_size > off_t(kMaxPrivateFileBytes)) {
    return Status::InvalidUsage(shown + " is larger than " + std::to_string(kMaxPrivateFileBytes) +
                                " bytes; remove it");
  }
  std::string text;
  char buf[1024];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::System("cannot read " + shown + ": " + Errno(errno));
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > kMaxPrivateFileBytes) {
      return Status::InvalidUsage(shown + " grew past " + std::to_string(kMaxPrivateFileBytes) +
                                  " bytes while being read");
    }
  }
  *contents = std::move(text);
  return Status::Ok();
}

// Writes contents to a fresh temporary file in dir; *temp is its name.
Status WriteTemp(int dir, const std::string& name, const std::string& contents, std::string* temp) {
  std::string token, error;
  if (!MakeJobToken(&token, &error)) return Status::System(error);
  *temp = "." + name + "." + token.substr(0, 16) + ".part";
  const int fd =
      openat(dir, temp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const std::string shown = PrivateDirPath() + "/" + *temp;
  if (fd < 0) return Status::System("cannot create " + shown + ": " + Errno(errno));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      unlinkat(dir, temp->c_str(), 0);
      return Status::System("cannot write " + shown + ": " + Errno(err));
    }
    done += size_t(n);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlinkat(dir, temp->c_str(), 0);
    return Status::System("cannot write " + shown + ": " + Errno(err));
  }
  return Status::Ok();
}

Status ReadIn(int dir, const std::string& name, std::string* contents, bool* missing) {
  const std::string shown = PrivateDirPath() + "/" + name;
  const int fd = openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (missing != nullptr) *missing = err == ENOENT;
    return Status::InvalidArgument("cannot read " + shown + ": " + Errno(err));
  }
  Status st = ReadOpen(fd, shown, contents);
  close(fd);
  return st;
}

}  // namespace

std::string PrivateDirPath() {
  const char* dir = plexus::settings::Raw(plexus::settings::Id::kRuntimeDir);
  if (dir != nullptr && *dir != '\0') return dir;
  return "/tmp/plexus-" + std::to_string(geteuid());
}

std::string PrivateFileName(const std::string& text) {
  std::string name;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-';
    name.push_back(ok ? c : '_');
  }
  if (name.size() > 200) name.resize(200);
  return name;
}

Status CreateOnce(const std::string& name, std::string* contents, bool* created) {
  if (created != nullptr) *created = false;
  if (!ValidName(name)) return Status::InvalidArgument("bad private file name '" + name + "'");
  int dir = -1;
  Status st = OpenDir(&dir);
  if (!st.ok()) return st;
  std::string temp;
  st = WriteTemp(dir, name, *contents, &temp);
  if (st.ok()) {
    // link() never replaces: the first writer's file stays, whoever races it.
    const bool linked = linkat(dir, temp.c_str(), dir, name.c_str(), 0) == 0;
    const int err = errno;
    unlinkat(dir, temp.c_str(), 0);
    if (linked || err == EEXIST) {
      std::string there;
      st = ReadIn(dir, name, &there, nullptr);
      if (st.ok()) *contents = std::move(there);
      if (st.ok() && created != nullptr) *created = linked;
    } else {
      st = Status::System("cannot create " + PrivateDirPath() + "/" + name + ": " + Errno(err));
    }
  }
  close(dir);
  return st;
}

Status Replace(const std::string& name, const std::string& contents) {
  if (!ValidName(name)) return Status::InvalidArgument("bad private file name '" + name + "'");
  int dir = -1;
  Status st = OpenDir(&dir);
  if (!st.ok()) return st;
  std::string temp;
  st = WriteTemp(dir, name, contents, &temp);
  if (st.ok() && renameat(dir, temp.c_str(), dir, name.c_str()) != 0) {
    const int err = errno;
    unlinkat(dir, temp.c_str(), 0);
    st = Status::System("cannot write " + PrivateDirPath() + "/" + name + ": " + Errno(err));
  }
  close(dir);
  return st;
}

Status ReadPrivate(const std::string& name, std::string* contents, bool* missing) {
  if (missing != nullptr) *missing = false;
  if (!ValidName(name)) return Status::InvalidArgument("bad private file name '" + name + "'");
  int dir = -1;
  Status st = OpenDir(&dir);
  if (!st.ok()) return st;
  st = ReadIn(dir, name, contents, missing);
  close(dir);
  return st;
}

void RemovePrivate(const std::string& name) {
  if (!ValidName(name)) return;
  int dir = -1;
  if (!OpenDir(&dir).ok()) return;
  unlinkat(dir, name.c_str(), 0);
  close(dir);
}

}  // namespace plexus::store
