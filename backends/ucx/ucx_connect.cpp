// Setting up a communicator's worker and endpoints (UcxTransport::Connect).
//
// Every rank publishes its worker address through the host's out-of-band
// allgather (addresses differ in length, so first the lengths, then the
// addresses padded to the longest), creates an endpoint to every other rank
// and then sends each a hello and waits for each one's hello. The hellos
// make UCX wire the endpoints up now rather than inside the first collective,
// prove that every peer is reachable before comm_create returns, and let the
// backend log which transports it got.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "plexus/kit/local_process.hpp"
#include "ucx_tag.hpp"
#include "ucx_transport.hpp"

namespace plexus::ucx {
namespace {

std::string StatusText(const char* what, ucs_status_t s) {
  return std::string(what) + ": " + ucs_status_string(s);
}

// "posix/memory cma/memory" from ucp_ep_print_info's lane lines
// ("#   lane[0]:  8:posix/memory.0 md[4] ..."): each transport/device once.
std::string LaneTransports(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return "";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string out;
  std::set<std::string> seen;
  const std::string all(text ? text : "", len);
  std::free(text);
  size_t at = 0;
  while ((at = all.find("lane[", at)) != std::string::npos) {
    const size_t colon = all.find(':', at);
    const size_t eol = all.find('\n', at);
    at = eol;
    if (colon == std::string::npos || colon > eol) continue;
    // The first token after "lane[i]:" is "<rsc>:<tl>/<dev>[.<path>]".
    size_t b = all.find_first_not_of(' ', colon + 1);
    size_t e = all.find_first_of(" \n", b);
    if (b == std::string::npos) break;
    std::string tok = all.substr(b, e - b);
    const size_t c = tok.find(':');
    if (c != std::string::npos) tok = tok.substr(c + 1);
    const size_t dot = tok.rfind('.');
    if (dot != std::string::npos && tok.find('/') < dot) tok = tok.substr(0, dot);
    if (seen.insert(tok).second) out += (out.empty() ? "" : " ") + tok;
    if (at == std::string::npos) break;
  }
  return out;
}

}  // namespace

algos::Status UcxTransport::Connect(const plexus_comm_config_v1& config, ErrMode err_mode) {
  comm_id_ = CommId(config.name);
  const auto start = Clock::now();
  auto left = [&] {
    return std::max<int64_t>(
        1, timeout_ms_ -
               std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  };

  // SERIALIZED, not SINGLE: the worker is made here, on the thread inside
  // comm_create, and then used only by the communicator's worker thread.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t s = ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) {
    worker_ = nullptr;
    return {PLEXUS_ERR_SYSTEM, StatusText("ucp_worker_create", s)};
  }
  s = ucp_worker_get_efd(worker_, &worker_fd_);
  if (s != UCS_OK) return {PLEXUS_ERR_SYSTEM, StatusText("ucp_worker_get_efd", s)};
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) {
    return {PLEXUS_ERR_SYSTEM, std::string("eventfd/epoll_create1: ") + std::strerror(errno)};
  }
  for (int fd : {worker_fd_, wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return {PLEXUS_ERR_SYSTEM, std::string("epoll_ctl: ") + std::strerror(errno)};
    }
  }

  // Worker addresses, each behind its process's identity (which peers share
  // this host), through the host's out-of-band allgather.
  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  s = ucp_worker_get_address(worker_, &address, &address_len);
  if (s != UCS_OK) return {PLEXUS_ERR_SYSTEM, StatusText("ucp_worker_get_address", s)};
  const ProcessId me = ThisProcess();
  std::vector<uint8_t> mine(sizeof me + address_len);
  std::memcpy(mine.data(), &me, sizeof me);
  std::memcpy(mine.data() + sizeof me, address, address_len);
  ucp_worker_release_address(worker_, address);
  const uint64_t my_len = mine.size();
  std::vector<uint64_t> lens(size_);
  int32_t rc =
      host_.oob_allgather(host_.ctx, config.oob, &my_len, lens.data(), sizeof my_len, left());
  if (rc != PLEXUS_OK) {
    return {rc, "exchanging worker address lengths (out-of-band allgather) failed"};
  }
  uint64_t width = 0;
  for (uint64_t l : lens) width = std::max(width, l);
  if (width <= sizeof me || width > (uint64_t(1) << 20)) {
    return {PLEXUS_ERR_REMOTE,
            "a rank published a worker address of " + std::to_string(width) + " bytes"};
  }
  mine.resize(width);
  std::vector<uint8_t> all(width * size_);
  rc = host_.oob_allgather(host_.ctx, config.oob, mine.data(), all.data(), width, left());
  if (rc != PLEXUS_OK) return {rc, "exchanging worker addresses (out-of-band allgather) failed"};

  // Endpoints. UCP_ERR_HANDLING_MODE_PEER makes a peer's death an error on
  // its endpoint instead of a hang, but in UCX 1.13 it keeps a peer on this
  // host off shared memory and cma (their error handling is off by default),
  // onto tcp over loopback. So (ErrMode::kAuto) peers on this host get no
  // UCX error handling, shared memory and cma, and are watched through /proc
  // instead (CheckLocalPeers); other peers get PEER. UCX may lack a
  // transport that can detect a remote peer's death, in which case the
  // endpoint falls back to no error handling and a dead peer is found by the
  // operation timeout.
  bool fell_back = false;
  for (uint32_t p = 0; p < size_; ++p) {
    const uint8_t* entry = all.data() + p * width;
    std::memcpy(&peers_[p], entry, sizeof(ProcessId));
    if (p == rank_) continue;
    const bool local = SameHost(me, peers_[p]);
    const bool want_peer = err_mode == ErrMode::kPeer || (err_mode == ErrMode::kAuto && !local);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(entry + sizeof(ProcessId));
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::OnEndpointError;
    ep.err_handler.arg = &slots_[p];
    const bool try_peer = want_peer && !no_peer_errors_->load();
    s = try_peer ? ucp_ep_create(worker_, &ep, &eps_[p]) : UCS_ERR_UNREACHABLE;
    if (s != UCS_OK) {
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      s = ucp_ep_create(worker_, &ep, &eps_[p]);
      // A local peer is watched through /proc whatever the mode; only a
      // remote one is left to the operation timeout.
      fell_back = fell_back || (want_peer && !local && s == UCS_OK);
      // Same context, same transports: the next endpoints need not try.
      if (want_peer && s == UCS_OK) no_peer_errors_->store(true);
      watch_[p] = local;
    }
    if (s != UCS_OK) {
      eps_[p] = nullptr;
      return {PLEXUS_ERR_SYSTEM,
              "creating the endpoint to rank " + std::to_string(p) + ": " + ucs_status_string(s)};
    }
  }
  if (fell_back) {
    Log(host_, PLEXUS_LOG_WARN,
        name_ + " rank " + std::to_string(rank_) +
            ": UCX has no transport with peer failure detection for some peers; a dead peer "
            "will be reported after the operation timeout");
  }
  PostControlRecv();

  // Hellos both ways with every peer.
  std::vector<uint32_t> others;
  for (uint32_t p = 0; p < size_; ++p) {
    if (p != rank_) others.push_back(p);
  }
  if (algos::Status st = Handshake(others, 0, 1, 0); !st.ok()) return st;

  // Warm the shared-memory FIFOs (why: Handshake in ucx_transport.hpp).
  std::vector<uint32_t> shm;
  std::vector<std::string> lanes(size_);
  for (uint32_t p = 0; p < size_; ++p) {
    if (!eps_[p]) continue;
    lanes[p] = LaneTransports(eps_[p]);
    if (lanes[p].find("sysv/") != std::string::npos ||
        lanes[p].find("posix/") != std::string::npos) {
      shm.push_back(p);
    }
  }
  if (!shm.empty()) {
    const uint32_t fifo = MmFifoSize();
    // Every message from any peer walks this rank's FIFO one element on; the
    // sender's own first writes into each receiver's segment fault in the
    // sender. With many peers on the host, 8 FIFOs' worth in all is enough
    // for the first and bounds the second (63 peers: 8 each).
    const uint32_t per_peer = std::clamp<uint32_t>(8 * fifo / uint32_t(shm.size()), 1, fifo);
    if (algos::Status st = Handshake(shm, 1, per_peer, kWarmBytes); !st.ok()) return st;
    warm_up_ = "shared memory warmed up: " + std::to_string(per_peer) + " messages of " +
               std::to_string(kWarmBytes / 1024) + " KiB each way with " +
               std::to_string(shm.size()) + " peer(s) (UCX_MM_FIFO_SIZE " + std::to_string(fifo) +
               ")";
  }

  std::set<std::string> seen;
  for (uint32_t p = 0; p < size_; ++p) {
    if (!eps_[p]) continue;
    const std::string& list = lanes[p];
    for (size_t b = 0; b < list.size();) {
      size_t e = list.find(' ', b);
      if (e == std::string::npos) e = list.size();
      const std::string tok = list.substr(b, e - b);
      if (seen.insert(tok).second) transports_ += (transports_.empty() ? "" : " ") + tok;
      b = e + 1;
    }
  }
  return {};
}

algos::Status UcxTransport::Handshake(const std::vector<uint32_t>& peers, uint32_t first_seq,
                                      uint32_t rounds, size_t bytes) {
  const algos::OpSignature hello{0, kHelloColl, 0, 0, 0, 0};
  std::vector<uint8_t> out(bytes), in(bytes * peers.size());
  std::vector<Transfer> batch(2 * rounds * peers.size());
  size_t i = 0;
  algos::Status st;
  for (uint32_t r = 0; r < rounds && st.ok(); ++r) {
    for (size_t k = 0; k < peers.size() && st.ok(); ++k) {
      const uint32_t p = peers[k];
      for (bool send : {false, true}) {
        Transfer& t = batch[i++];
        t.is_send = send;
        t.peer = p;
        t.sig = hello;
        t.tag = MakeTag(TagKind::kHello, comm_id_, send ? rank_ : p, first_seq + r, 0);
        t.probe_mask = kMaskAll;  // a hello cannot be mismatched
        // (Every receive from p lands in p's one buffer: nobody reads it.)
        t.data = send ? out.data() : in.data() + k * bytes;
        t.bytes = bytes;
        st = send ? PostSend(p, t.data, bytes, t.tag, &t.request)
                  : PostRecv(t.data, bytes, t.tag, kMaskAll, &t.request, &t.info);
        if (!st.ok()) break;
        t.complete = t.request == nullptr;
        if (!t.complete) active_.push_back(&t);
      }
    }
  }
  auto all_done = [&] {
    for (size_t j = 0; j < i; ++j) {
      if (!batch[j].complete) return false;
    }
    return true;
  };
  last_progress_ = Clock::now();
  while (st.ok() && !all_done()) st = Drive(all_done);
  if (!st.ok()) Cancel();
  return st;
}

uint32_t MmFifoSize() {
  // UCX reads UCX_MM_FIFO_SIZE itself; 64 is its default (UCX 1.13 to 1.18).
  const char* text = std::getenv("UCX_MM_FIFO_SIZE");
  const long n = text ? std::strtol(text, nullptr, 10) : 0;
  return n >= 1 && n <= 65536 ? uint32_t(n) : 64;
}

}  // namespace plexus::ucx
