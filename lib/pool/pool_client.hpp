// The client side of the memory pool: one connection per node, striping
// and parity through the shared codec (raid.hpp), reads that go degraded the
// moment a node is known dead or late, and the writes of the source's push
// and of a rebuild.
//
// Failure detection: a node is dead when its connection breaks (a killed
// daemon's kernel closes it at once), or after `strikes_to_dead` consecutive
// missed deadlines with no reply for `dead_silence`. The deadline adapts to
// the node like TCP's retransmission timer (RFC 6298: srtt + 4 rttvar over
// per-reply service times, floored at `min_deadline`), so a slow reply costs
// one deadline and a degraded read, never a fixed long timeout. A read never
// waits for a node it already gave up on: the members it needs are rebuilt
// from parity.
// A silent node whose loss the level cannot survive (RAID-5 with a node
// already gone) is given `last_node_silence` instead: declaring it dead
// would fail every read that needs it, and with it a restored workload, so
// a stalled but live node (a host paused for seconds) is worth waiting for.
//
// Single-threaded: one client belongs to one thread (or one lock). Clients
// in one process share a pool_health, so a loss seen by one is known to all.
#pragma once

#include "core/unique_fd.hpp"
#include "pool/pool_health.hpp"
#include "pool/pool_layout.hpp"
#include "pool/raid.hpp"
#include "transport/rdma/rdma_connection.hpp"
#include "wire/control.pb-c.h"
#include "wire/pool_wire.hpp"

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ferry::pool {

enum class read_mode : uint8_t {
    normal,
    distrust_data, // rebuild the wanted pages from the other members (a copy failed its checksum)
    all_members,   // read every member and check the parity (scrub)
};

enum class read_status : uint8_t {
    pending,
    ok,
    missing, // some stripe is not in the pool (yet): ask the source
    lost,    // more members lost than the level tolerates
};

struct client_stats {
    uint64_t reads = 0;
    uint64_t degraded_stripes = 0; // rebuilt from parity on the read path
    uint64_t hedged_members = 0;   // asked of another node after a missed deadline
    uint64_t bytes_read = 0;
    uint64_t bytes_written = 0;
    uint64_t missed_deadlines = 0;
    uint64_t one_sided_reads = 0;     // members READ over RDMA, checksums good
    uint64_t one_sided_fallbacks = 0; // ... not in the arena or changed: asked two-sided
};

class pool_client {
  public:
    struct options {
        std::string name = "client";  // shown in the nodes' logs
        uint32_t read_slots = 0;      // concurrent reads (0: none, a writer)
        uint32_t max_read_pages = 64; // pages per read at most
        std::chrono::milliseconds connect_timeout{2000};
        std::chrono::microseconds min_deadline{2000};
        std::chrono::microseconds max_deadline{200'000};
        uint32_t strikes_to_dead = 3;
        std::chrono::microseconds dead_silence{500'000}; // ... and no reply for this long
        // ... or this long, when the pool cannot lose one more node.
        std::chrono::microseconds last_node_silence{10'000'000};
        // One-sided reads: how long an RDMA connection waits out a silent node.
        transport::rdma::patience rdma_wait{};

        // The same, with the failure detector's times multiplied by `scale`
        // (a migration's --deadline-scale, for slow hosts such as emulated
        // VMs). Never below the defaults: a scale under 1 shortens a test's
        // waits, and must not make a node look dead sooner.
        [[nodiscard]] options with_deadline_scale(double scale) const {
            options o = *this;
            if (scale > 1.0) {
                auto times = [scale](std::chrono::microseconds t) {
                    return std::chrono::microseconds(int64_t(double(t.count()) * scale));
                };
                o.min_deadline = times(min_deadline);
                o.max_deadline = times(max_deadline);
                o.dead_silence = times(dead_silence);
                o.last_node_silence = times(last_node_silence);
                o.rdma_wait = transport::rdma::patience::scaled(scale);
            }
            return o;
        }
    };

    // Connects to every live slot; a node that cannot be reached is
    // declared dead (the caller decides whether the pool can still serve).
    pool_client(const pool_spec& spec, uint64_t object, std::shared_ptr<pool_health> health,
                options opt);
    pool_client(const pool_client&) = delete;
    pool_client& operator=(const pool_client&) = delete;
    ~pool_client();

    [[nodiscard]] const stripe_layout& layout() const noexcept { return _layout; }
    [[nodiscard]] uint64_t object() const noexcept { return _object; }
    [[nodiscard]] const client_stats& stats() const noexcept { return _stats; }
    [[nodiscard]] pool_health& health() noexcept { return *_health; }

    // --- reads, asynchronous (the page channel) -------------------------
    // Starts reading pages [first_page, +nr_pages). Returns the read's
    // slot, or -1 when every slot is busy.
    [[nodiscard]] int begin_read(uint64_t first_page, uint32_t nr_pages,
                                 read_mode mode = read_mode::normal);
    [[nodiscard]] read_status poll_read(int slot) const noexcept;
    // Valid once ok: the pages and their checksums as the source computed them.
    [[nodiscard]] const std::byte* read_pages(int slot) const noexcept;
    [[nodiscard]] const uint64_t* read_checksums(int slot) const noexcept;
    [[nodiscard]] const std::string& read_error(int slot) const noexcept;
    // Once ok: the index of the first page whose bytes miss its checksum.
    [[nodiscard]] std::optional<uint32_t> first_bad_page(int slot) const noexcept;
    void end_read(int slot) noexcept;
    // For synchronous readers (a rebuild, a blob): begin_read, then drive the
    // client until the read ends. Throws if no slot is free or the read is
    // still pending at `until`. The caller still calls end_read(slot).
    [[nodiscard]] read_status read_now(
        uint64_t first_page, uint32_t nr_pages, read_mode mode, int& slot,
        std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());

    // Sends what is queued and takes in every reply that has arrived,
    // waiting up to `wait` for the first; checks deadlines.
    void progress(std::chrono::microseconds wait = std::chrono::microseconds(0));

    // --- writes, synchronous (the push, a rebuild) ----------------------
    // Stores stripes [first_stripe, +count): `pages` holds count *
    // pages_per_stripe pages (zero beyond the object's end), `checksums`
    // one per page. Returns the member writes that failed (dead nodes).
    uint32_t put_stripes(uint64_t first_stripe, uint32_t count, const std::byte* pages,
                         const uint64_t* checksums);
    // Stores only the members that live on `slot` (a rebuild onto a spare).
    uint32_t put_slot(uint64_t first_stripe, uint32_t count, uint32_t slot, const std::byte* pages,
                      const uint64_t* checksums);
    // Forgets the object on every live node.
    void drop_object();
    // Lets the peer whose certificate names `identity` read, write and drop
    // the object on every live node; returns the nodes that refused or
    // failed. The first to write or grant an object becomes its member.
    uint32_t grant(const std::string& identity);
    // The node's counters (JSON), or an error text.
    std::string node_stats(uint32_t slot);

  private:
    struct link;
    struct one_sided;
    struct read_op;
    struct expectation;

    void connect_slot(uint32_t slot);
    void connect_one_sided(uint32_t slot, const FerryControl__PoolAccepted& accepted);
    [[nodiscard]] bool post_one_sided(uint32_t slot, const expectation& e);
    size_t pump_one_sided(uint32_t slot);
    void one_sided_done(uint32_t slot, const ibv_wc& wc);
    void ask_two_sided(uint32_t slot, const expectation& e);
    void lose(uint32_t slot, const std::string& reason);
    void sync_with_health();
    [[nodiscard]] bool post(uint32_t slot, const request& r, const void* meta, const void* data,
                            const expectation& e);
    void read_link(uint32_t slot);
    void deliver(uint32_t slot, const expectation& e, const reply& r);
    void member_failed(const expectation& e, uint8_t state);
    void check_deadlines();
    // One more lost node would leave some stripe unreadable.
    [[nodiscard]] bool unsurvivable_loss() const noexcept;
    void plan_stripe(read_op& op, uint32_t i);
    [[nodiscard]] bool request_member(read_op& op, uint32_t i, uint32_t member);
    [[nodiscard]] bool usable(const read_op& op, uint32_t i, uint32_t member) const noexcept;
    void finish_stripe(read_op& op, uint32_t i, bool degraded);
    void plan_scrub(read_op& op, uint32_t i, uint32_t n_arrived, uint32_t n_active);
    [[nodiscard]] std::byte* member_buffer(read_op& op, uint32_t i, uint32_t member) const noexcept;
    void wait_puts();
    uint32_t put_members(uint64_t first_stripe, uint32_t count, int only_slot,
                         const std::byte* pages, const uint64_t* checksums);

    stripe_layout _layout;
    raid::codec _codec;
    uint64_t _object;
    std::shared_ptr<pool_health> _health;
    options _opt;
    uint32_t _health_version = 0;
    std::vector<std::unique_ptr<link>> _links; // by slot
    std::vector<std::unique_ptr<read_op>> _reads;
    uint64_t _next_id = 1;
    uint32_t _puts_outstanding = 0;
    uint32_t _put_failures = 0;
    std::string _stats_reply;
    bool _stats_done = false;
    client_stats _stats;
    std::vector<std::byte> _scratch; // payloads nobody waits for any more
};

} // namespace ferry::pool
