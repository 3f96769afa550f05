// Network addresses: loopback ones refused across hosts, and a free port
// for --no-store.
#include "network_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>

#include "plexus/launch_env.hpp"
#include "plexus/settings/environment.hpp"

namespace plexus::run {
namespace {

// Whether address (numeric, IPv4 or IPv6) is this host only: 127.0.0.0/8,
// ::1, or 127.x mapped into IPv6.
bool IsLoopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

// The loopback address that addr is or resolves to ("localhost", and a host
// name that /etc/hosts maps to 127.0.1.1, as Debian and Ubuntu do), or "".
std::string LoopbackAddressOf(const std::string& addr) {
  std::string lower = addr;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  std::string found;
  if (::getaddrinfo(addr.c_str(), nullptr, &hints, &list) == 0) {
    for (addrinfo* ai = list; ai != nullptr && found.empty(); ai = ai->ai_next) {
      if (!IsLoopback(ai->ai_addr)) continue;
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw =
          ai->ai_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr);
      found = ::inet_ntop(ai->ai_family, raw, text, sizeof(text)) != nullptr ? text : addr;
    }
    ::freeaddrinfo(list);
  }
  if (found.empty() && (lower == "localhost" || lower.ends_with(".localhost"))) found = addr;
  return found;
}

}  // namespace

// With --nnodes > 1 the other nodes' launchers and ranks connect to
// --master-addr, and every rank to the address its host's ranks listen on
// (the local address that routes to the master; PLEXUS_SOCKET_IFNAME or
// PLEXUS_TCP_ADDR override it). A loopback address in either place is this
// host only: the job would wait PLEXUS_TIMEOUT for nodes that cannot connect
// and then fail far from the cause, so it is refused here. Returns "" or the
// error.
std::string CheckReachableByOtherNodes(const Options& opts) {
  const std::string nodes = "--nnodes " + std::to_string(opts.nnodes);
  const std::string instead =
      "give node 0's address on the network the nodes share (e.g. one that `hostname -I` "
      "prints there), the same on every node; to try several nodes on this one host, add "
      "--local-nodes";
  if (!opts.master_addr_given) {
    return nodes + " needs --master-addr ADDR: the default, 127.0.0.1, is a loopback address " +
           "that the other nodes cannot reach; " + instead;
  }
  const std::string loopback = LoopbackAddressOf(opts.master_addr);
  if (!loopback.empty()) {
    const std::string what =
        loopback == opts.master_addr
            ? "--master-addr " + opts.master_addr + " is"
            : "--master-addr " + opts.master_addr + " resolves to " + loopback + ", which is";
    return what + " a loopback address: the other nodes (" + nodes +
           ") cannot reach node 0's rendezvous store there; " + instead;
  }
  const char* ifname = plexus::settings::Raw(plexus::settings::Id::kSocketIfname);
  if (std::string address; ifname != nullptr && *ifname != '\0' &&
                           InterfaceAddress(ifname, &address).ok() &&
                           !LoopbackAddressOf(address).empty()) {
    return std::string("PLEXUS_SOCKET_IFNAME=") + ifname + " is a loopback interface (" + address +
           "): with " + nodes +
           " ranks on the other nodes could not connect to the ranks here; name the interface "
           "of the network the nodes share, or unset it (then the interface that routes to "
           "--master-addr is used)";
  }
  const char* tcp_addr = plexus::settings::Raw(plexus::settings::Id::kTcpAddr);
  if (tcp_addr != nullptr && *tcp_addr != '\0' && !LoopbackAddressOf(tcp_addr).empty()) {
    return std::string("PLEXUS_TCP_ADDR=") + tcp_addr + " is a loopback address: with " + nodes +
           " ranks on the other nodes could not connect to the ranks here; give this host's "
           "address on the network the nodes share, or unset it (then the address that routes "
           "to --master-addr is used)";
  }
  return "";
}

// --no-store: binds addr:0, reads the port the OS chose and closes the socket.
// Racy by nature (someone else may take the port before rank 0 binds it);
// that is the price of not hosting the store.
bool PickFreePort(const std::string& addr, uint16_t* port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &list);
  if (rc != 0) {
    *error = "cannot resolve '" + addr + "': " + ::gai_strerror(rc);
    return false;
  }
  *error = "no usable address for '" + addr + "'";
  bool found = false;
  for (addrinfo* ai = list; ai != nullptr && !found; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      *error = "cannot bind '" + addr + "': " + std::strerror(errno);
    } else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      found = true;
    }
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return found;
}

}  // namespace plexus::run
