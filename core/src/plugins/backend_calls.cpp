#include "backend_calls.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "plexus/abi/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/log.hpp"

namespace plexus {
namespace {

const char* MemoryName(const plexus_placement* where) {
  if (!where || where->memory_type == PLEXUS_MEMORY_HOST) return "host memory";
  if (where->memory_type == PLEXUS_MEMORY_CUDA) return "CUDA memory";
  return "unknown memory type";
}

bool Tracing() {
  return LogEnabled(PLEXUS_LOG_TRACE);
}

std::string Ptr(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

std::string Where(const plexus_placement* where) {
  if (!where) return "host";
  return std::string(MemoryName(where)) + "/dev " + std::to_string(where->device) + "/stream " +
         Ptr(where->stream);
}

// "allreduce(comm=0x.., send=0x.., ...)" for the trace.
std::string Args(const char* call, const std::vector<std::pair<const char*, std::string>>& kv) {
  std::string s = std::string(call) + "(";
  bool first = true;
  for (const auto& [k, v] : kv) {
    if (!first) s += ", ";
    s += std::string(k) + "=" + v;
    first = false;
  }
  return s + ")";
}

}  // namespace

std::string PrintableText(const char* text, size_t max_chars) {
  if (!text) return "(null)";
  std::string out;
  size_t i = 0;
  for (; text[i] && i < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else {
      out += char(c);
    }
  }
  if (text[i]) out += "...";
  return out;
}

void Backend::ComplainOnce(const std::string& what) {
  if (!complained_.exchange(true)) {
    LogLine(PLEXUS_LOG_WARN, "plexus",
            "backend '" + name_ + "' (" + path() + ") broke the ABI: " + what +
                " (reported once; plexus-conformance checks this)");
  }
}

Status Backend::Open(std::unique_ptr<LoadedLibrary> lib, std::unique_ptr<HostServices> host,
                     std::shared_ptr<Backend>* out) {
  std::shared_ptr<Backend> b(new Backend);
  b->lib_ = std::move(lib);
  b->host_ = std::move(host);
  b->t_ = &b->lib_->table();
  b->name_ = PrintableText(b->t_->name);
  b->version_ = PrintableText(b->t_->version);
  const std::string who = "backend '" + b->name_ + "' (" + b->path() + ")";
  int32_t rc = b->t_->init(b->host_->table(), &b->ctx_);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, b->name_, "init() -> " + StatusName(rc) + ", ctx=" + Ptr(b->ctx_));
  }
  if (rc != PLEXUS_OK || !b->ctx_) {
    b->ctx_ = nullptr;  // nothing to finalize: init failed
    const std::string why = b->host_->LastProblem(PLEXUS_LOG_INFO);
    if (rc == PLEXUS_OK) {
      return Status::Internal(who + ": init returned PLEXUS_OK but no context (a backend bug)");
    }
    return Status(
        rc < 0 ? rc : PLEXUS_ERR_INTERNAL,
        who + " failed to initialise: " + StatusName(rc) + (why.empty() ? "" : ": " + why));
  }
  b->caps_.struct_size = sizeof(plexus_capabilities);
  rc = b->t_->get_capabilities(b->ctx_, &b->caps_);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, b->name_,
            "get_capabilities() -> " + StatusName(rc) +
                ", collectives=" + std::to_string(b->caps_.collectives) + " dtypes=" +
                std::to_string(b->caps_.dtypes) + " flags=" + std::to_string(b->caps_.flags));
  }
  if (rc != PLEXUS_OK) {
    return Status(rc < 0 ? rc : PLEXUS_ERR_INTERNAL,
                  who + " could not report its capabilities: " + StatusName(rc));
  }
  // A backend that can move no memory type in this process (a GPU backend
  // without a GPU) is unusable here: said once, with init's reason, so that
  // plexus-info shows why and automatic selection passes over it.
  if (b->caps_.memory_types == 0) {
    const std::string why = b->host_->LastProblem(PLEXUS_LOG_INFO);
    return Status::Unsupported(who +
                               " is unusable in this process: it supports no memory type here" +
                               (why.empty() ? "" : " (" + why + ")"));
  }
  // Bits of collectives newer than the plugin's minor mean nothing (a 1.1
  // backend may have set them by mistake); they are dropped, not believed.
  uint32_t known = 0;
  abi::ForEachCollective([&](auto c) {
    if (c.kMinor <= b->t_->abi_minor) known |= 1u << c.kCode;
  });
  b->caps_.collectives &= known;
  for (plexus_collective_t c = 0; c < abi::kCollectiveCount; ++c) {
    if ((b->caps_.collectives >> c & 1u) && !abi::SlotOf(*b->t_, c)) {
      return Status::Internal(who + " claims " + algos::CollectiveName(c) +
                              " in its capabilities but its slot is NULL (a backend bug)");
    }
  }
  *out = std::move(b);
  return Status::Ok();
}

Backend::~Backend() {
  if (ctx_) {
    if (Tracing()) LogLine(PLEXUS_LOG_TRACE, name_, "finalize(ctx=" + Ptr(ctx_) + ")");
    t_->finalize(ctx_);
  }
}

Status Backend::CreateComm(const plexus_comm_config_v1& config, plexus_comm** comm) {
  char reason[1024] = "";
  *comm = nullptr;
  const int32_t rc = t_->comm_create(ctx_, &config, comm, reason, sizeof reason);
  reason[sizeof reason - 1] = '\0';
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_,
            Args("comm_create", {{"name", config.name},
                                 {"rank", std::to_string(config.rank)},
                                 {"size", std::to_string(config.size)},
                                 {"timeout_ms", std::to_string(config.timeout_ms)}}) +
                " -> " + StatusName(rc) + ", comm=" + Ptr(*comm));
  }
  if (rc == PLEXUS_OK && *comm) return Status::Ok();
  if (rc == PLEXUS_OK) {
    return Status::Internal(
        "backend '" + name_ +
        "': comm_create returned PLEXUS_OK but no communicator (a backend bug)");
  }
  if (*comm) ComplainOnce("comm_create failed but set *comm_out");
  *comm = nullptr;
  std::string text =
      reason[0] ? PrintableText(reason, sizeof reason)
                : "comm_create failed: " + StatusName(rc) + " (the backend gave no message)";
  // Errors only: comm_create has its own reason, and a warning logged on the
  // way ("PLEXUS_TOKEN is not set") was once shown as a timeout's cause.
  const std::string host_side = host_->LastProblem(PLEXUS_LOG_ERROR);
  if (!host_side.empty() && text.find(host_side) == std::string::npos) {
    text += " (" + host_side + ")";
  }
  if (rc > 0) ComplainOnce("comm_create returned the positive status " + std::to_string(rc));
  return Status(rc > 0 ? PLEXUS_ERR_INTERNAL : rc, text);
}

void Backend::DestroyComm(plexus_comm* comm) {
  if (!comm) return;
  if (Tracing()) LogLine(PLEXUS_LOG_TRACE, name_, "comm_destroy(comm=" + Ptr(comm) + ")");
  t_->comm_destroy(comm);
}

Status Backend::AbortComm(plexus_comm* comm) {
  const int32_t rc = t_->comm_abort(comm);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_, "comm_abort(comm=" + Ptr(comm) + ") -> " + StatusName(rc));
  }
  if (rc > 0) ComplainOnce("comm_abort returned the positive status " + std::to_string(rc));
  return Describe(comm, rc > 0 ? PLEXUS_ERR_INTERNAL : rc, "abort");
}

int32_t Backend::Test(plexus_request* req) {
  int32_t rc = t_->test(req);
  if (Tracing())
    LogLine(PLEXUS_LOG_TRACE, name_, "test(req=" + Ptr(req) + ") -> " + StatusName(rc));
  if (rc > 0 && rc != PLEXUS_IN_PROGRESS) {
    ComplainOnce("test returned the positive status " + std::to_string(rc) +
                 " (taken as PLEXUS_IN_PROGRESS)");
    rc = PLEXUS_IN_PROGRESS;
  }
  return rc;
}

int32_t Backend::Wait(plexus_request* req, int64_t timeout_ms) {
  int32_t rc = t_->wait(req, timeout_ms);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_,
            "wait(req=" + Ptr(req) + ", timeout_ms=" + std::to_string(timeout_ms) + ") -> " +
                StatusName(rc));
  }
  if (rc > 0) {
    // Still pending, whatever the backend meant: never final.
    ComplainOnce("wait(timeout_ms=" + std::to_string(timeout_ms) + ") returned the positive " +
                 "status " + std::to_string(rc) + " instead of PLEXUS_ERR_TIMEOUT");
    rc = PLEXUS_ERR_TIMEOUT;
  }
  return rc;
}

bool Backend::HasNotify() const {
  return lib_->table().abi_minor >= 5 && t_->request_notify;
}

int32_t Backend::Notify(plexus_request* req, void (*done)(void* arg, int32_t status), void* arg) {
  if (!HasNotify()) return PLEXUS_ERR_UNSUPPORTED;
  const int32_t rc = t_->request_notify(req, done, arg);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_, "request_notify(req=" + Ptr(req) + ") -> " + StatusName(rc));
  }
  return rc;
}

int32_t Backend::FreeRequest(plexus_request* req) {
  const int32_t rc = t_->request_free(req);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_, "request_free(req=" + Ptr(req) + ") -> " + StatusName(rc));
  }
  return rc;
}

Status Backend::Describe(plexus_comm* comm, int32_t code, const std::string& what,
                         plexus_request* req) {
  if (code == PLEXUS_OK) return Status::Ok();
  char buf[2048] = "";
  if (req && lib_->table().abi_minor >= 1 && t_->request_error) {
    t_->request_error(req, buf, sizeof buf);
  }
  if (!buf[0] && comm) t_->comm_last_error(comm, buf, sizeof buf);
  buf[sizeof buf - 1] = '\0';
  const std::string text =
      buf[0] ? PrintableText(buf, sizeof buf) : StatusName(code) + " (the backend gave no message)";
  return Status(code, what + ": " + text);
}

Status Backend::CheckSupported(plexus_collective_t coll, plexus_dtype_t dtype,
                               plexus_reduce_op_t op, const plexus_placement* where) const {
  const uint32_t mem = where ? where->memory_type : PLEXUS_MEMORY_HOST;
  auto refuse = [&](const std::string& why) {
    std::string what = "backend '" + name_ + "' does not support " + algos::CollectiveName(coll);
    if (dtype) what += std::string(" on ") + algos::DtypeName(dtype);
    if (op) what += std::string(" with ") + algos::ReduceOpName(op);
    what += std::string(" in ") + MemoryName(where);
    return Status::Unsupported(what + " (" + why + ")");
  };
  if (coll >= abi::kCollectiveCount) {
    return Status::InvalidArgument("unknown collective code " + std::to_string(coll));
  }
  if (!(caps_.collectives >> coll & 1u) || !abi::SlotOf(*t_, coll)) {
    if (abi::MinorOf(coll) > t_->abi_minor) {
      return refuse("the backend is built for ABI 1." + std::to_string(t_->abi_minor) + "; " +
                    algos::CollectiveName(coll) + " came in 1." +
                    std::to_string(abi::MinorOf(coll)));
    }
    return refuse("collective not implemented");
  }
  if (mem >= 32 || !(caps_.memory_types >> mem & 1u)) return refuse("memory type");
  if (dtype) {
    if (algos::DtypeSize(dtype) == 0) {
      return Status::InvalidArgument("unknown dtype code " + std::to_string(dtype));
    }
    if (op) {
      if (op > PLEXUS_OP_MAX_V1 || op == 0) {
        return Status::InvalidArgument("unknown reduce op code " + std::to_string(op));
      }
      if (!(caps_.reduce_dtypes[op] >> dtype & 1u)) return refuse("dtype x op");
    } else if (!(caps_.dtypes >> dtype & 1u)) {
      return refuse("dtype");
    }
  }
  return Status::Ok();
}

// The result of a post: a negative status with the backend's reason, or
// success with a request. Anything else breaks the request protocol and is
// an internal error of the backend, never a success.
Status Backend::Posted(plexus_comm* comm, int32_t code, plexus_collective_t coll,
                       plexus_request** req) {
  if (code == PLEXUS_OK && *req) return Status::Ok();  // (no strings built on the fast path)
  const std::string what = std::string(algos::CollectiveName(coll)) + " on " + name_;
  if (code == PLEXUS_OK) {
    return Status::Internal(what +
                            ": the backend returned PLEXUS_OK but no request (a backend bug)");
  }
  if (*req) {
    ComplainOnce(std::string(algos::CollectiveName(coll)) + " failed but set *req_out");
    *req = nullptr;  // "nothing posted": the host must not touch it
  }
  if (code > 0) {
    ComplainOnce(std::string(algos::CollectiveName(coll)) + " returned the positive status " +
                 std::to_string(code));
    return Status::Internal(what + ": the backend returned the positive status " +
                            std::to_string(code) + " from a post, which the ABI does not allow");
  }
  return Describe(comm, code, what);
}

namespace {

// "allreduce(comm=0x.., send=0x.., recv=0x.., count=8, dtype=float32,
// op=sum, where=host)": the call as the trace shows it.
std::string TraceText(plexus_comm* comm, const abi::Call& c) {
  const abi::Traits t = abi::TraitsOf(c.coll);
  std::vector<std::pair<const char*, std::string>> kv = {{"comm", Ptr(comm)}};
  if (t.layout == abi::Layout::kBufferList) {
    kv.push_back({"nbuffers", std::to_string(c.nbuffers)});
  } else if (t.typed) {
    if (t.needs_send || t.layout == abi::Layout::kPerRankCounts) kv.push_back({"send", Ptr(c.sendbuf)});
    if (t.needs_recv || t.layout == abi::Layout::kPerRankCounts) kv.push_back({"recv", Ptr(c.recvbuf)});
    if (c.coll != PLEXUS_COLL_ALLTOALLV) kv.push_back({"count", std::to_string(c.count)});
  }
  if (t.typed) kv.push_back({"dtype", algos::DtypeName(c.dtype)});
  if (t.reduces) kv.push_back({"op", algos::ReduceOpName(c.op)});
  if (t.root == abi::Root::kRoot) kv.push_back({"root", std::to_string(c.root)});
  if (t.root == abi::Root::kPeer) kv.push_back({"peer", std::to_string(c.root)});
  if (t.typed) kv.push_back({"where", Where(c.placement)});
  return Args(abi::CollectiveName(c.coll), kv);
}

}  // namespace

Status Backend::Post(plexus_comm* comm, const abi::Call& call, plexus_request** req) {
  *req = nullptr;
  // (A Call's dtype is 0 for barrier, its op 0 but for the reductions.)
  Status st = CheckSupported(call.coll, call.dtype, call.op, call.placement);
  if (!st.ok()) return st;
  const int32_t rc = abi::Invoke(*t_, comm, call, req);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_,
            TraceText(comm, call) + " -> " + StatusName(rc) + ", req=" + Ptr(*req));
  }
  return Posted(comm, rc, call.coll, req);
}

Status Backend::SplitComm(plexus_comm* parent, uint32_t color, uint32_t key,
                          const plexus_comm_config_v1* config, plexus_comm** comm) {
  char reason[1024] = "";
  *comm = nullptr;
  if (!t_->comm_split) return Status::Unsupported("backend '" + name_ + "' has no comm_split");
  const int32_t rc = t_->comm_split(parent, color, key, config, comm, reason, sizeof reason);
  reason[sizeof reason - 1] = '\0';
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_,
            Args("comm_split", {{"parent", Ptr(parent)},
                                {"color", std::to_string(color)},
                                {"key", std::to_string(key)},
                                {"name", config ? config->name : "(none)"}}) +
                " -> " + StatusName(rc) + ", comm=" + Ptr(*comm));
  }
  const bool joins = config != nullptr;
  if (rc == PLEXUS_OK && (*comm != nullptr) == joins) return Status::Ok();
  if (rc == PLEXUS_OK) {
    if (*comm) DestroyComm(std::exchange(*comm, nullptr));
    return Status::Internal("backend '" + name_ + "': comm_split returned PLEXUS_OK " +
                            (joins ? "but no communicator" : "and a communicator for no color") +
                            " (a backend bug)");
  }
  if (*comm) ComplainOnce("comm_split failed but set *comm_out");
  *comm = nullptr;
  const std::string text =
      reason[0] ? PrintableText(reason, sizeof reason)
                : "comm_split failed: " + StatusName(rc) + " (the backend gave no message)";
  if (rc > 0) ComplainOnce("comm_split returned the positive status " + std::to_string(rc));
  return Status(rc > 0 ? PLEXUS_ERR_INTERNAL : rc, text);
}

bool Backend::HasMemAlloc() const {
  return lib_->table().abi_minor >= 3 && t_->mem_alloc && t_->mem_free;
}

Status Backend::MemAlloc(plexus_comm* comm, uint64_t bytes, void** p) {
  if (!HasMemAlloc()) return Status::Unsupported("backend '" + name_ + "' has no mem_alloc");
  void* got = nullptr;
  const int32_t rc = t_->mem_alloc(comm, bytes, &got);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_,
            Args("mem_alloc", {{"comm", Ptr(comm)}, {"bytes", std::to_string(bytes)}}) + " -> " +
                StatusName(rc) + ", ptr=" + Ptr(got));
  }
  if (rc == PLEXUS_OK && got) {
    *p = got;
    return Status::Ok();
  }
  if (rc == PLEXUS_OK)
    return Status::Internal("backend '" + name_ +
                            "': mem_alloc returned PLEXUS_OK and no memory (a backend bug)");
  if (rc > 0) ComplainOnce("mem_alloc returned the positive status " + std::to_string(rc));
  return Describe(comm, rc > 0 ? PLEXUS_ERR_INTERNAL : rc,
                  "mem_alloc(" + std::to_string(bytes) + ")", nullptr);
}

Status Backend::MemFree(plexus_comm* comm, void* p) {
  if (!HasMemAlloc()) return Status::Unsupported("backend '" + name_ + "' has no mem_free");
  const int32_t rc = t_->mem_free(comm, p);
  if (Tracing()) {
    LogLine(PLEXUS_LOG_TRACE, name_,
            Args("mem_free", {{"comm", Ptr(comm)}, {"ptr", Ptr(p)}}) + " -> " + StatusName(rc));
  }
  if (rc == PLEXUS_OK) return Status::Ok();
  return Describe(comm, rc > 0 ? PLEXUS_ERR_INTERNAL : rc, "mem_free", nullptr);
}


namespace {

// In the child: only async-signal-safe-ish work (no host logging: a lock of
// the parent's logger may have been held at fork time). Writes "stage:NAME\n"
// before each step and "ok\n" or "error:TEXT\n" at the end.
[[noreturn]] void RunProbeChild(const std::string& path, int fd) {
  // The application's crash handlers (a test framework's, a crash
  // reporter's) must not catch the plugin's crash in here: the parent tells
  // it by the child's death.
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS}) signal(sig, SIG_DFL);
  auto say = [fd](const std::string& line) {
    const std::string text = line + "\n";
    ssize_t off = 0;
    while (off < ssize_t(text.size())) {
      const ssize_t n = write(fd, text.data() + off, text.size() - size_t(off));
      if (n <= 0) break;
      off += n;
    }
  };
  say("stage:entry function");
  std::unique_ptr<LoadedLibrary> lib;
  Status st = LoadBackendLibrary(path, &lib);
  if (!st.ok()) {
    say("error:" + st.message());
    _exit(0);
  }
  plexus_host_v1 host{};  // no logger: the backend must stay silent
  host.struct_size = sizeof host;
  host.abi_major = PLEXUS_ABI_MAJOR;
  host.abi_minor = PLEXUS_ABI_MINOR;
  host.local_address = "";
  const plexus_backend_v1& t = lib->table();
  say("stage:init");
  plexus_backend_ctx* ctx = nullptr;
  const int32_t rc = t.init(&host, &ctx);
  if (rc != PLEXUS_OK || !ctx) {
    say("ok");  // a clean refusal is for the in-process load to explain
    _exit(0);
  }
  say("stage:get_capabilities");
  plexus_capabilities caps{};
  caps.struct_size = sizeof caps;
  (void)t.get_capabilities(ctx, &caps);
  say("stage:finalize");
  t.finalize(ctx);
  say("ok");
  _exit(0);
}

}  // namespace

Status ProbeInChild(const std::string& path, std::chrono::milliseconds timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Ok();  // cannot probe: load in-process as before
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Status::Ok();
  }
  if (pid == 0) {
    close(fds[0]);
    RunProbeChild(path, fds[1]);
  }
  close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool hung = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      hung = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[512];
    const ssize_t got = read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // the child closed the pipe: it exited (or crashed)
    out.append(buf, size_t(got));
  }
  close(fds[0]);
  if (hung) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string stage = "loading";
  for (size_t pos = 0; (pos = out.find("stage:", pos)) != std::string::npos; pos += 6) {
    stage = out.substr(pos + 6, out.find('\n', pos) - pos - 6);
  }
  if (hung) {
    return Status::Timeout("plugin " + path + " hung in its " + stage + " (no answer within " +
                           std::to_string(timeout.count()) + " ms; probed in a child process)");
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return Status::Internal("plugin " + path + " crashed with SIG" + (name ? name : "?") + " (" +
                            strsignal(sig) + ") in its " + stage +
                            " (probed in a child process; not loaded)");
  }
  if (out.find("\nok\n") == std::string::npos && out.rfind("ok\n", 0) != 0) {
    if (const size_t e = out.find("error:"); e != std::string::npos) {
      return Status::InvalidArgument(out.substr(e + 6, out.find('\n', e) - e - 6));
    }
    return Status::Internal("plugin " + path + " ended the probe process in its " + stage +
                            " (exit status " + std::to_string(WEXITSTATUS(status)) +
                            "; probed in a child process)");
  }
  return Status::Ok();
}

}  // namespace plexus
