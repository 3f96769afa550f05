#include "exchange.hpp"

#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

// An outcome on the wire: verdict, broken flag, tag length, tag, detail.
Bytes Encode(const Outcome& o) {
  Bytes b;
  b.push_back(uint8_t(o.verdict));
  b.push_back(o.comm_broken ? 1 : 0);
  const std::string tag = o.tag.substr(0, 255);
  b.push_back(uint8_t(tag.size()));
  b.insert(b.end(), tag.begin(), tag.end());
  // A detail is a line of the report: keep it bounded.
  const std::string detail = o.detail.substr(0, 4000);
  b.insert(b.end(), detail.begin(), detail.end());
  return b;
}

bool Decode(const Bytes& b, Outcome* o) {
  if (b.size() < 3 || size_t(3 + b[2]) > b.size()) return false;
  const char v = char(b[0]);
  if (v != char(Verdict::kPass) && v != char(Verdict::kFail) && v != char(Verdict::kSkip)) {
    return false;
  }
  o->verdict = Verdict(v);
  o->comm_broken = b[1] != 0;
  o->tag.assign(b.begin() + 3, b.begin() + 3 + b[2]);
  o->detail.assign(b.begin() + 3 + b[2], b.end());
  return true;
}

}  // namespace

Exchange::Exchange(RendezvousStore* store, uint32_t rank, uint32_t size,
                   std::chrono::milliseconds timeout)
    : store_(store), rank_(rank), size_(size), timeout_(timeout) {}

Status Exchange::Publish(uint64_t seq, const Outcome& mine) {
  SetPhase("rendezvous store: publishing a result");
  return store_->Set(Key("result/" + std::to_string(seq) + "/" + std::to_string(rank_)),
                     Encode(mine), timeout_);
}

Status Exchange::Report(uint64_t seq, const Outcome& mine, std::vector<Outcome>* all, bool* renew,
                        bool* stop, bool stop_on_failure, const Gathered& gathered) {
  SetPhase("rendezvous store: gathering results");
  Status st = Publish(seq, mine);
  if (!st.ok()) return st;
  const std::string verdict_key = Key("verdict/" + std::to_string(seq));
  Bytes verdict(2, 0);
  if (rank_ == 0) {
    all->assign(size_, Outcome{});
    for (uint32_t r = 0; r < size_; ++r) {
      if (const auto g = gone_after_.find(r); g != gone_after_.end() && seq > g->second) {
        (*all)[r] = Outcome::Skip("exited on purpose in an earlier check");
        continue;
      }
      Bytes value;
      st = store_->Get(Key("result/" + std::to_string(seq) + "/" + std::to_string(r)), &value,
                       timeout_);
      Outcome& o = (*all)[r];
      if (!st.ok()) {
        o = Outcome::Fail("did not report a result within " +
                          std::to_string(timeout_.count() / 1000) + " s (" + st.message() + ")");
        verdict[1] = 1;  // the ranks are out of step: stop
      } else if (!Decode(value, &o)) {
        o = Outcome::Fail("sent a malformed result");
      }
      if (o.comm_broken) verdict[0] = 1;
      if (stop_on_failure && o.verdict == Verdict::kFail) verdict[1] = 1;
    }
    if (gathered) gathered(*all, verdict[1] != 0);
    SetPhase("rendezvous store: publishing the verdict");
    st = store_->Set(verdict_key, verdict, timeout_);
    if (!st.ok()) return st;
  } else {
    st = store_->Get(verdict_key, &verdict, timeout_);
    if (!st.ok()) return st;
    if (verdict.size() != 2)
      return Status::Internal("malformed verdict of check " + std::to_string(seq));
  }
  *renew = verdict[0] != 0;
  *stop = verdict[1] != 0;
  return Status::Ok();
}

void Exchange::MarkGone(uint32_t rank, uint64_t seq) {
  gone_after_[rank] = seq;
}

Status Exchange::AwaitPublished(uint64_t seq, uint32_t rank, std::chrono::milliseconds timeout) {
  SetPhase("rendezvous store: waiting for a result");
  return store_->Wait({Key("result/" + std::to_string(seq) + "/" + std::to_string(rank))}, timeout);
}

Status Exchange::Arrive(const std::string& name) {
  SetPhase("rendezvous store: arriving");
  return store_->Set(Key("arrive/" + name + "/" + std::to_string(rank_)), Bytes{1}, timeout_);
}

Status Exchange::AwaitArrivals(const std::string& name, const std::vector<uint32_t>& ranks,
                               std::chrono::milliseconds timeout) {
  SetPhase("rendezvous store: waiting for other ranks");
  std::vector<std::string> keys;
  for (uint32_t r : ranks) keys.push_back(Key("arrive/" + name + "/" + std::to_string(r)));
  return store_->Wait(keys, timeout);
}

Status Exchange::Barrier(const std::string& name) {
  SetPhase("rendezvous store: barrier");
  Status st = Arrive("barrier/" + name);
  if (!st.ok()) return st;
  std::vector<uint32_t> all;
  for (uint32_t r = 0; r < size_; ++r) all.push_back(r);
  return AwaitArrivals("barrier/" + name, all, timeout_);
}

Status Exchange::Raise(const std::string& name) {
  SetPhase("rendezvous store: raising a flag");
  int64_t value = 0;
  return store_->Add(Key("flag/" + name), 1, &value, timeout_);
}

Status Exchange::IsRaised(const std::string& name, bool* raised) {
  SetPhase("rendezvous store: reading a flag");
  int64_t value = 0;
  Status st = store_->Add(Key("flag/" + name), 0, &value, timeout_);
  *raised = st.ok() && value > 0;
  return st;
}

Status Exchange::Set(const std::string& key, const std::string& value) {
  SetPhase("rendezvous store: set");
  return store_->Set(Key(key), Bytes(value.begin(), value.end()), timeout_);
}

Status Exchange::Get(const std::string& key, std::string* value,
                     std::chrono::milliseconds timeout) {
  SetPhase("rendezvous store: get");
  Bytes b;
  Status st = store_->Get(Key(key), &b, timeout);
  if (st.ok()) value->assign(b.begin(), b.end());
  return st;
}

}  // namespace plexus::conformance
