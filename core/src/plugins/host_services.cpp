#include "host_services.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "plexus/log.hpp"
#include "store/job_token.hpp"
#include "store/store_protocol.hpp"

namespace plexus {

HostServices::HostServices(std::string backend_name, std::string local_address,
                           std::map<std::string, std::string> overrides)
    : backend_name_(std::move(backend_name)),
      local_address_(std::move(local_address)),
      overrides_(std::move(overrides)) {
  table_.struct_size = sizeof(plexus_host_v1);
  table_.abi_major = PLEXUS_ABI_MAJOR;
  table_.abi_minor = PLEXUS_ABI_MINOR;
  table_.ctx = this;
  table_.log = &HostServices::Log;
  table_.get_config = &HostServices::GetConfig;
  table_.oob_allgather = &HostServices::OobAllgather;
  table_.oob_broadcast = &HostServices::OobBroadcast;
  table_.local_address = local_address_.c_str();
}

void HostServices::Log(void* ctx, int32_t level, const char* message) {
  auto* self = static_cast<HostServices*>(ctx);
  if (!self || !message) return;
  // An INFO line is kept only while no warning or error is: a backend that
  // is unusable on this machine (a GPU backend without a GPU) says why at
  // INFO, so that every CPU job does not print it, and the host quotes it
  // when it refuses the backend (LastProblem(PLEXUS_LOG_INFO)).
  {
    std::lock_guard<std::mutex> lock(self->problem_mutex_);
    const bool only_info_so_far =
        self->last_problem_.empty() || self->last_problem_level_ == PLEXUS_LOG_INFO;
    if (level <= PLEXUS_LOG_WARN || (level == PLEXUS_LOG_INFO && only_info_so_far)) {
      self->last_problem_ = message;
      self->last_problem_level_ = level;
    }
  }
  LogLine(level, "backend " + self->backend_name_, message);
}

void HostServices::NoteProblem(const std::string& message) {
  std::lock_guard<std::mutex> lock(problem_mutex_);
  last_problem_ = message;
  last_problem_level_ = PLEXUS_LOG_ERROR;
}

std::string HostServices::LastProblem(int32_t max_level) const {
  std::lock_guard<std::mutex> lock(problem_mutex_);
  return last_problem_level_ <= max_level ? last_problem_ : std::string();
}

int64_t HostServices::GetConfig(void* ctx, const char* key, char* buf, size_t len) {
  const auto* self = static_cast<const HostServices*>(ctx);
  return self ? store::GetConfig(self->overrides_, key, buf, len) : -1;
}

int32_t HostServices::OobAllgather(void* ctx, plexus_oob* oob, const void* in, void* out,
                                   uint64_t bytes_per_rank, int64_t timeout_ms) {
  if (!oob || !oob->store || (bytes_per_rank > 0 && (!in || !out))) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  if (bytes_per_rank > kStoreMaxValueBytes) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    const uint64_t call = oob->calls++;
    // Rank r's part lives under its own "plexus/rank/r/" (store_protocol.hpp):
    // the store takes it from rank r's connection only.
    const std::string base = oob->prefix + "/" + std::to_string(call) + "/ag";
    auto part = [&](uint32_t r) { return store::RankKey(oob->JobRank(r), base); };
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    const auto* src = static_cast<const uint8_t*>(in);
    Status st = oob->store->Set(part(oob->rank), Bytes(src, src + bytes_per_rank), timeout);
    auto* dst = static_cast<uint8_t*>(out);
    // One deadline for the whole exchange, not one timeout per rank.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (uint32_t r = 0; st.ok() && r < oob->size; ++r) {
      Bytes value;
      const auto left = std::max(std::chrono::milliseconds(0),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now()));
      st = oob->store->Get(part(r), &value, left);
      if (st.code() == PLEXUS_ERR_TIMEOUT) {
        // Say which rank, not which key: the key means nothing to a user.
        st = Status(PLEXUS_ERR_TIMEOUT,
                    oob->RankName(r) + " did not take part in out-of-band exchange " +
                        std::to_string(call) + " (" + oob->prefix + ") within " +
                        std::to_string(timeout_ms) +
                        " ms: it failed before it (see its error), stopped, or never got there");
      }
      if (st.ok() && value.size() != bytes_per_rank) {
        st = Status::Remote(oob->RankName(r) + " contributed " + std::to_string(value.size()) +
                            " bytes to an out-of-band allgather " + "of " +
                            std::to_string(bytes_per_rank));
      }
      if (st.ok() && bytes_per_rank)
        std::memcpy(dst + r * bytes_per_rank, value.data(), value.size());
    }
    if (!st.ok()) {
      LogLine(PLEXUS_LOG_ERROR, "oob", "allgather " + base + ": " + st.message());
      if (ctx) static_cast<HostServices*>(ctx)->NoteProblem(st.message());
    }
    return st.code();
  } catch (...) {
    return PLEXUS_ERR_SYSTEM;
  }
}

int32_t HostServices::OobBroadcast(void* ctx, plexus_oob* oob, void* buf, uint64_t bytes,
                                   uint32_t root, int64_t timeout_ms) {
  if (!oob || !oob->store || root >= oob->size || (bytes > 0 && !buf)) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  if (bytes > kStoreMaxValueBytes) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    // The root's, under its own "plexus/rank/<root>/": nobody else may write it.
    const std::string key = store::RankKey(
        oob->JobRank(root), oob->prefix + "/" + std::to_string(oob->calls++) + "/bcast");
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    auto* data = static_cast<uint8_t*>(buf);
    Status st;
    if (oob->rank == root) {
      st = oob->store->Set(key, Bytes(data, data + bytes), timeout);
    } else {
      Bytes value;
      st = oob->store->Get(key, &value, timeout);
      if (st.code() == PLEXUS_ERR_TIMEOUT) {
        st = Status(PLEXUS_ERR_TIMEOUT,
                    oob->RankName(root) + " (the root) did not take part in " +
                        "out-of-band broadcast " + key + " within " + std::to_string(timeout_ms) +
                        " ms: it failed before it (see its error), stopped, or never got there");
      }
      if (st.ok() && value.size() != bytes) {
        st = Status::Remote("out-of-band broadcast size mismatch: root sent " +
                            std::to_string(value.size()) + " bytes, rank " +
                            std::to_string(oob->rank) + " expected " + std::to_string(bytes));
      }
      if (st.ok() && bytes) std::memcpy(data, value.data(), bytes);
    }
    if (!st.ok()) {
      LogLine(PLEXUS_LOG_ERROR, "oob", "broadcast " + key + ": " + st.message());
      if (ctx) static_cast<HostServices*>(ctx)->NoteProblem(st.message());
    }
    return st.code();
  } catch (...) {
    return PLEXUS_ERR_SYSTEM;
  }
}

}  // namespace plexus
