// Copyright ragkv authors.

#include "server/internal/peer.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace ragkv::server::internal {
namespace {

// Port and numeric host of a socket address; port -1 when not IP.
int PortAndHost(const sockaddr_storage& a, socklen_t len, std::string* host) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return -1;
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof(h), s, sizeof(s),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return -1;
  }
  if (host != nullptr) *host = h;
  return std::atoi(s);
}

bool Matches(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  if (PortAndHost(a, len, nullptr) != local_port) return false;
  len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  std::string host;
  return PortAndHost(a, len, &host) == remote_port && host == remote_addr;
}

// ForEachFd: fn(fd) for each open descriptor of this process but the
// directory's own; stops when fn returns true.
template <typename Fn>
void ForEachFd(Fn fn) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != dirfd(dir) && fn(fd)) break;
  }
  closedir(dir);
}

bool ConnectedOnPort(int fd, int local_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  if (PortAndHost(a, len, nullptr) != local_port) return false;
  int type = 0;
  socklen_t tl = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) return false;
  len = sizeof(a);
  return getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
}

}  // namespace

int ConnectionFd(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  int found = -1;
  ForEachFd([&](int fd) {
    if (!Matches(fd, remote_addr, remote_port, local_port)) return false;
    found = fd;
    return true;
  });
  return found;
}

int ShutdownConnections(int local_port) {
  if (local_port <= 0) return 0;
  int n = 0;
  ForEachFd([&](int fd) {
    // On a duplicate: if the worker closes `fd` and the number is reused
    // meanwhile, the check and the shutdown still see the same socket.
    const int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return false;
    if (ConnectedOnPort(d, local_port) && shutdown(d, SHUT_RDWR) == 0) ++n;
    close(d);
    return false;
  });
  return n;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ragkv::server::internal
