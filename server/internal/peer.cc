// Copyright ragkv authors.

#include "server/internal/peer.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

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

}  // namespace

int ConnectionFd(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != dirfd(dir) && Matches(fd, remote_addr, remote_port, local_port)) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ragkv::server::internal
