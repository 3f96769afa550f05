// TcpStoreServer: the rendezvous store served over TCP by one background thread.
//
// How it works. One thread owns everything: the listening socket, every client
// socket (all non-blocking) and the key-value map, so there are no locks. Each
// turn of the loop it poll()s the listener, an eventfd that Stop() signals, and
// every client, then
//   - accepts new clients;
//   - reads into each client's frame buffer, never past the end of the current
//     frame: first exactly the 20-byte header, which is validated (magic,
//     version, command, lengths) before the buffer is grown to the frame's size,
//     so an announced 4 GiB value is refused without allocating it;
//   - executes complete frames: SET/ADD reply at once and wake parked clients;
//     GET/WAIT on missing keys "park" the client with a deadline;
//   - writes pending replies;
//   - expires deadlines: a parked client gets TIMEOUT naming the missing key,
//     and a client stalled mid-frame (or not reading its reply) for
//     stall_timeout is disconnected.
// With a job secret (PLEXUS_TOKEN), a new client must first pass the plexus-auth
// handshake (see store_protocol.hpp): its 88-byte messages are read into the same
// frame buffer (the first 20 bytes tell them from a store frame by their magic)
// and fed to a per-client auth::Responder, whose replies go out like store
// replies, so a slow or hostile client never blocks the loop. A client that has
// not authenticated within handshake_timeout, fails the handshake, or sends
// store frames without it is refused with one log line naming its address.
//
// Idle strangers. Until a client has proven itself (authenticated with the
// secret; without a secret, sent its first complete, valid request) it is
// "unproven": it is disconnected if still unproven handshake_timeout after it
// connected, and at most kMaxUnprovenClients are kept at once (a new one
// beyond that closes the oldest). A proven client may then stay idle for the
// whole job. Accepting also stops short of the process's last kFdReserve
// descriptors (left to the application and its backend) and pauses, without
// polling the listener, when accept() fails (EMFILE), so a flood of
// connections can neither exhaust the process's descriptors nor make the loop
// spin on a listener it cannot accept from.
//
// Identities (store_protocol.hpp). A CLAIM binds an identity ("rank/3",
// "node/1") to the key it carries, for as long as the server runs, and gives
// the connection that identity; a SET or ADD of a key that an identity owns
// (KeyOwner) is executed only for a connection that holds it, and otherwise
// answered with INVALID_USAGE and logged (rate-limited, like disconnects).
// A holder that reconnects claims again with its key and gets its identity
// back; anyone else is told who holds it.
//
// A client is served one request at a time (a client library sends its next
// request only after the reply), which bounds each client's memory to one
// frame in and one reply out. A misbehaving client is disconnected with one
// "plexus store:" line on stderr; nothing it sends can stop the loop.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <sodium.h>
#include "log_limiter.hpp"
#include "plexus/auth/handshake.hpp"

#include "plexus/log.hpp"
#include "store_protocol.hpp"

namespace plexus {
namespace store {
namespace {

using Clock = std::chrono::steady_clock;

// After accept() fails for lack of descriptors/memory the pending connection
// stays queued and poll() would report it forever; pause accepting this long.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// At most this many clients may be unproven (connected, but not yet
// authenticated, or without a secret not yet sent a valid request) at once. A
// rank proves itself within a round trip or two of connecting, so in a real
// job only a burst of ranks (re)connecting together is ever unproven, while a
// scanner's or a flood's idle connections would otherwise each hold a
// descriptor for handshake_timeout. 256 is far below the usual RLIMIT_NOFILE
// of 1024 yet lets 256 ranks connect in the same instant; more simply wait a
// moment in the kernel's accept queue (kEvictionGrace).
constexpr size_t kMaxUnprovenClients = 256;
// When a new connection would exceed kMaxUnprovenClients, the oldest unproven
// client is closed, but only once it has been connected this long: a real
// rank's first request is read within this (so a burst of ranks is not cut
// down), and a flood cannot keep a new rank out, since idle connections age
// past it and make room in accept order.
constexpr auto kEvictionGrace = std::chrono::milliseconds(250);
// Descriptors left to the rest of the process (the application, its backend's
// sockets, files; a quarter of RLIMIT_NOFILE if that is less): a connection
// accepted when fewer are free replaces the oldest unproven client, or is
// closed at once when there is none, and accepting pauses (kAcceptPause).
constexpr rlim_t kFdReserve = 64;
// At most this many identities are kept (each claim is kept for the server's
// life, so that nobody else can take it): far more ranks and nodes than a job
// has, and a bound on what claiming in a loop can cost.
constexpr size_t kMaxIdentities = 1 << 18;
// Bounded work per loop turn, so that a storm of connections cannot hold up
// the requests of clients already connected.
constexpr int kMaxAcceptsPerTurn = 256;

void LogLine(const std::string& text) {
  // One fwrite per line so that lines from concurrent threads do not interleave.
  const std::string line = "plexus store: " + text + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::string ErrnoText(int err) {
  return std::string(std::strerror(err));
}

// How many descriptors this process has open; -1 if that cannot be told
// (no /proc, or not even a descriptor left to look).
long CountOpenDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  long n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // not the directory's own
}

std::string FormatAddress(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "<unknown address family>";
}

struct Client {
  int fd = -1;       // -1 once closed early (an evicted client)
  std::string peer;  // "ip:port", for log lines
  bool closed = false;
  Clock::time_point accepted_at;
  // Authenticated (with a secret) or sent a valid store request (without one):
  // not subject to handshake_deadline or to eviction any more.
  bool proven = false;

  // The frame being received. Sized kHeaderBytes until the header is validated,
  // then the whole frame. in_have bytes of it have arrived.
  Bytes in = Bytes(kHeaderBytes);
  size_t in_have = 0;
  bool header_ok = false;
  // The frame being received is a handshake message (auth::kMessageBytes), not a store frame.
  bool auth_frame = false;

  // Authentication. `authenticated` means "may send store requests": true from
  // the start when the server has no secret. `responder` lives during the
  // handshake; `frames_seen` counts frames (a handshake must come first).
  bool authenticated = false;
  std::unique_ptr<auth::Responder> responder;
  uint64_t frames_seen = 0;
  Clock::time_point handshake_deadline;  // when !proven
  // Send what is in `out`, then disconnect (a refusal that tells the peer why).
  bool close_after_output = false;
  bool refusal_logged = false;  // its refusal is in the log already

  // The identity this connection holds ("" for none): see Identities above.
  std::string identity;

  // The reply being sent; out_sent bytes of it are gone.
  Bytes out;
  size_t out_sent = 0;

  // Last time bytes moved in either direction (or a reply was queued): the stall clock.
  Clock::time_point last_progress;

  // A GET or WAIT waiting for keys.
  bool parked = false;
  Request pending;
  size_t wait_next = 0;  // keys before this index of pending.keys are known to exist
  Clock::time_point deadline;

  bool FrameComplete() const { return header_ok && in_have == in.size(); }
  bool Partial() const { return in_have > 0 && !FrameComplete(); }
  bool HasOutput() const { return out_sent < out.size(); }
  // Ready to execute its next frame right now.
  bool Runnable() const { return !closed && FrameComplete() && !parked && !HasOutput(); }
  bool WantsRead() const { return !closed && !close_after_output && !FrameComplete(); }
  // Subject to the stall timeout: the peer owes us bytes or owes us reading.
  bool Stallable() const { return Partial() || HasOutput(); }
};

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  TcpStoreServerImpl(int listen_fd, int wake_fd, uint16_t port, TcpStoreServerOptions options,
                     auth::Secret secret)
      : listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        port_(port),
        options_(std::move(options)),
        secret_(std::move(secret)) {}

  ~TcpStoreServerImpl() override {
    Stop();
    // Run() closes the listener when it ends (so connects are refused at once,
    // even if the thread died early); the eventfd lives as long as the object
    // because Stop() may write to it at any time before joining.
    if (listen_fd_ >= 0) close(listen_fd_);
    close(wake_fd_);
  }

  uint16_t port() const override { return port_; }

  Status StartThread() {
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::exception& e) {
      return Status::System(std::string("cannot start the store server thread: ") + e.what());
    }
    return Status::Ok();
  }

  void Stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!thread_.joinable()) return;
    const uint64_t one = 1;
    // eventfd writes of 8 bytes cannot be partial; EAGAIN only if the counter
    // would overflow, which means a wake-up is already pending anyway.
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
    thread_.join();
  }

 private:
  void Run();
  void RunLoop();
  void AcceptAll(Clock::time_point now);
  void ReadFrom(Client& c, Clock::time_point now);
  void WriteTo(Client& c, Clock::time_point now);
  void Execute(Client& c, Clock::time_point now);
  void ExecuteHandshake(Client& c, Clock::time_point now);
  // CLAIM: binds or checks the identity and answers.
  void ExecuteClaim(Client& c, const Request& req, Clock::time_point now);
  // Whether c may write key: it belongs to nobody, or to c's identity.
  bool Owns(const Client& c, const std::string& key) const;
  // For SET/ADD of an owned key by a connection that does not hold its owner:
  // queues the refusal and returns false. True when c may write key.
  bool MayWrite(Client& c, const Request& req, Clock::time_point now);
  // Reads the store frame header in c.in for a client that has not authenticated:
  // queues an error REPLY (small frames, read in full first) or disconnects.
  // Returns false when the client was disconnected.
  bool RefuseUnauthenticated(Client& c, const FrameHeader& h);
  // A header that may be the one unauthenticated request answered: a GET of
  // kPublicCredentialKey, on a server that has a public credential.
  bool MayAskForCredential(const FrameHeader& h) const {
    return !options_.public_credential.empty() && h.command == Command::kGet &&
           h.key_len == kPublicCredentialKey.size() && h.value_len <= 8;
  }
  void QueueReply(Client& c, int32_t status, std::string_view message,
                  std::span<const uint8_t> payload, Clock::time_point now);
  // Replies to c if its parked request can now complete; returns whether it did.
  bool TryComplete(Client& c, Clock::time_point now);
  void WakeParked(Clock::time_point now);
  void ExpireDeadlines(Clock::time_point now);
  void Disconnect(Client& c, const std::string& reason);
  void MarkProven(Client& c);
  // The first unproven client in accept order; nullptr if none.
  Client* OldestUnproven() const;
  // Disconnects the oldest unproven client, if it has been connected for at
  // least min_age, and closes its descriptor at once; returns whether it did.
  bool EvictOldestUnproven(Clock::time_point now, Clock::duration min_age, const std::string& why);
  // When the listener may be polled again (<= now: it may be).
  Clock::time_point AcceptOpensAt() const;
  int PollTimeoutMs(Clock::time_point now) const;

  int listen_fd_;      // closed by Run() when the thread ends
  const int wake_fd_;  // Stop() signals it; closed by the destructor
  const uint16_t port_;
  const TcpStoreServerOptions options_;
  const auth::Secret secret_;  // absent: no authentication

  std::mutex stop_mu_;  // makes Stop() safe to call from several threads
  std::thread thread_;

  // Owned by the server thread only.
  std::vector<std::unique_ptr<Client>> clients_;
  // "disconnecting client ..." lines: strangers can cause any number of them.
  LogLimiter disconnects_{10, std::chrono::seconds(10)};
  void LogDisconnect(const std::string& text);
  std::unordered_map<std::string, Bytes> data_;
  // Who claimed each identity, and with which key (never forgotten: a holder
  // that disconnected may come back; nobody else gets its identity).
  struct Holder {
    IdentityKey key{};
    std::string label;  // as the holder gave it ("host a, pid 123"), made printable
    std::string peer;   // the address it first claimed from
    Clock::time_point since;
  };
  std::unordered_map<std::string, Holder> holders_;
  Clock::time_point accept_resume_{};  // accepting is paused until then
  size_t unproven_ = 0;                // clients not closed and not proven
};

void TcpStoreServerImpl::Run() {
  try {
    RunLoop();
  } catch (const std::exception& e) {
    // Per-client failures are handled inside; this is e.g. bad_alloc building
    // the poll set. The clients then see their connection close (REMOTE).
    LogLine(std::string("server thread failed and stopped: ") + e.what());
  }
  for (auto& c : clients_) {
    if (c->fd >= 0) close(c->fd);
  }
  clients_.clear();
  unproven_ = 0;
  close(listen_fd_);
  listen_fd_ = -1;  // read again only by the destructor, after join()
}

void TcpStoreServerImpl::RunLoop() {
  std::vector<pollfd> fds;
  std::vector<Client*> polled;  // polled[i] is the client of fds[i + 2]
  for (;;) {
    Clock::time_point now = Clock::now();
    fds.clear();
    polled.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(AcceptOpensAt() <= now ? POLLIN : 0), 0});
    for (auto& c : clients_) {
      short events = 0;
      if (c->WantsRead()) events |= POLLIN;
      if (c->HasOutput()) events |= POLLOUT;
      // A client with events == 0 is still polled: POLLHUP/POLLERR are always reported.
      fds.push_back({c->fd, events, 0});
      polled.push_back(c.get());
    }

    int rc = poll(fds.data(), fds.size(), PollTimeoutMs(now));
    if (rc < 0 && errno != EINTR) {
      LogLine("poll failed: " + ErrnoText(errno) + "; server stopped");
      return;
    }
    now = Clock::now();
    if (auto summary = disconnects_.Flush(now)) LogLine(*summary);
    if (rc > 0) {
      if (fds[0].revents != 0) return;  // Stop()
      if (fds[1].revents & POLLIN) AcceptAll(now);
      for (size_t i = 0; i < polled.size(); ++i) {
        Client& c = *polled[i];
        const short re = fds[i + 2].revents;
        if (re == 0 || c.closed) continue;
        if ((re & POLLOUT) && c.HasOutput()) WriteTo(c, now);
        if (!c.closed && (re & (POLLIN | POLLHUP | POLLERR))) {
          if (c.WantsRead()) {
            ReadFrom(c, now);
          } else if (re & (POLLHUP | POLLERR)) {
            Disconnect(c, c.HasOutput() ? "connection lost before the reply was sent" : "");
          }
        }
      }
    }

    // Execute every complete frame; a SET may make parked clients runnable
    // again, hence the loop (each pass executes at least one frame or stops).
    bool progress = true;
    while (progress) {
      progress = false;
      for (size_t i = 0; i < clients_.size(); ++i) {  // index: Execute never adds clients
        Client& c = *clients_[i];
        if (!c.Runnable()) continue;
        Execute(c, now);
        progress = true;
      }
    }
    ExpireDeadlines(now);
    // Optimistic write: most replies fit the socket buffer, so they leave now
    // instead of after another poll round trip.
    for (auto& c : clients_) {
      if (!c->closed && c->HasOutput()) WriteTo(*c, now);
    }
    std::erase_if(clients_, [](const std::unique_ptr<Client>& c) {
      if (!c->closed) return false;
      if (c->fd >= 0) close(c->fd);
      return true;
    });
  }
}

void TcpStoreServerImpl::LogDisconnect(const std::string& text) {
  for (const std::string& line : disconnects_.Add(text, Clock::now())) LogLine(line);
}

int TcpStoreServerImpl::PollTimeoutMs(Clock::time_point now) const {
  Clock::time_point wake = now + std::chrono::seconds(60);
  if (auto at = disconnects_.FlushAt()) wake = std::min(wake, *at);
  if (const auto opens = AcceptOpensAt(); now < opens) wake = std::min(wake, opens);
  for (const auto& c : clients_) {
    if (c->Runnable()) return 0;
    if (c->parked) wake = std::min(wake, c->deadline);
    if (c->Stallable()) wake = std::min(wake, c->last_progress + options_.stall_timeout);
    if (!c->proven && !c->closed && !c->close_after_output) {
      wake = std::min(wake, c->handshake_deadline);
    }
  }
  if (wake <= now) return 0;
  // Round up so we do not spin with 0 ms timeouts just before a deadline.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60000));
}

Client* TcpStoreServerImpl::OldestUnproven() const {
  if (unproven_ == 0) return nullptr;
  for (const auto& c : clients_) {  // in accept order
    if (!c->closed && !c->proven) return c.get();
  }
  return nullptr;
}

Clock::time_point TcpStoreServerImpl::AcceptOpensAt() const {
  Clock::time_point at = accept_resume_;
  if (unproven_ >= kMaxUnprovenClients) {
    // Full: a new client must wait until the oldest unproven one may be evicted
    // (or until one proves itself, which makes the next turn poll again).
    if (const Client* oldest = OldestUnproven()) {
      at = std::max(at, oldest->accepted_at + kEvictionGrace);
    }
  }
  return at;
}

bool TcpStoreServerImpl::EvictOldestUnproven(Clock::time_point now, Clock::duration min_age,
                                             const std::string& why) {
  Client* oldest = OldestUnproven();
  if (oldest == nullptr || now - oldest->accepted_at < min_age) return false;
  Disconnect(*oldest, (secret_.present() ? "refused: it has not authenticated with the job secret"
                                         : "refused: it has not sent a request") +
                          std::string(" yet, and ") + why);
  // Closed now rather than at the end of the turn, so that the descriptor is
  // free for the accept that follows. Safe: this turn's poll results are
  // matched to clients by pointer, and a closed client's are skipped.
  close(oldest->fd);
  oldest->fd = -1;
  return true;
}

void TcpStoreServerImpl::AcceptAll(Clock::time_point now) {
  rlimit nofile{};
  const bool limited = getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY;
  const rlim_t limit = limited ? nofile.rlim_cur : 0;
  const rlim_t reserve = std::min(kFdReserve, limit / 4);
  // The process's descriptors in use, counted once an accepted descriptor's
  // number comes near the limit (descriptors are allocated lowest first, so
  // accepting n means 0..n are all in use; below that nothing is counted),
  // then kept up to date through this call.
  bool counted = false;
  rlim_t in_use = 0;
  const std::string cap_text =
      "there are " + std::to_string(kMaxUnprovenClients) + " such clients (the most kept at once)";
  for (int turn = 0; turn < kMaxAcceptsPerTurn; ++turn) {
    if (unproven_ >= kMaxUnprovenClients) {
      if (!EvictOldestUnproven(now, kEvictionGrace, cap_text)) {
        return;  // AcceptOpensAt() says when to try again
      }
      if (counted) --in_use;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      // Out of descriptors: the oldest unproven client gives way, however
      // young (the process's descriptors come first).
      if ((err == EMFILE || err == ENFILE) &&
          EvictOldestUnproven(now, Clock::duration::zero(), "the process is out of descriptors")) {
        counted = false;  // count again
        continue;         // its descriptor is free now
      }
      // EMFILE/ENFILE/ENOBUFS/ENOMEM or worse: existing clients keep being
      // served; the listener is not polled meanwhile, so this does not spin.
      LogDisconnect("accept failed: " + ErrnoText(err) + "; not accepting new clients for " +
                    std::to_string(kAcceptPause.count()) + " ms");
      accept_resume_ = now + kAcceptPause;
      return;
    }
    if (counted) {
      ++in_use;
    } else if (limited && rlim_t(fd) + 2 * reserve >= limit) {
      const long n = CountOpenDescriptors();
      in_use = n < 0 ? limit : rlim_t(n);
      counted = true;
    }
    // Into the reserve: the oldest unproven clients give way, however young
    // (they have had the longest to prove themselves); with none, the new one does.
    while (counted && in_use + reserve > limit &&
           EvictOldestUnproven(now, Clock::duration::zero(),
                               "the process is running out of descriptors")) {
      --in_use;
    }
    if (counted && in_use + reserve > limit) {
      LogDisconnect("refusing client " + FormatAddress(addr) + ": the process has " +
                    std::to_string(in_use) + " descriptors open of its RLIMIT_NOFILE " +
                    std::to_string(limit) + ", and the last " + std::to_string(reserve) +
                    " are kept for the rest of it; not accepting new clients for " +
                    std::to_string(kAcceptPause.count()) + " ms");
      close(fd);
      accept_resume_ = now + kAcceptPause;
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // replies are small
    try {
      auto c = std::make_unique<Client>();
      c->fd = fd;
      c->peer = FormatAddress(addr);
      c->last_progress = now;
      c->accepted_at = now;
      c->authenticated = !secret_.present();
      c->handshake_deadline = now + options_.handshake_timeout;
      if (!secret_.present() && auth::FirstUnauthenticatedUse()) {
        plexus::LogLine(PLEXUS_LOG_WARN, "store",
                        "no job secret: the rendezvous store on port " + std::to_string(port_) +
                            " serves clients without authentication, so anyone who reaches it "
                            "can join the job as a rank, read what the ranks exchange, and end "
                            "or mislead the job; give the job a secret (PLEXUS_TOKEN or "
                            "PLEXUS_TOKEN_FILE on every rank; plexus-run makes one)");
      }
      clients_.push_back(std::move(c));
      ++unproven_;
    } catch (const std::exception&) {
      LogLine("out of memory accepting a client from " + FormatAddress(addr));
      close(fd);
      return;
    }
  }
}

void TcpStoreServerImpl::ReadFrom(Client& c, Clock::time_point now) {
  try {
    // Read until EAGAIN or the frame is complete; never past the frame's end.
    while (!c.FrameComplete()) {
      ssize_t n = recv(c.fd, c.in.data() + c.in_have, c.in.size() - c.in_have, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        const int err = errno;
        Disconnect(c, c.Partial() ? "receive failed mid-frame: " + ErrnoText(err) : "");
        return;
      }
      if (n == 0) {
        // A clean close between frames is how clients leave; only log a torn frame.
        Disconnect(c, c.in_have > 0
                          ? "connection closed mid-frame after " + std::to_string(c.in_have) +
                                " of " + std::to_string(c.in.size()) + " bytes"
                          : "");
        return;
      }
      c.in_have += static_cast<size_t>(n);
      c.last_progress = now;
      if (!c.header_ok && c.in_have == kHeaderBytes) {
        if (auth::StartsWithMagic(c.in)) {
          // A handshake message: fixed size, longer than a store header.
          static_assert(auth::kMessageBytes > kHeaderBytes);
          c.in.resize(auth::kMessageBytes);
          c.header_ok = true;
          c.auth_frame = true;
          continue;
        }
        FrameHeader h;
        Status s = ParseHeader(c.in, &h);
        if (!s.ok()) {
          Disconnect(c, c.authenticated ? s.message()
                                        : "refused: it did not authenticate with the job "
                                          "secret and sent garbage (" +
                                              s.message() + ")");
          return;
        }
        if (h.command == Command::kReply) {
          Disconnect(c, "sent a REPLY frame, which only servers send");
          return;
        }
        if (!c.authenticated && !RefuseUnauthenticated(c, h)) return;
        // Safe: every length in h was checked against its limit by ParseHeader.
        c.in.resize(h.FrameBytes());
        c.header_ok = true;
      }
    }
  } catch (const std::exception& e) {
    Disconnect(c, std::string("cannot buffer the request: ") + e.what());
  }
}

void TcpStoreServerImpl::WriteTo(Client& c, Clock::time_point now) {
  while (c.HasOutput()) {
    ssize_t n = send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      Disconnect(c, "sending the reply failed: " + ErrnoText(errno));
      return;
    }
    c.out_sent += static_cast<size_t>(n);
    c.last_progress = now;
  }
  // Drop the buffer rather than keep a 64 MiB GET reply's capacity per client.
  Bytes().swap(c.out);
  c.out_sent = 0;
  if (c.close_after_output) Disconnect(c, "");  // the refusal was logged when it was queued
}

void TcpStoreServerImpl::QueueReply(Client& c, int32_t status, std::string_view message,
                                    std::span<const uint8_t> payload, Clock::time_point now) {
  EncodeReply(status, message, payload, &c.out);
  c.out_sent = 0;
  c.last_progress = now;  // the stall clock for "does not read its reply" starts now
}

bool TcpStoreServerImpl::RefuseUnauthenticated(Client& c, const FrameHeader& h) {
  if (MayAskForCredential(h)) return true;  // Execute tells once it has the key
  // Logged once here; the client is disconnected after it got its REPLY.
  const std::string why =
      "refused: it sent a store " + std::string(CommandName(h.command)) +
      " request without authenticating with the job secret (is PLEXUS_TOKEN set where it runs?)";
  if (h.FrameBytes() > kMaxUnauthenticatedFrameBytes) {
    Disconnect(c, why);
    return false;
  }
  LogDisconnect("disconnecting client " + c.peer + ": " + why);
  c.refusal_logged = true;
  return true;  // read the (small) frame in full, then Execute answers and closes
}

void TcpStoreServerImpl::ExecuteHandshake(Client& c, Clock::time_point now) {
  // Consume the message, whatever happens next.
  const Bytes message = std::move(c.in);
  c.in = Bytes(kHeaderBytes);
  c.in_have = 0;
  c.header_ok = false;
  c.auth_frame = false;
  const bool first = c.frames_seen++ == 0;
  if (!c.responder) {
    // A handshake starts with the first frame, also on a server without a
    // secret (which answers NO_SECRET, so the client learns why it is refused).
    if (!first) {
      Disconnect(c, "sent a handshake message after store requests");
      return;
    }
    c.responder = std::make_unique<auth::Responder>(secret_, auth::Binding{});
  }
  auth::Wire reply{};
  bool has_reply = false;
  std::string why;
  const auto outcome = c.responder->OnMessage(message, &reply, &has_reply, &why);
  if (has_reply) {
    c.out.assign(reply.begin(), reply.end());
    c.out_sent = 0;
    c.last_progress = now;
  }
  switch (outcome) {
    case auth::Responder::Outcome::kContinue:
      return;
    case auth::Responder::Outcome::kAccepted:
      c.authenticated = true;
      c.responder.reset();
      // Without a secret anyone completes the handshake: only a request proves.
      if (secret_.present()) MarkProven(c);
      return;
    case auth::Responder::Outcome::kRefused:
      c.responder.reset();
      if (has_reply) {
        LogDisconnect("disconnecting client " + c.peer + ": refused: it " + why);
        c.close_after_output = true;
      } else {
        Disconnect(c, "refused: it " + why);
      }
      return;
  }
}

void TcpStoreServerImpl::Execute(Client& c, Clock::time_point now) {
  if (c.auth_frame) {
    try {
      ExecuteHandshake(c, now);
    } catch (const std::exception& e) {
      Disconnect(c, std::string("failed to run the handshake: ") + e.what());
    }
    return;
  }
  ++c.frames_seen;
  if (!c.authenticated) {
    Request asked;
    size_t used = 0;
    const bool for_credential = ParseRequest(c.in, &asked, &used).ok() &&
                                asked.command == Command::kGet &&
                                asked.key == kPublicCredentialKey &&
                                !options_.public_credential.empty();
    if (!for_credential && !c.refusal_logged) {
      LogDisconnect("disconnecting client " + c.peer +
                    ": refused: it sent a store request without authenticating with the job "
                    "secret (is PLEXUS_TOKEN set where it runs?)");
      c.refusal_logged = true;
    }
    // Otherwise RefuseUnauthenticated logged it when the header came in.
    c.in = Bytes(kHeaderBytes);
    c.in_have = 0;
    c.header_ok = false;
    if (for_credential) {
      const auto& cred = options_.public_credential;
      QueueReply(c, PLEXUS_OK, "",
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cred.data()),
                                          cred.size()),
                 now);
    } else {
      QueueReply(c, PLEXUS_ERR_INVALID_USAGE, kAuthenticationRequiredMessage, {}, now);
    }
    c.close_after_output = true;
    return;
  }
  Request req;
  size_t consumed = 0;
  try {
    Status s = ParseRequest(c.in, &req, &consumed);
    if (!s.ok() || consumed != c.in.size()) {
      // The header was validated already, so this is a bad body (e.g. WAIT keys).
      Disconnect(c, s.ok() ? "internal frame length mismatch" : s.message());
      return;
    }
    MarkProven(c);  // a complete, valid request (with a secret: proven already)
    // Reset the frame buffer, releasing a large SET's memory.
    c.in = Bytes(kHeaderBytes);
    c.in_have = 0;
    c.header_ok = false;

    if ((req.command == Command::kSet || req.command == Command::kAdd) && !MayWrite(c, req, now)) {
      return;
    }
    switch (req.command) {
      case Command::kClaim:
        ExecuteClaim(c, req, now);
        break;
      case Command::kSet:
        data_[req.key] = std::move(req.value);
        QueueReply(c, PLEXUS_OK, "", {}, now);
        WakeParked(now);
        break;
      case Command::kAdd: {
        auto it = data_.find(req.key);
        int64_t value = 0;
        if (it != data_.end() && !DecodeCounter(it->second, &value)) {
          QueueReply(c, PLEXUS_ERR_INVALID_USAGE, NotACounterMessage(req.key, it->second.size()),
                     {}, now);
          break;
        }
        // Unsigned arithmetic: wraps instead of signed-overflow UB.
        value =
            static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(req.delta));
        Bytes encoded = EncodeCounter(value);
        QueueReply(c, PLEXUS_OK, "", encoded, now);
        // An ADD of 0 is a read: of a key this connection may not write, it
        // must not create the key either (8 zero bytes where a rank's card or
        // node 0's verdict belongs would be believed as one).
        if (req.delta == 0 && it == data_.end() && !Owns(c, req.key)) break;
        data_[req.key] = std::move(encoded);
        WakeParked(now);
        break;
      }
      case Command::kGet:
      case Command::kWait:
        c.pending = std::move(req);
        c.pending.timeout_ms = ClampTimeoutMs(c.pending.timeout_ms);
        c.wait_next = 0;
        c.parked = true;
        c.deadline = now + std::chrono::milliseconds(c.pending.timeout_ms);
        // If the keys are missing, ExpireDeadlines (later this same turn, same
        // `now`) answers a zero timeout; otherwise SET/ADD or the deadline will.
        TryComplete(c, now);
        break;
      case Command::kReply:  // rejected when the header arrived
        Disconnect(c, "sent a REPLY frame");
        break;
    }
  } catch (const std::exception& e) {
    Disconnect(c, std::string("failed to execute ") + CommandName(req.command) + ": " + e.what());
  }
}

// Printable, one line: labels come from clients and go into other clients' errors.
std::string Printable(const Bytes& bytes, size_t from) {
  std::string text;
  for (size_t i = from; i < bytes.size(); ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    text.push_back(c >= 0x20 && c < 0x7f ? char(c) : '?');
  }
  return text;
}

std::string SecondsAgo(Clock::time_point since, Clock::time_point now) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", double(ms) / 1000.0);
  return buf;
}

bool TcpStoreServerImpl::Owns(const Client& c, const std::string& key) const {
  const std::string owner = KeyOwner(key);
  return owner.empty() || owner == c.identity;
}

void TcpStoreServerImpl::ExecuteClaim(Client& c, const Request& req, Clock::time_point now) {
  IdentityKey key{};
  std::copy_n(req.value.begin(), key.size(), key.begin());  // ParseHeader checked the length
  const std::string who = DescribeIdentity(req.key);
  if (!c.identity.empty() && c.identity != req.key) {
    QueueReply(c, PLEXUS_ERR_INVALID_USAGE,
               "this connection is " + DescribeIdentity(c.identity) + " already; it cannot be " +
                   who + " too",
               {}, now);
    return;
  }
  if (holders_.count(req.key) == 0 && holders_.size() >= kMaxIdentities) {
    QueueReply(c, PLEXUS_ERR_INVALID_USAGE,
               "this store holds " + std::to_string(kMaxIdentities) +
                   " identities already, the most it keeps; " + who + " is refused",
               {}, now);
    return;
  }
  auto [it, fresh] = holders_.try_emplace(req.key);
  Holder& h = it->second;
  if (fresh) {
    h.key = key;
    h.label = Printable(req.value, key.size());
    h.peer = c.peer;
    h.since = now;
  } else if (sodium_memcmp(h.key.data(), key.data(), key.size()) != 0) {
    const std::string message = who + " is held by another process (" +
                                (h.label.empty() ? "no label" : h.label) + ", connected from " +
                                h.peer + ", " + SecondsAgo(h.since, now) + " ago)";
    LogDisconnect("refused client " + c.peer + " (" + Printable(req.value, key.size()) +
                  ") the identity " + who + ": " + message);
    QueueReply(c, PLEXUS_ERR_INVALID_USAGE, message, {}, now);
    return;
  }
  c.identity = req.key;
  QueueReply(c, PLEXUS_OK, "", {}, now);
}

bool TcpStoreServerImpl::MayWrite(Client& c, const Request& req, Clock::time_point now) {
  // ADD of 0 is how a counter is read (Execute keeps it from creating the key).
  if (req.command == Command::kAdd && req.delta == 0) return true;
  if (Owns(c, req.key)) return true;
  const std::string owner = KeyOwner(req.key);
  const std::string message =
      std::string(CommandName(req.command)) + " of key " + QuoteKey(req.key) + " refused: it " +
      (owner.back() == '?' ? "is under an owned prefix with no valid identity"
                           : "belongs to " + DescribeIdentity(owner)) +
      ", and this connection " +
      (c.identity.empty() ? "holds no identity" : "is " + DescribeIdentity(c.identity));
  LogDisconnect("client " + c.peer + ": " + message);
  QueueReply(c, PLEXUS_ERR_INVALID_USAGE, message, {}, now);
  return false;
}

bool TcpStoreServerImpl::TryComplete(Client& c, Clock::time_point now) {
  if (c.pending.command == Command::kGet) {
    auto it = data_.find(c.pending.key);
    if (it == data_.end()) return false;
    c.parked = false;
    QueueReply(c, PLEXUS_OK, "", it->second, now);
  } else {
    // Keys never disappear, so keys before wait_next need no second look.
    auto& keys = c.pending.keys;
    while (c.wait_next < keys.size() && data_.count(keys[c.wait_next]) != 0) ++c.wait_next;
    if (c.wait_next < keys.size()) return false;
    c.parked = false;
    QueueReply(c, PLEXUS_OK, "", {}, now);
  }
  c.pending = Request();
  return true;
}

void TcpStoreServerImpl::WakeParked(Clock::time_point now) {
  for (auto& c : clients_) {
    if (c->parked && !c->closed) TryComplete(*c, now);
  }
}

void TcpStoreServerImpl::ExpireDeadlines(Clock::time_point now) {
  for (auto& cp : clients_) {
    Client& c = *cp;
    if (c.closed) continue;
    if (c.parked && c.deadline <= now) {
      std::string message;
      if (c.pending.command == Command::kGet) {
        message = GetTimeoutMessage(c.pending.key, c.pending.timeout_ms);
      } else {
        const auto& keys = c.pending.keys;
        size_t missing = 0;
        for (size_t i = c.wait_next; i < keys.size(); ++i) missing += data_.count(keys[i]) == 0;
        message = WaitTimeoutMessage(keys[c.wait_next], missing, keys.size(), c.pending.timeout_ms);
      }
      c.parked = false;
      c.pending = Request();
      QueueReply(c, PLEXUS_ERR_TIMEOUT, message, {}, now);
      continue;
    }
    if (!c.proven && !c.close_after_output && now >= c.handshake_deadline) {
      const auto ms = std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(options_.handshake_timeout)
              .count());
      std::string why;
      if (c.refusal_logged) {
        // said already
      } else if (secret_.present()) {
        why =
            "refused: it did not complete authentication with the job secret within " + ms + " ms";
      } else {
        // An idle connection that is not a client (a scanner, a health check):
        // kept, it would hold a descriptor for the whole job.
        why = "refused: it did not send a complete request within " + ms + " ms of connecting" +
              (c.in_have > 0 ? " (" + std::to_string(c.in_have) + " bytes of one arrived)"
                             : " (it sent nothing)");
      }
      Disconnect(c, why);
      continue;
    }
    if (c.Stallable() && now - c.last_progress >= options_.stall_timeout) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(options_.stall_timeout);
      Disconnect(c, c.Partial()
                        ? "stalled for " + std::to_string(ms.count()) +
                              " ms in the middle of a frame (" + std::to_string(c.in_have) +
                              " bytes received)"
                        : "did not read its reply for " + std::to_string(ms.count()) + " ms");
    }
  }
}

void TcpStoreServerImpl::MarkProven(Client& c) {
  if (c.proven) return;
  c.proven = true;
  --unproven_;
}

void TcpStoreServerImpl::Disconnect(Client& c, const std::string& reason) {
  if (c.closed) return;
  if (!reason.empty()) LogDisconnect("disconnecting client " + c.peer + ": " + reason);
  c.closed = true;
  if (!c.proven) --unproven_;
  c.parked = false;
  // The fd is closed when the client is erased at the end of the loop turn, so
  // that a descriptor number is never reused while still in this turn's poll set
  // (EvictOldestUnproven closes it at once, and says why that is safe).
  // Free buffers now: a closed client must not hold 64 MiB until then.
  Bytes().swap(c.in);
  Bytes().swap(c.out);
  c.out_sent = 0;
  c.in_have = 0;
  c.header_ok = false;
  c.auth_frame = false;
  c.responder.reset();
  c.pending = Request();
}

// Creates, binds and listens; on failure closes what it opened.
Status OpenListener(const std::string& bind_addr, uint16_t port, int* out_fd, uint16_t* out_port) {
  const bool any = bind_addr.empty() || bind_addr == "0.0.0.0";
  addrinfo hints{};
  hints.ai_family = any ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const std::string shown = (any ? std::string("0.0.0.0") : bind_addr) + ":" + service;
  int gai = getaddrinfo(any ? nullptr : bind_addr.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) {
    return Status::InvalidArgument("store server: cannot resolve bind address '" + bind_addr +
                                   "': " + gai_strerror(gai));
  }
  std::string last_error = "no usable address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = "socket: " + ErrnoText(errno);
      continue;
    }
    // A restarted job must be able to bind the port its predecessor left in TIME_WAIT.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = "bind: " + ErrnoText(errno);
      close(fd);
      continue;
    }
    if (listen(fd, SOMAXCONN) != 0) {
      last_error = "listen: " + ErrnoText(errno);
      close(fd);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      last_error = "getsockname: " + ErrnoText(errno);
      close(fd);
      continue;
    }
    *out_port = local.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port)
                    : ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    *out_fd = fd;
    freeaddrinfo(res);
    return Status::Ok();
  }
  freeaddrinfo(res);
  return Status::System("store server: cannot listen on " + shown + ": " + last_error);
}

}  // namespace

Status StartTcpStoreServer(const std::string& bind_addr, uint16_t port,
                           const TcpStoreServerOptions& options,
                           std::unique_ptr<TcpStoreServer>* out) {
  if (out == nullptr) return Status::InvalidArgument("store server: out is null");
  if (options.stall_timeout.count() <= 0) {
    return Status::InvalidArgument("store server: stall_timeout must be positive");
  }
  if (options.handshake_timeout.count() <= 0) {
    return Status::InvalidArgument("store server: handshake_timeout must be positive");
  }
  std::string token;
  if (options.token) {
    token = *options.token;
  } else if (Status s = TokenFromEnvironment(&token); !s.ok()) {
    return Status(s.code(), "store server: " + s.message());
  }
  auth::Secret secret;
  if (std::string error; !auth::Secret::Derive(token, auth::Purpose::kStore, &secret, &error)) {
    return Status::System("store server: " + error);
  }
  int listen_fd = -1;
  uint16_t bound_port = 0;
  Status s = OpenListener(bind_addr, port, &listen_fd, &bound_port);
  if (!s.ok()) return s;
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    const int err = errno;
    close(listen_fd);
    return Status::System("store server: eventfd: " + ErrnoText(err));
  }
  std::unique_ptr<TcpStoreServerImpl> server;
  try {
    TcpStoreServerOptions kept = options;
    kept.token.reset();  // only the derived key is kept, not the token
    server = std::make_unique<TcpStoreServerImpl>(listen_fd, wake_fd, bound_port, std::move(kept),
                                                  std::move(secret));
  } catch (const std::exception& e) {
    close(listen_fd);
    close(wake_fd);
    return Status::System(std::string("store server: ") + e.what());
  }
  s = server->StartThread();  // on failure the destructor closes both descriptors
  if (!s.ok()) return s;
  *out = std::move(server);
  return Status::Ok();
}

}  // namespace store

Status TcpStoreServer::Start(const std::string& bind_addr, uint16_t port,
                             std::unique_ptr<TcpStoreServer>* out) {
  return store::StartTcpStoreServer(bind_addr, port, store::TcpStoreServerOptions{}, out);
}

}  // namespace plexus
