#include "operation.hpp"

#include <cstring>

#include "data.hpp"
#include "plexus/abi/call.hpp"
#include "plugin.hpp"
#include "session.hpp"

namespace plexus::conformance {

Operation::~Operation() {
  if (abandon_) {
    for (Buffer& b : buffers_) conformance::Abandon(std::move(b));
  } else if (!keep_.empty()) {
    const bool cap_abort = ctx_.plugin().caps().flags & PLEXUS_CAP_ABORT;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      if (cap_abort) {
        conformance::Watch(std::move(buffers_[i]), names_[i] + " of " + keep_);
      } else {
        conformance::Abandon(std::move(buffers_[i]));
      }
    }
  }
}

size_t Operation::ElementBytes() const {
  const size_t w = ElementSize(dtype_);
  return w ? w : 1;
}

size_t Operation::AddBuffer(uint64_t elements, const std::string& name) {
  buffers_.emplace_back(elements * ElementBytes());
  names_.push_back(name);
  return buffers_.size() - 1;
}

void Operation::ExpectResult(size_t buffer, uint64_t first, uint64_t count,
                             std::vector<uint8_t> want, const std::string& what) {
  regions_.push_back({buffer, first, count, std::move(want), true, what});
}

void Operation::ExpectUntouched(size_t buffer, uint64_t first, uint64_t count,
                                const std::string& what) {
  const uint8_t* p = element(buffer, first);
  regions_.push_back(
      {buffer, first, count, std::vector<uint8_t>(p, p + count * ElementBytes()), false, what});
}

bool Operation::Posted(const std::string& what, int32_t rc, plexus_request** req_out) {
  // Read only now, after the post: callers write Posted(.., t.x(.., &req), &req).
  plexus_request* req = *req_out;
  Plugin& plugin = ctx_.plugin();
  if (rc == PLEXUS_OK && req) {
    requests_.push_back(req);
    request_names_.push_back(what);
    return true;
  }
  if (rc == PLEXUS_OK) {
    post_problems_.push_back(what + " returned OK but left *req_out NULL");
  } else {
    const std::string err = plugin.LastError(comm_);
    std::string p = what + " failed to post: " + StatusText(rc) + ": " +
                    (err.empty() ? "(and comm_last_error is empty)" : err);
    if (req) p += " (and left *req_out non-NULL)";
    if (rc > 0) p += " (a positive status from a post is never allowed)";
    post_problems_.push_back(p);
  }
  return false;
}

plexus_request* Operation::PostAllreduce(plexus_reduce_op_t rop, uint64_t count, uint64_t salt) {
  const size_t s = AddBuffer(count, "sendbuf");
  const size_t r = AddBuffer(count, "recvbuf");
  FillReduceInput(dtype_, rop, ctx_.rank, ctx_.size, salt, 0, count, data(s));
  std::vector<uint8_t> want(count * ElementBytes());
  FillReduceResult(dtype_, rop, ctx_.size, salt, 0, count, want.data());
  ExpectUntouched(s, 0, count, "sendbuf");
  ExpectResult(r, 0, count, std::move(want), "recvbuf");
  plexus_request* req = nullptr;
  const int32_t rc = ctx_.calls().post(
      comm_, abi::Call{PLEXUS_COLL_ALLREDUCE, data(s), data(r), count, dtype_, rop, 0, nullptr},
      &req);
  return Posted("allreduce", rc, &req) ? req : nullptr;
}

bool Operation::Finish(Findings* findings, bool* broken) {
  Plugin& plugin = ctx_.plugin();
  bool all_ok = post_problems_.empty();
  for (const std::string& p : post_problems_) findings->Add(p);
  if (!post_problems_.empty()) *broken = true;  // the other ranks may have posted

  const auto deadline = Clock::now() + std::chrono::milliseconds(ctx_.op_bound_ms());
  std::vector<Completion> done(requests_.size());
  bool hung = false;
  for (size_t i = 0; i < requests_.size(); ++i) {
    done[i] = WaitUntil(plugin, requests_[i], deadline);
    if (!done[i].done) hung = true;
  }
  if (hung) {
    *broken = true;
    all_ok = false;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (done[i].done) {
        plugin.calls().request_free(requests_[i]);
        continue;
      }
      findings->Add(request_names_[i] + " did not complete within " +
                    std::to_string(ctx_.op_bound_ms()) + " ms (timeout_ms " +
                    std::to_string(ctx_.options.timeout_ms) + " + 5 s)");
      if (!AbortAndReap(plugin, comm_, requests_[i])) {
        findings->Add(request_names_[i] + " was still pending 5 s after comm_abort");
        abandon_ = true;
        if (comm_ == ctx_.comm()) ctx_.session.MarkMainLeaked();
      } else {
        KeepAfterFailure("an aborted " + request_names_[i]);
      }
    }
    return false;
  }
  for (size_t i = 0; i < requests_.size(); ++i) {
    const Completion& c = done[i];
    findings->Add(c.violation);
    if (c.status != PLEXUS_OK) {
      all_ok = false;
      *broken = true;
      KeepAfterFailure(request_names_[i] + " that failed with " + StatusText(c.status));
      findings->Add(request_names_[i] + " completed with " +
                    FailureText(plugin, comm_, requests_[i], c.status));
    }
    findings->Add(CheckAndFree(plugin, requests_[i], c.status));
  }
  requests_.clear();
  // The ABI allows garbage in a failed operation's recvbuf, so the regions
  // are only compared after success; guards must hold either way.
  for (size_t b = 0; b < buffers_.size(); ++b) findings->Add(buffers_[b].CheckGuards(names_[b]));
  if (!all_ok) return false;
  for (const Region& r : regions_) {
    const uint8_t* got = element(r.buffer, r.first);
    const std::string diff = r.result ? CompareElements(dtype_, got, r.want.data(), r.count)
                                      : CompareBytes(got, r.want.data(), r.count * ElementBytes());
    if (!diff.empty()) {
      findings->Add(r.what + (r.result ? ": " : " was modified: ") + diff);
      all_ok = false;
    }
  }
  return all_ok;
}

}  // namespace plexus::conformance
