// netns_delay_switch: an Ethernet switch in user space that holds every frame
// for a fixed time before it forwards it. It stands in for `tc netem delay`
// on kernels without sch_netem (this one): tests/net and bench/netns-compare
// put one of its ports, a tap device named eth0, into each namespace host.
//
//   netns_delay_switch --delay-us N [--queue-mb M] [--ifname eth0]
//                      [--ready FILE] NETNS...
//
// For each NETNS (a name under /run/netns) it enters that namespace, makes a
// tap device there (IFF_TAP, with a virtio-net header so that the kernel may
// hand it TCP segments of up to 64 KiB, as veth does, rather than one MTU at a
// time), and returns. Then it forwards: a frame read from port i at time t is
// written at t + N µs to the port that its destination MAC was last seen on,
// or to every other port (broadcast, multicast, not yet seen). The delay is
// the same for every frame, so the queue is one FIFO in arrival order. A
// frame that would take the queue over M MiB (default 64), or that the
// destination tap will not take, is dropped, as a router's full queue would.
//
// The addresses and the link state are the caller's (ip addr/ip link in the
// namespace, once FILE exists). It runs until SIGTERM/SIGINT (or SIGKILL: the
// taps go with the process), then prints what it forwarded and dropped.
// It raises itself to SCHED_FIFO where allowed, since netem runs in the
// kernel's softirq, ahead of every process; without that the ranks, which
// poll, would delay frames by their time slices and not by N.

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

constexpr size_t kVnetHeader = 10;  // struct virtio_net_hdr, TUNSETVNETHDRSZ's default
constexpr size_t kMaxFrame = kVnetHeader + 65536 + 64;
constexpr size_t kSmall = 2048;

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) {
  g_stop = 1;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Frame {
  int64_t due_ns;
  int from;
  std::vector<uint8_t> bytes;  // virtio-net header, then the Ethernet frame
};

struct Port {
  std::string netns;
  int fd = -1;
  uint64_t frames_in = 0, frames_out = 0, bytes_out = 0, dropped = 0;
};

// Makes a tap device named `ifname` in the network namespace `netns` and
// returns its file descriptor, or -1 with the reason printed.
int MakeTapIn(const std::string& netns, const std::string& ifname) {
  int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  std::string path = "/run/netns/" + netns;
  int there = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (self < 0 || there < 0) {
    fprintf(stderr, "netns_delay_switch: cannot open %s: %s\n",
            self < 0 ? "/proc/self/ns/net" : path.c_str(), strerror(errno));
    if (self >= 0) close(self);
    return -1;
  }
  int fd = -1;
  if (setns(there, CLONE_NEWNET) != 0) {
    fprintf(stderr, "netns_delay_switch: setns(%s): %s\n", path.c_str(), strerror(errno));
  } else {
    fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    ifreq ifr{};
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname.c_str());
    unsigned offload = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
    if (fd < 0) {
      fprintf(stderr, "netns_delay_switch: open /dev/net/tun: %s\n", strerror(errno));
    } else if (ioctl(fd, TUNSETIFF, &ifr) != 0 || ioctl(fd, TUNSETOFFLOAD, offload) != 0) {
      fprintf(stderr, "netns_delay_switch: tap %s in %s: %s\n", ifname.c_str(), netns.c_str(),
              strerror(errno));
      close(fd);
      fd = -1;
    }
    if (setns(self, CLONE_NEWNET) != 0) {
      fprintf(stderr, "netns_delay_switch: cannot return to its own namespace: %s\n",
              strerror(errno));
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  close(there);
  close(self);
  return fd;
}

struct MacEntry {
  uint8_t mac[6];
  int port;
};

class Switch {
 public:
  Switch(std::vector<Port> ports, int64_t delay_ns, size_t queue_limit)
      : ports_(std::move(ports)), delay_ns_(delay_ns), queue_limit_(queue_limit) {}

  void Run() {
    std::vector<pollfd> fds(ports_.size());
    for (size_t i = 0; i < ports_.size(); ++i) fds[i] = {ports_[i].fd, POLLIN, 0};
    while (!g_stop) {
      int64_t now = NowNs();
      while (!queue_.empty() && queue_.front().due_ns <= now) {
        Forward(queue_.front());
        queued_bytes_ -= queue_.front().bytes.size();
        Recycle(std::move(queue_.front().bytes));
        queue_.pop_front();
      }
      timespec wait{}, *timeout = nullptr;
      if (!queue_.empty()) {
        int64_t left = queue_.front().due_ns - now;
        wait.tv_sec = left / 1000000000;
        wait.tv_nsec = left % 1000000000;
        timeout = &wait;
      }
      if (ppoll(fds.data(), fds.size(), timeout, nullptr) < 0) {
        if (errno == EINTR) continue;
        perror("netns_delay_switch: ppoll");
        return;
      }
      for (size_t i = 0; i < ports_.size(); ++i) {
        if (!(fds[i].revents & POLLIN)) continue;
        // A bounded batch per port, so that one busy port cannot hold the
        // others' frames (or the due ones) back.
        for (int batch = 0; batch < 64; ++batch) {
          std::vector<uint8_t> frame = Take(kMaxFrame);
          ssize_t n = read(ports_[i].fd, frame.data(), frame.size());
          if (n <= 0) {
            Recycle(std::move(frame));
            break;
          }
          frame.resize(size_t(n));
          Receive(int(i), std::move(frame));
        }
      }
    }
  }

  void Report() const {
    for (const Port& p : ports_)
      fprintf(stderr,
              "netns_delay_switch: port %s: %llu frames in, %llu out (%llu bytes), %llu dropped\n",
              p.netns.c_str(), (unsigned long long)p.frames_in, (unsigned long long)p.frames_out,
              (unsigned long long)p.bytes_out, (unsigned long long)p.dropped);
  }

 private:
  // Takes the frame just read (read straight into a pooled buffer: a copy
  // per frame would halve what the switch can forward). A small frame (an
  // ACK) moves to a small buffer, so the big ones are not held by ACKs.
  void Receive(int from, std::vector<uint8_t> frame) {
    ports_[from].frames_in++;
    size_t n = frame.size();
    if (n < kVnetHeader + 14) return Recycle(std::move(frame));
    const uint8_t* src_mac = frame.data() + kVnetHeader + 6;
    if (!(src_mac[0] & 1)) Learn(src_mac, from);
    if (queued_bytes_ + n > queue_limit_) {
      ports_[from].dropped++;
      return Recycle(std::move(frame));
    }
    std::vector<uint8_t> bytes;
    if (n <= kSmall) {
      bytes = Take(n);
      memcpy(bytes.data(), frame.data(), n);
      Recycle(std::move(frame));
    } else {
      bytes = std::move(frame);
    }
    queued_bytes_ += n;
    queue_.push_back(Frame{NowNs() + delay_ns_, from, std::move(bytes)});
  }

  void Forward(const Frame& f) {
    const uint8_t* dst_mac = f.bytes.data() + kVnetHeader;
    int to = (dst_mac[0] & 1) ? -1 : Lookup(dst_mac);
    for (size_t i = 0; i < ports_.size(); ++i) {
      if (int(i) == f.from || (to >= 0 && int(i) != to)) continue;
      Port& p = ports_[i];
      if (write(p.fd, f.bytes.data(), f.bytes.size()) == ssize_t(f.bytes.size())) {
        p.frames_out++;
        p.bytes_out += f.bytes.size() - kVnetHeader;
      } else {
        p.dropped++;  // EAGAIN, or the namespace's interface is down
      }
    }
  }

  void Learn(const uint8_t* mac, int port) {
    for (MacEntry& e : macs_)
      if (memcmp(e.mac, mac, 6) == 0) {
        e.port = port;
        return;
      }
    MacEntry e;
    memcpy(e.mac, mac, 6);
    e.port = port;
    macs_.push_back(e);
  }

  int Lookup(const uint8_t* mac) const {
    for (const MacEntry& e : macs_)
      if (memcmp(e.mac, mac, 6) == 0) return e.port;
    return -1;
  }

  // Frame buffers are reused, in two sizes: at a few GB/s a malloc (and the
  // page faults of a fresh 64 KiB) per frame would be the switch's own
  // bottleneck.
  std::vector<uint8_t> Take(size_t n) {
    std::vector<std::vector<uint8_t>>& pool = n <= kSmall ? small_ : big_;
    std::vector<uint8_t> v;
    if (!pool.empty()) {
      v = std::move(pool.back());
      pool.pop_back();
    } else {
      v.reserve(n <= kSmall ? kSmall : kMaxFrame);
    }
    v.resize(n);
    return v;
  }
  void Recycle(std::vector<uint8_t> v) {
    std::vector<std::vector<uint8_t>>& pool = v.capacity() >= kMaxFrame ? big_ : small_;
    if (pool.size() < 4096) pool.push_back(std::move(v));
  }

  std::vector<Port> ports_;
  int64_t delay_ns_;
  size_t queue_limit_;
  size_t queued_bytes_ = 0;
  std::deque<Frame> queue_;
  std::vector<MacEntry> macs_;
  std::vector<std::vector<uint8_t>> small_, big_;
};

void Usage(FILE* out) {
  fprintf(
      out,
      "usage: netns_delay_switch --delay-us N [--queue-mb M] [--ifname eth0] [--ready FILE] "
      "NETNS...\n"
      "A user-space Ethernet switch that delays every frame by N microseconds: one tap\n"
      "port (named --ifname, default eth0) in each network namespace NETNS (/run/netns/NETNS).\n"
      "FILE is created once every port exists; SIGTERM stops it and prints its counters.\n");
}

}  // namespace

int main(int argc, char** argv) {
  long delay_us = -1;
  size_t queue_mb = 64;
  std::string ifname = "eth0", ready;
  std::vector<std::string> netns;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--help" || a == "-h") {
      Usage(stdout);
      return 0;
    } else if (a == "--delay-us" && has_value) {
      delay_us = strtol(argv[++i], nullptr, 10);
    } else if (a == "--queue-mb" && has_value) {
      queue_mb = strtoul(argv[++i], nullptr, 10);
    } else if (a == "--ifname" && has_value) {
      ifname = argv[++i];
    } else if (a == "--ready" && has_value) {
      ready = argv[++i];
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "netns_delay_switch: unknown option or missing value: %s\n", a.c_str());
      Usage(stderr);
      return 2;
    } else {
      netns.push_back(a);
    }
  }
  if (delay_us < 0 || delay_us > 10000000 || netns.size() < 2 || queue_mb == 0) {
    fprintf(stderr,
            "netns_delay_switch: needs --delay-us 0..10000000 and at least two namespaces\n");
    Usage(stderr);
    return 2;
  }
  std::vector<Port> ports;
  for (const std::string& ns : netns) {
    Port p;
    p.netns = ns;
    p.fd = MakeTapIn(ns, ifname);
    if (p.fd < 0) return 1;
    ports.push_back(p);
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  prctl(PR_SET_TIMERSLACK, 1UL);
  sched_param sp{};
  sp.sched_priority = 10;
  bool fifo = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
  fprintf(stderr, "netns_delay_switch: %zu ports, %ld us delay, %s\n", ports.size(), delay_us,
          fifo ? "SCHED_FIFO" : "normal scheduling (SCHED_FIFO refused)");
  if (!ready.empty()) {
    FILE* f = fopen(ready.c_str(), "w");
    if (!f) {
      perror("netns_delay_switch: --ready");
      return 1;
    }
    fclose(f);
  }
  Switch sw(std::move(ports), int64_t(delay_us) * 1000, queue_mb << 20);
  sw.Run();
  sw.Report();
  return 0;
}
