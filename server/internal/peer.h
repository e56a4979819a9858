// Copyright ragkv authors.
//
// peer.h: whether the client of a connection has gone, for a handler that
// holds no socket (cpp-httplib 0.11.4 hands handlers the request's
// addresses, not its descriptor), and ending a stopped server's
// connections. Linux only.

#ifndef RAGKV_SERVER_INTERNAL_PEER_H_
#define RAGKV_SERVER_INTERNAL_PEER_H_

#include <string>

namespace ragkv::server::internal {

// ConnectionFd: this process's TCP socket whose local port is `local_port`
// and whose peer is `remote_addr`:`remote_port` (numeric host, as
// getnameinfo writes it); -1 when none is open. The caller must hold the
// connection open (a handler running on it does) for the answer to stay
// true.
int ConnectionFd(const std::string& remote_addr, int remote_port, int local_port);

// PeerClosed: true once the peer of `fd` has closed or reset the
// connection (POLLRDHUP, POLLHUP or POLLERR), without reading from it:
// bytes the client sent ahead (a pipelined request) stay unread. False for
// fd < 0.
bool PeerClosed(int fd);

// ShutdownConnections: shutdown(SHUT_RDWR) on every connected TCP socket of
// this process whose local port is `local_port` (responses being written
// are cut: the caller waits for them first); returns how many. Called
// once a server's listener is closed, these are its accepted connections:
// cpp-httplib 0.11.4 notices a stop only between requests, so a worker
// waiting on an idle kept-alive connection would hold the stop for up to
// the keep-alive timeout. After the shutdown it reads EOF and closes the
// socket at once. Sockets that only listen (no peer) are left alone.
int ShutdownConnections(int local_port);

}  // namespace ragkv::server::internal

#endif  // RAGKV_SERVER_INTERNAL_PEER_H_
