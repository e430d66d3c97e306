// Which RDMA connects to admit: those presenting a token issued over an
// authenticated TLS connection (a page channel's or a pool connection's
// acceptance), each good for one connect. The RDMA CM itself authenticates
// nobody; the token is what ties a queue pair to a TLS peer.
#pragma once

#include "transport/rdma/rdma_connection.hpp"
#include "transport/rdma/rdma_messages.hpp"

#include <cstddef>
#include <mutex>
#include <span>
#include <vector>

namespace ferry::transport::rdma {

class token_gate {
  public:
    // At most `outstanding` unused tokens; issuing more retires the oldest.
    explicit token_gate(size_t outstanding) : _outstanding(outstanding) {}
    [[nodiscard]] channel_token issue();
    // Whether a connect's private data (padded by the CM) starts with a
    // hello carrying an issued token; the token is used up.
    [[nodiscard]] bool admit(std::span<const std::byte> private_data);
    // admit() as a listener's admission: accepted with no private data.
    [[nodiscard]] rdma_listener::admission admission();

  private:
    size_t _outstanding;
    std::mutex _mu;
    std::vector<channel_token> _tokens;
};

} // namespace ferry::transport::rdma
