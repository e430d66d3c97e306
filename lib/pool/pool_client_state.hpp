// pool_client's private state, shared by its files: pool_client.cpp
// (connections, framing, deadlines), pool_reads.cpp (read planning, degraded
// reads, scrub) and pool_writes.cpp. Not for other users.
#pragma once

#include "core/error.hpp"
#include "core/mapping.hpp"
#include "pool/pool_client.hpp"
#include "pool/pool_directory.hpp"
#include "transport/rdma/rdma_connection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

namespace ferry::pool {

namespace detail {

// refused: the node answered "forbidden" (this host is not one of the
// object's members); it counts as failed, and the error says so.
enum member_state : uint8_t { idle, requested, arrived, failed, slow, missing, refused };

inline constexpr uint64_t initial_deadline_ns = 50'000'000;

} // namespace detail

using namespace detail;

struct pool_client::expectation {
    uint64_t request_id = 0;
    uint64_t sent_ns = 0;
    op operation = op::get;
    int32_t read_slot = -1;
    uint32_t read_gen = 0;
    uint32_t stripe_index = 0;
    uint8_t member = 0;
};

// One-sided reads of one node's arena over RDMA (the node offered them,
// pagesrv --pool-rdma; pool_one_sided.cpp): a READ of the chunk's
// directory window, then of its data and metadata, into landing slots
// registered here; a miss, or a checksum that does not match what the
// bucket promised, goes two-sided on the TCP link.
struct pool_client::one_sided {
    static constexpr uint32_t slots = 64;        // member reads in flight
    static constexpr size_t header_bytes = 1024; // the window, then the metadata

    std::unique_ptr<transport::rdma::rdma_connection> conn;
    uint64_t directory_addr = 0, directory_buckets = 0, arena_addr = 0, meta_addr = 0;
    uint32_t directory_rkey = 0, arena_rkey = 0, meta_rkey = 0, meta_stride = 0;
    uint32_t chunk_size = 0;
    size_t slot_bytes = 0;
    mapping landing;
    transport::rdma::mr_ptr landing_mr;
    struct in_flight {
        expectation e;
        uint64_t chunk = 0;
        directory_bucket found{};
    };
    std::array<in_flight, slots> ops{};
    std::vector<uint32_t> free_ops;

    [[nodiscard]] std::byte* window(uint32_t i) const noexcept {
        return landing.data() + i * slot_bytes;
    }
    [[nodiscard]] std::byte* meta(uint32_t i) const noexcept { return window(i) + 512; }
    [[nodiscard]] std::byte* data(uint32_t i) const noexcept { return window(i) + header_bytes; }
    [[nodiscard]] bool busy() const noexcept { return free_ops.size() < slots; }
};

// One connection to one node. Replies arrive in request order, so the
// expectations form a ring; a reply is parsed incrementally, its payload
// read straight into the buffer waiting for it.
struct pool_client::link {
    net::endpoint ep;
    std::unique_ptr<net::stream> conn; // TLS
    std::unique_ptr<one_sided> rdma;   // if the node offers one-sided reads
    std::vector<expectation> ring;
    size_t head = 0, count = 0;

    enum class stage : uint8_t { header, meta, data } at = stage::header;
    header_bytes header{};
    size_t have = 0;
    reply current;
    std::byte* meta_dst = nullptr;
    std::byte* data_dst = nullptr;

    uint64_t last_reply_ns = 0; // or the last strike: when the deadline clock restarted
    uint64_t last_heard_ns = 0; // the last reply, for the death verdict (heard())
    double srtt_ns = 0, rttvar_ns = 0;
    bool rtt_valid = false;
    uint32_t strikes = 0;
    bool told_last_node_wait = false; // logged once per silence

    [[nodiscard]] bool live() const noexcept { return conn != nullptr; }
    // Any reply, two-sided or a one-sided READ: the node is alive.
    void heard(uint64_t now) noexcept {
        last_heard_ns = now;
        told_last_node_wait = false;
    }
    [[nodiscard]] expectation& front() noexcept { return ring[head]; }
    void push(const expectation& e) {
        if (count == ring.size())
            throw error(
                fmt::format("too many requests outstanding to pool node {}", ep.to_string()));
        ring[(head + count) % ring.size()] = e;
        count++;
    }
    void pop() noexcept {
        head = (head + 1) % ring.size();
        count--;
    }
    void sample(uint64_t ns) noexcept {
        const double r = double(ns);
        if (!rtt_valid) {
            srtt_ns = r;
            rttvar_ns = r / 2;
            rtt_valid = true;
            return;
        }
        rttvar_ns = 0.75 * rttvar_ns + 0.25 * std::fabs(srtt_ns - r);
        srtt_ns = 0.875 * srtt_ns + 0.125 * r;
    }
    [[nodiscard]] uint64_t deadline_ns(uint64_t lo, uint64_t hi) const noexcept {
        if (!rtt_valid)
            return std::max(lo, initial_deadline_ns);
        return std::clamp(uint64_t(srtt_ns + 4 * rttvar_ns), lo, hi);
    }
};

struct pool_client::read_op {
    int32_t index = 0; // in _reads
    bool active = false;
    uint32_t gen = 0;
    bool distrust = false;
    bool all_members = false;
    uint64_t first_page = 0;
    uint32_t nr_pages = 0;
    uint64_t first_stripe = 0;
    uint32_t nr_stripes = 0;
    uint32_t stripes_left = 0;
    read_status status = read_status::pending;
    std::string error;
    mapping buffer;              // data, then parity
    std::byte* data = nullptr;   // whole stripes' data members, page aligned
    std::byte* parity = nullptr; // the parity members, per stripe
    std::vector<uint64_t> sums;
    std::vector<uint8_t> states; // stripe * max_members + member
    std::vector<uint8_t> done;
};

} // namespace ferry::pool
