// PoCL 7.1's remote servers (pocld) connect to each other through their
// peer ports to move buffers server to server (doc/scale-out.md). Run as
// the client of a cluster of two servers with one memlayer device each
// (drivers/pocl/pocl-cluster.sh run ... --servers 2 --devices memlayer;
// cluster_servers() gives each server's first port: its peer port is the
// third).
//
// What a user of a cluster needs: only the servers its client introduced
// become peers of its session. 7.1's server took any connection to its peer
// port that named a session, and sessions are numbered 1, 2, ...: anyone who
// could reach the port joined a session as a peer and could push bytes into
// its buffers (patches/pocl-7.1-pocld-peers-present-the-session-key.patch:
// a peer presents the session's key, which the client hands the servers it
// introduces). And a session that loses a peer ends without hanging the
// server.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cl_check.hpp"
#include "messages.h"  // PoCL 7.1's wire format (include/messages.h)

namespace {

using namespace memlayer::cltest;

// A TCP connection, closed when it goes out of scope (fd < 0: none).
struct Socket {
  int fd = -1;
  Socket() = default;
  explicit Socket(int f) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

// A connection to 127.0.0.1:`port` (fd < 0 when it could not be made).
Socket connect_to(long port) {
  Socket s(socket(AF_INET, SOCK_STREAM, 0));
  if (s.fd < 0) return s;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int why = errno;  // the caller reports it; closing may change it
    s = Socket{};
    errno = why;
  }
  return s;
}

// Sends `req` as PoCL's client and servers do: its size, then its bytes.
bool send_request(int fd, const RequestMsg_t& req) {
  const auto size = static_cast<std::uint32_t>(request_size(req.message_type));
  return write(fd, &size, sizeof size) == static_cast<ssize_t>(sizeof size) &&
         write(fd, &req, size) == static_cast<ssize_t>(size);
}

// Reads one reply within 10 s; false when the connection closed or stayed
// silent first.
bool read_reply(int fd, ReplyMsg_t& reply) {
  std::size_t got = 0;
  while (got < sizeof reply) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) return false;
    const ssize_t n = read(fd, reinterpret_cast<char*>(&reply) + got, sizeof reply - got);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

// A session of the test's own, opened on a server's command port as PoCL's
// client opens one: its number and key, live while `connection` is open.
struct Session {
  Socket connection;
  std::uint64_t number = 0;
  std::uint8_t key[AUTHKEY_LENGTH] = {};
};

Session open_session(long port) {
  Session s;
  s.connection = connect_to(port);
  if (s.connection.fd < 0) {
    ADD_FAILURE() << "connect to the command port " << port << ": " << std::strerror(errno);
    return s;
  }
  RequestMsg_t req{};
  req.message_type = MessageType_CreateOrAttachSession;
  req.m.get_session.fast_socket = 1;
  ReplyMsg_t reply{};
  if (!send_request(s.connection.fd, req) || !read_reply(s.connection.fd, reply) ||
      reply.message_type != MessageType_CreateOrAttachSessionReply) {
    ADD_FAILURE() << "the server on port " << port << " opened no session";
    return s;
  }
  s.number = reply.m.get_session.session;
  std::memcpy(s.key, reply.m.get_session.authkey, AUTHKEY_LENGTH);
  return s;
}

// Whether a peer handshake for `session` with `key` at the peer port `port`
// is answered (the connection joins the session), as a server the client
// introduced would send it (pocld's PeerHandler::connectPeer).
bool handshake_answered(long port, std::uint64_t session, const std::uint8_t (&key)[AUTHKEY_LENGTH]) {
  const Socket peer = connect_to(port);
  if (peer.fd < 0) {
    ADD_FAILURE() << "connect to the peer port " << port << ": " << std::strerror(errno);
    return false;
  }
  RequestMsg_t req{};
  req.message_type = MessageType_PeerHandshake;
  req.session = session;
  std::memcpy(req.authkey, key, AUTHKEY_LENGTH);
  req.m.peer_handshake.peer_id = 77;
  EXPECT_TRUE(send_request(peer.fd, req)) << "sending the handshake: " << std::strerror(errno);
  ReplyMsg_t reply{};
  return read_reply(peer.fd, reply) && reply.message_type == MessageType_PeerHandshakeReply;
}

TEST(PocldPeers, APeerWithoutTheSessionKeyIsRefused) {
  const std::vector<ClusterServer> servers = cluster_servers();
  ASSERT_EQ(servers.size(), 2u) << "run under pocl-cluster.sh run --servers 2 --devices memlayer";

  // This client's sessions, live while the context is: the servers it
  // introduced to each other move a buffer between them.
  DeviceSet s = open_device_set("__kernel void unused(__global int* a) { a[0] = 0; }");
  ASSERT_EQ(s.devices.size(), 2u);
  constexpr std::size_t kCount = 1 << 14;
  std::vector<std::uint32_t> bytes(kCount), got(kCount);
  for (std::size_t i = 0; i < kCount; ++i) bytes[i] = static_cast<std::uint32_t>(i * 2654435761u);
  cl_int err = CL_SUCCESS;
  Mem a(clCreateBuffer(s.ctx.get(), CL_MEM_READ_WRITE, kCount * 4, nullptr, &err));
  CL_CHECK(err);
  Mem b(clCreateBuffer(s.ctx.get(), CL_MEM_READ_WRITE, kCount * 4, nullptr, &err));
  CL_CHECK(err);
  CL_CHECK(clEnqueueWriteBuffer(s.queues[0].get(), a.get(), CL_TRUE, 0, kCount * 4, bytes.data(), 0, nullptr, nullptr));
  CL_CHECK(clEnqueueCopyBuffer(s.queues[1].get(), a.get(), b.get(), 0, 0, kCount * 4, 0, nullptr, nullptr));
  CL_CHECK(clEnqueueReadBuffer(s.queues[1].get(), b.get(), CL_TRUE, 0, kCount * 4, got.data(), 0, nullptr, nullptr));
  ASSERT_EQ(got, bytes) << "a buffer moved from one server to the other";

  std::uint8_t wrong[AUTHKEY_LENGTH];
  std::memset(wrong, 0x5a, sizeof wrong);
  const std::uint8_t zero[AUTHKEY_LENGTH] = {};
  for (const ClusterServer& server : servers) {
    const long peer_port = server.port + 2;
    // A session of the test's own: its key is taken, a key one bit off and
    // none are not.
    Session own = open_session(server.port);
    ASSERT_GE(own.connection.fd, 0);
    EXPECT_TRUE(handshake_answered(peer_port, own.number, own.key))
        << "server " << server.pid << " refused a peer with the key of session " << own.number;
    std::uint8_t off_by_one_bit[AUTHKEY_LENGTH];
    std::memcpy(off_by_one_bit, own.key, AUTHKEY_LENGTH);
    off_by_one_bit[AUTHKEY_LENGTH - 1] ^= 1;
    EXPECT_FALSE(handshake_answered(peer_port, own.number, off_by_one_bit))
        << "server " << server.pid << " took a peer for session " << own.number << " with a key one bit off";
    EXPECT_FALSE(handshake_answered(peer_port, own.number, zero))
        << "server " << server.pid << " took a peer for session " << own.number << " with no key";
    // Every session number a fresh server can have given out so far (this
    // client's among them): someone else's key, and none, are refused.
    for (std::uint64_t session = 1; session <= 16; ++session) {
      if (session == own.number) continue;
      EXPECT_FALSE(handshake_answered(peer_port, session, wrong))
          << "server " << server.pid << " took a peer for session " << session << " with a wrong key";
      EXPECT_FALSE(handshake_answered(peer_port, session, zero))
          << "server " << server.pid << " took a peer for session " << session << " with no key";
    }
    // `own` ends here: its connection closes, and with it the session.
  }

  // Each of those sessions of the test's own ended with its peer lost (its
  // connection closed): this client's session goes on, its servers still
  // move its buffers (7.1's server hung ending such a session, and then
  // answered no one: patches/pocl-7.1-remote-session-ends-after-a-lost-peer.patch).
  std::vector<std::uint32_t> back(kCount);
  const cl_int moved_back = bounded("a move back after the test's own sessions ended", 60, [&] {
    cl_int e = clEnqueueCopyBuffer(s.queues[0].get(), b.get(), a.get(), 0, 0, kCount * 4, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return e;
    return clEnqueueReadBuffer(s.queues[0].get(), a.get(), CL_TRUE, 0, kCount * 4, back.data(), 0, nullptr, nullptr);
  });
  ASSERT_EQ(moved_back, CL_SUCCESS);
  EXPECT_EQ(back, bytes);
}

}  // namespace
