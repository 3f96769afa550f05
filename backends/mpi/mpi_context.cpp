// The process-wide state of the mpi backend (mpi_context.hpp says what).
#include "mpi_context.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace plexus::mpi {

void Log(const plexus_host_v1& host, int32_t level, const std::string& message) {
  if (host.log) host.log(host.ctx, level, message.c_str());
}

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING + 1] = "";
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS || len <= 0) {
    return "MPI error " + std::to_string(code);
  }
  text[std::min(len, MPI_MAX_ERROR_STRING)] = '\0';
  return text;
}

int32_t StatusOfMpiError(int code) {
  int cls = code;
  if (MPI_Error_class(code, &cls) != MPI_SUCCESS) cls = code;
  switch (cls) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ROOT:
    case MPI_ERR_RANK:
    case MPI_ERR_ARG:
    case MPI_ERR_COMM:
      return PLEXUS_ERR_INVALID_ARGUMENT;
    case MPI_ERR_TRUNCATE:  // a peer sent more than was posted: the ranks disagree
      return PLEXUS_ERR_REMOTE;
#if defined(MPIX_ERR_PROC_FAILED)
    case MPIX_ERR_PROC_FAILED:
      return PLEXUS_ERR_REMOTE;
#endif
    case MPI_ERR_INTERN:
      return PLEXUS_ERR_INTERNAL;
    default:
      return PLEXUS_ERR_SYSTEM;
  }
}

namespace {

const char* ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

}  // namespace
}  // namespace plexus::mpi

using plexus::mpi::Log;
using plexus::mpi::MpiErrorText;
using plexus::mpi::MpiLock;

int32_t plexus_backend_ctx::EnsureMpi(std::string* error) {
  if (mpi_ready.load()) return PLEXUS_OK;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    *error =
        "MPI was already finalised in this process and cannot be initialised again (MPI allows "
        "one MPI_Init per process; the mpi backend finalises MPI when it is finalised, so keep "
        "one communicator alive for the whole job)";
    return PLEXUS_ERR_INVALID_USAGE;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int level = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level);
    if (rc != MPI_SUCCESS) {
      *error = "MPI_Init_thread failed: " + MpiErrorText(rc);
      return PLEXUS_ERR_SYSTEM;
    }
    we_initialised = true;
    // Our MPI: report errors as codes instead of aborting the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  } else if (MPI_Query_thread(&level) != MPI_SUCCESS) {
    level = MPI_THREAD_SINGLE;
  }
  provided = level;
  serialize = level < MPI_THREAD_MULTIPLE;
  if (level < MPI_THREAD_SERIALIZED) {
    Log(host, PLEXUS_LOG_WARN,
        std::string("MPI provides only ") + plexus::mpi::ThreadLevelName(level) +
            "; the backend serialises its MPI calls, but this MPI may still require them to "
            "come from the thread that initialised it");
  }
  void* attr = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &found) == MPI_SUCCESS && found &&
      attr) {
    tag_ub = std::max(tag_ub, *static_cast<int*>(attr));
  }
  mpi_ready = true;
  Log(host, PLEXUS_LOG_INFO,
      std::string(we_initialised ? "initialised " : "using the application's ") + library_version +
          " at " + plexus::mpi::ThreadLevelName(level) + ", host memory");
  return PLEXUS_OK;
}

void plexus_backend_ctx::Abandon(plexus::mpi::Abandoned a) {
  std::lock_guard<std::mutex> lock(abandoned_mutex_);
  abandoned_.push_back(std::move(a));
}

size_t plexus_backend_ctx::ReapAbandoned() {
  std::lock_guard<std::mutex> lock(abandoned_mutex_);
  return ReapLocked();
}

void plexus_backend_ctx::ReleaseComm(MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(abandoned_mutex_);
  released_.push_back(comm);
}

size_t plexus_backend_ctx::ReapLocked() {
  if (abandoned_.empty() && released_.empty()) return 0;
  MpiLock mpi_lock(*this);
  std::erase_if(abandoned_, [&](plexus::mpi::Abandoned& a) {
    bool done = true;
    for (MPI_Request& r : a.requests) {
      if (r == MPI_REQUEST_NULL) continue;
      int flag = 0;
      if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        // Failed is finished, as far as our memory is concerned.
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
        r = MPI_REQUEST_NULL;
        continue;
      }
      if (!flag) done = false;
    }
    return done;
  });
  return abandoned_.size();
}

void plexus_backend_ctx::FreeRetired() {
  std::lock_guard<std::mutex> lock(abandoned_mutex_);
  MpiLock mpi_lock(*this);
  for (MPI_Comm& comm : released_) MPI_Comm_free(&comm);
  released_.clear();
}

int32_t plexus_backend_ctx::WaitRequest(MPI_Comm on, MPI_Request req, int64_t timeout_ms,
                                        const std::atomic<bool>* aborted,
                                        std::unique_ptr<uint8_t[]>* keep, int* mpi_rc) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    {
      MpiLock mpi_lock(*this);
      *mpi_rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
    if (*mpi_rc != MPI_SUCCESS) return plexus::mpi::StatusOfMpiError(*mpi_rc);
    if (done) return PLEXUS_OK;
    const bool abort = aborted && aborted->load();
    if (abort || std::chrono::steady_clock::now() >= deadline) {
      plexus::mpi::Abandoned a;
      a.comm = on;
      a.requests.push_back(req);
      if (keep) a.memory.push_back(std::move(*keep));
      Abandon(std::move(a));
      return abort ? PLEXUS_ERR_ABORTED : PLEXUS_ERR_TIMEOUT;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}
