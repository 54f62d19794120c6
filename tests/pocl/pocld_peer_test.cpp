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
// introduces).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cl_check.hpp"
#include "messages.h"  // PoCL 7.1's wire format (include/messages.h)

namespace {

using namespace memlayer::cltest;

// What became of a peer handshake: answered (the connection joined the
// session), or the connection closed without an answer.
enum class Handshake { answered, closed, no_answer };

// Connects to 127.0.0.1:`port` and sends a peer handshake for `session`
// with `key`, as a server the client introduced would (pocld's
// PeerHandler::connectPeer). Waits up to 10 s for the answer.
Handshake try_handshake(long port, std::uint64_t session, const std::uint8_t (&key)[AUTHKEY_LENGTH]) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) ADD_FAILURE() << "socket: " << std::strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ADD_FAILURE() << "connect to the peer port " << port << ": " << std::strerror(errno);
    close(fd);
    return Handshake::closed;
  }
  RequestMsg_t req{};
  req.message_type = MessageType_PeerHandshake;
  req.session = session;
  std::memcpy(req.authkey, key, AUTHKEY_LENGTH);
  req.m.peer_handshake.peer_id = 77;
  const auto size = static_cast<std::uint32_t>(request_size(req.message_type));
  const bool sent = write(fd, &size, sizeof size) == static_cast<ssize_t>(sizeof size) &&
                    write(fd, &req, size) == static_cast<ssize_t>(size);
  EXPECT_TRUE(sent) << "sending the handshake: " << std::strerror(errno);
  ReplyMsg_t reply{};
  std::size_t got = 0;
  Handshake result = Handshake::no_answer;
  while (got < sizeof reply) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) break;
    const ssize_t n = read(fd, reinterpret_cast<char*>(&reply) + got, sizeof reply - got);
    if (n <= 0) {
      result = Handshake::closed;
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  if (got == sizeof reply && reply.message_type == MessageType_PeerHandshakeReply) result = Handshake::answered;
  close(fd);
  return result;
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

  // Someone else, with a key of their own, at each server's peer port: every
  // session number a fresh server can have given out so far (this client's
  // among them) is refused.
  std::uint8_t wrong[AUTHKEY_LENGTH];
  std::memset(wrong, 0x5a, sizeof wrong);
  const std::uint8_t zero[AUTHKEY_LENGTH] = {};
  for (const ClusterServer& server : servers) {
    for (std::uint64_t session = 1; session <= 16; ++session) {
      EXPECT_EQ(try_handshake(server.port + 2, session, wrong), Handshake::closed)
          << "server " << server.pid << " took a peer for session " << session << " with a wrong key";
      EXPECT_EQ(try_handshake(server.port + 2, session, zero), Handshake::closed)
          << "server " << server.pid << " took a peer for session " << session << " with no key";
    }
  }

  // The session goes on: its servers still move its buffers.
  std::vector<std::uint32_t> back(kCount);
  CL_CHECK(clEnqueueCopyBuffer(s.queues[0].get(), b.get(), a.get(), 0, 0, kCount * 4, 0, nullptr, nullptr));
  CL_CHECK(clEnqueueReadBuffer(s.queues[0].get(), a.get(), CL_TRUE, 0, kCount * 4, back.data(), 0, nullptr, nullptr));
  EXPECT_EQ(back, bytes);
}

}  // namespace
